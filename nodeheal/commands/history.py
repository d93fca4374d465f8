"""``nodeheal history``: remediation records from the ledger; ``history show`` for one execution.

Each record carries its Step Functions execution name and a console link, so the table is where
"what happened to that node?" starts and the execution history is one click away.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from nodeheal.aws.ledger import RECORD_RETENTION, Ledger
from nodeheal.commands.aws_access import add_aws_arguments, aws_errors, ledger_table, session
from nodeheal.commands.output import print_fields, print_json, print_table
from nodeheal.errors import InvalidEventError, NodeHealError
from nodeheal.timestamps import format_timestamp, parse_timestamp, utc_now
from nodeheal.workflow.recording import console_url
from nodeheal.workflow.records import Outcome, RemediationRecord

_DURATION = re.compile(r"^(?P<amount>\d+)(?P<unit>[smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
DEFAULT_SINCE = "24h"


class RecordNotFoundError(NodeHealError):
    """No ledger record for the execution the operator named."""


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """``24h``/``30m``/``7d``/``2w``/``90s`` ago, or an RFC 3339 timestamp with a zone."""
    now = now or utc_now()
    found = _DURATION.match(value.strip())
    if found:
        return now - timedelta(**{_UNITS[found.group("unit")]: int(found.group("amount"))})
    try:
        return parse_timestamp(value, "--since")
    except InvalidEventError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is neither a duration (30m, 24h, 7d, 2w) nor an RFC 3339 time (2026-11-21T10:00:00Z)"
        ) from None


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "history",
        help="remediation records from the ledger (history show EXECUTION for one)",
        description=(
            "List remediation records, newest first, with each execution's name and console URL. "
            "`nodeheal history show EXECUTION` prints one record with its stage timings."
        ),
    )
    _add_filters(parser)
    add_aws_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the records as JSON")
    parser.set_defaults(func=run_list)
    actions = parser.add_subparsers(dest="history_command", metavar="{show}")
    show = actions.add_parser(
        "show",
        help="one execution's record with its stage timings and console URL",
        description="Print one remediation record: decision, outcome, stage timings, console URL.",
    )
    show.add_argument("execution", metavar="EXECUTION", help="execution name or ARN")
    show.add_argument(
        "--cluster",
        action="append",
        default=[],
        help="cluster to look in (repeatable; default: every cluster in the ledger)",
    )
    add_aws_arguments(show)
    show.add_argument("--json", action="store_true", help="print the record as JSON")
    show.set_defaults(func=run_show)


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        action="append",
        default=[],
        help="only this cluster (repeatable; default: every cluster in the ledger, found by a table scan)",
    )
    parser.add_argument("--node", help="only this node")
    parser.add_argument(
        "--since",
        type=parse_since,
        default=None,
        help=(
            "records started after this: a duration (30m, 24h, 7d) or an RFC 3339 time "
            f"(default: {DEFAULT_SINCE})"
        ),
    )
    parser.add_argument(
        "--outcome",
        action="append",
        choices=[outcome.value for outcome in Outcome],
        default=[],
        help="only these outcomes (repeatable)",
    )
    parser.add_argument(
        "--limit", type=int, default=100, help="show at most this many records (default: 100)"
    )


def open_ledger(args: argparse.Namespace) -> tuple[Ledger, str, str]:
    """(ledger, region, table name) from --table or the stack's outputs."""
    boto_session = session(args)
    table = ledger_table(args, boto_session)
    with aws_errors(f"open ledger table {table}"):
        client = boto_session.client("dynamodb")
    return Ledger(client, table), str(boto_session.region_name), table


def _clusters(ledger: Ledger, table: str, wanted: Sequence[str]) -> list[str]:
    if wanted:
        return list(dict.fromkeys(wanted))
    with aws_errors(f"list the clusters in ledger table {table}"):
        return ledger.known_clusters()


def select_records(
    ledger: Ledger,
    clusters: Sequence[str],
    *,
    node: str | None,
    since: datetime,
    outcomes: Sequence[str],
    limit: int,
) -> list[RemediationRecord]:
    records: list[RemediationRecord] = []
    for cluster in clusters:
        found = ledger.node_records(cluster, node, since) if node else ledger.cluster_records(cluster, since)
        records.extend(r for r in found if not outcomes or r.outcome.value in outcomes)
    records.sort(key=lambda r: r.started_at, reverse=True)
    return records[: max(0, limit)]


def run_list(args: argparse.Namespace) -> int:
    ledger, region, table = open_ledger(args)
    since = args.since or parse_since(DEFAULT_SINCE)
    with aws_errors(f"read ledger table {table}"):
        clusters = _clusters(ledger, table, args.cluster)
        records = select_records(
            ledger, clusters, node=args.node, since=since, outcomes=args.outcome, limit=args.limit
        )
    if args.json:
        print_json([record_json(r, region) for r in records])
        return 0
    if not records:
        scope = ", ".join(clusters) if clusters else "no cluster has records yet"
        print(f"no remediation records since {format_timestamp(since)} ({scope})")
        return 0
    rows = [
        {
            "started": format_timestamp(r.started_at),
            "cluster": r.cluster,
            "node": r.node,
            "fault": _fault(r),
            "action": r.action.value,
            "outcome": r.outcome.value,
            "took": _duration(r.stage_seconds.get("faultToRecorded")),
            "execution": r.execution,
        }
        for r in records
    ]
    print_table(
        rows,
        [
            ("started", "STARTED"),
            ("cluster", "CLUSTER"),
            ("node", "NODE"),
            ("fault", "FAULT"),
            ("action", "ACTION"),
            ("outcome", "OUTCOME"),
            ("took", "TOOK"),
            ("execution", "EXECUTION"),
        ],
    )
    print(
        f"\n{len(records)} record(s) since {format_timestamp(since)}; "
        "details: nodeheal history show EXECUTION"
    )
    return 0


def run_show(args: argparse.Namespace) -> int:
    ledger, region, table = open_ledger(args)
    execution = args.execution.rsplit(":", 1)[-1] if args.execution.startswith("arn:") else args.execution
    with aws_errors(f"read ledger table {table}"):
        clusters = _clusters(ledger, table, args.cluster)
        # The execution name starts with the cluster's; looking there first saves reads.
        ordered = sorted(clusters, key=lambda c: not execution.startswith(_name_prefix(c)))
        record = None
        for cluster in ordered:
            record = ledger.find_record(cluster, execution)
            if record is not None:
                break
    if record is None:
        raise RecordNotFoundError(
            f"no record of execution {execution} in {', '.join(clusters) or 'the ledger'} "
            f"(records are kept {RECORD_RETENTION.days} days; a running execution has no record yet)"
        )
    if args.json:
        print_json(record_json(record, region))
        return 0
    _print_record(record, region)
    return 0


def _name_prefix(cluster: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", cluster).strip("-")


def record_json(record: RemediationRecord, region: str) -> dict[str, Any]:
    document = record.to_item()
    document.pop("recordType", None)
    document["consoleUrl"] = console_url(record.execution_arn, _region_of(record.execution_arn) or region)
    return document


def _region_of(arn: str) -> str:
    parts = arn.split(":")
    return parts[3] if len(parts) > 3 else ""


def _fault(record: RemediationRecord) -> str:
    if record.xid is not None:
        return f"Xid {record.xid}"
    condition = record.condition
    return f"{condition.get('type', '')}={condition.get('status', '')}" if condition else record.signal


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _drain_classes(record: RemediationRecord) -> str:
    """``emptyDir 1 (training/cache-0); unmanaged 2 (ml/debug, ml/shell)``: the drain policy's
    classes the pods fell in (docs/operations.md, Drain policy)."""
    parts = []
    for name, entry in record.drain_classes.items():
        pods = entry.get("pods") or []
        named = f" ({', '.join(str(pod) for pod in pods)})" if pods else ""
        parts.append(f"{name} {entry.get('count', 0)}{named}")
    return "; ".join(parts)


def _print_record(record: RemediationRecord, region: str) -> None:
    condition = record.condition
    print_fields(
        [
            ("Execution", record.execution),
            ("Cluster", record.cluster),
            ("Node", record.node),
            ("Instance", f"{record.instance_id or '-'} ({record.instance_type or 'unknown type'})"),
            ("Pool", record.node_pool),
            ("Condition", " ".join(f"{k}={condition.get(k, '')}" for k in ("type", "status", "reason"))),
            ("Message", condition.get("message", "")),
            ("Fault", _fault(record)),
            (
                "Decision",
                f"{record.action.value} (policy asked for {record.planned_action.value})"
                + (" [escalated]" if record.escalated else ""),
            ),
            ("Why", record.reason),
            ("Outcome", f"{record.outcome.value}: {record.summary}"),
            (
                "Drain",
                f"{record.pods_evicted} evicted, {record.pods_forced} force-deleted, "
                f"{record.pdb_blocked} evictions refused by PDBs",
            ),
            ("Classes", _drain_classes(record)),
            ("Error", f"{record.error}: {record.error_cause}" if record.error else ""),
            ("Started", format_timestamp(record.started_at, millis=True)),
            ("Finished", format_timestamp(record.finished_at, millis=True)),
            ("Console", console_url(record.execution_arn, _region_of(record.execution_arn) or region)),
        ]
    )
    print("\nStage timings:")
    rows = []
    for stage, seconds in record.stage_seconds.items():
        rows.append({"stage": stage, "seconds": f"{seconds:.3f}", "human": _duration(seconds)})
    print_table(rows, [("stage", "STAGE"), ("seconds", "SECONDS"), ("human", "")])
    if record.stage_times:
        print("\nTimeline:")
        print_table(
            [
                {"at": at, "step": step}
                for step, at in sorted(record.stage_times.items(), key=lambda kv: kv[1])
            ],
            [("at", "AT"), ("step", "STEP")],
        )
