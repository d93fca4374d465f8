"""``nodeheal breaker status|reset`` and ``nodeheal pause|resume``: the person's levers on admission.

Both live in each cluster's admission state in the ledger (the item Admit reads before every
remediation). The breaker is opened by NodeHeal when too many nodes fail together and only a person
closes it; pause is a person's "stop remediating": running ones stop before their next mutation.
Every write is conditional on the version read, so a reset cannot silently undo an admission made meanwhile.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from nodeheal.aws.ledger import Ledger
from nodeheal.commands.aws_access import add_aws_arguments, aws_errors
from nodeheal.commands.history import open_ledger
from nodeheal.commands.output import confirm, print_json, print_table
from nodeheal.errors import ConfigurationError, LedgerContentionError
from nodeheal.timeutil import format_timestamp, utc_now
from nodeheal.workflow import budget
from nodeheal.workflow.budget import ClusterAdmissionState

#: Attempts of a conditional write that lost a race with an admission (which takes milliseconds).
WRITE_ATTEMPTS = 5
EXIT_BREAKER_OPEN = 1


def register(subparsers: Any) -> None:
    breaker = subparsers.add_parser(
        "breaker",
        help="show or reset the circuit breaker of each cluster",
        description=(
            "The circuit breaker opens when the budgets refuse several nodes in a short window (a "
            "fleet-wide event, not bad GPUs). While open, no remediation starts; only a person resets it."
        ),
    )
    actions = breaker.add_subparsers(dest="breaker_command", metavar="{status,reset}")
    actions.required = True
    status = actions.add_parser(
        "status",
        help="breaker, pause and in-flight remediations per cluster (exit 1 when a breaker is open)",
        description="Breaker, pause and in-flight remediations per cluster. Exits 1 when a breaker is open.",
    )
    _cluster_argument(status, required=False)
    add_aws_arguments(status)
    status.add_argument("--json", action="store_true", help="print the state as JSON")
    status.set_defaults(func=run_status)
    reset = actions.add_parser(
        "reset",
        help="close the breaker so remediations can start again",
        description=(
            "Close the breaker of a cluster and forget the refusals that tripped it. Do this once you know "
            "why several nodes failed together (see docs/operations.md, runbook 'breaker open')."
        ),
    )
    _cluster_argument(reset, required=True)
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_aws_arguments(reset)
    reset.set_defaults(func=run_reset)

    pause = subparsers.add_parser(
        "pause",
        help="stop remediating in a cluster (running ones stop before their next mutation)",
        description=(
            "Stop admitting new remediations in a cluster: Admit refuses every node with your reason "
            "and records it. Running remediations stop before their next mutation, record `paused` and "
            "leave the node cordoned. Undo with `nodeheal resume`."
        ),
    )
    _cluster_argument(pause, required=True)
    pause.add_argument("--reason", required=True, help="why (shown in every refusal and notification)")
    pause.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_aws_arguments(pause)
    pause.set_defaults(func=run_pause)

    resume = subparsers.add_parser(
        "resume",
        help="admit remediations again after `nodeheal pause`",
        description="Admit remediations again in a cluster paused with `nodeheal pause`.",
    )
    _cluster_argument(resume, required=True)
    resume.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_aws_arguments(resume)
    resume.set_defaults(func=run_resume)


def _cluster_argument(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--cluster",
        action="append",
        default=[],
        required=required,
        help="cluster name (repeatable)" + ("" if required else "; default: every cluster in the ledger"),
    )


def state_json(state: ClusterAdmissionState) -> dict[str, Any]:
    return {
        "cluster": state.cluster,
        "version": state.version,
        "breaker": {
            "open": state.breaker.open,
            "openedAt": format_timestamp(state.breaker.opened_at) if state.breaker.opened_at else None,
            "reason": state.breaker.reason,
        },
        "paused": state.paused,
        "pausedReason": state.paused_reason,
        "inFlight": [
            {
                "node": node,
                "execution": slot.execution,
                "pool": slot.pool,
                "startedAt": format_timestamp(slot.started_at),
                "expiresAt": format_timestamp(slot.expires_at),
            }
            for node, slot in sorted(state.in_flight.items())
        ],
        "recentRefusals": len(state.recent_refusals),
    }


def run_status(args: argparse.Namespace) -> int:
    ledger, _, table = open_ledger(args)
    with aws_errors(f"read ledger table {table}"):
        clusters = list(dict.fromkeys(args.cluster)) or ledger.known_clusters()
        states = [ledger.read_admission_state(cluster) for cluster in clusters]
    if args.json:
        print_json([state_json(state) for state in states])
    elif not states:
        print(f"no cluster has admission state in {table} yet (nothing was ever admitted)")
    else:
        now = utc_now()
        rows = [
            {
                "cluster": s.cluster,
                "breaker": f"OPEN since {format_timestamp(s.breaker.opened_at)}"
                if s.breaker.open and s.breaker.opened_at
                else ("OPEN" if s.breaker.open else "closed"),
                "paused": f"PAUSED: {s.paused_reason}" if s.paused else "no",
                "inflight": str(len([x for x in s.in_flight.values() if x.expires_at > now])),
                "refusals": str(len(s.recent_refusals)),
            }
            for s in states
        ]
        print_table(
            rows,
            [
                ("cluster", "CLUSTER"),
                ("breaker", "BREAKER"),
                ("paused", "PAUSED"),
                ("inflight", "IN FLIGHT"),
                ("refusals", "RECENT REFUSALS"),
            ],
        )
        for state in states:
            if state.breaker.open:
                print(f"\n{state.cluster}: {state.breaker.reason}")
                print(f"  reset when understood: nodeheal breaker reset --cluster {state.cluster}")
            for node, slot in sorted(state.in_flight.items()):
                if slot.expires_at > now:
                    since = format_timestamp(slot.started_at)
                    print(f"{state.cluster}: in flight {node} ({slot.execution}, since {since})")
    return EXIT_BREAKER_OPEN if any(state.breaker.open for state in states) else 0


def _update(
    ledger: Ledger,
    cluster: str,
    change: Callable[[ClusterAdmissionState], ClusterAdmissionState | None],
) -> tuple[ClusterAdmissionState, bool]:
    """Apply ``change`` to the cluster's state with optimistic concurrency; (state, written)."""
    for _ in range(WRITE_ATTEMPTS):
        current = ledger.read_admission_state(cluster)
        updated = change(current)
        if updated is None:
            return current, False
        try:
            return ledger.write_admission_state(updated), True
        except LedgerContentionError:
            continue
    raise LedgerContentionError(
        f"the admission state of {cluster} kept changing under {WRITE_ATTEMPTS} attempts; try again"
    )


def _mutate_clusters(
    args: argparse.Namespace,
    *,
    question: Callable[[Sequence[str]], str],
    change: Callable[[ClusterAdmissionState], ClusterAdmissionState | None],
    done: str,
    unchanged: str,
) -> int:
    ledger, _, table = open_ledger(args)
    clusters = list(dict.fromkeys(args.cluster))
    if not confirm(question(clusters), assume_yes=args.yes):
        print("cancelled; nothing changed", file=sys.stderr)
        return 1
    with aws_errors(f"update ledger table {table}"):
        for cluster in clusters:
            _, written = _update(ledger, cluster, change)
            print(f"{cluster}: {done if written else unchanged}")
    return 0


def run_reset(args: argparse.Namespace) -> int:
    return _mutate_clusters(
        args,
        question=lambda clusters: (
            f"Close the circuit breaker of {', '.join(clusters)}? Remediations start again."
        ),
        change=budget.closed_breaker,
        done="breaker closed; remediations are admitted again",
        unchanged="breaker was already closed",
    )


def run_pause(args: argparse.Namespace) -> int:
    reason = args.reason.strip()
    if not reason:
        raise ConfigurationError("--reason must say why")

    return _mutate_clusters(
        args,
        question=lambda clusters: (
            f"Pause NodeHeal in {', '.join(clusters)} ({reason})? No new remediation will start."
        ),
        change=lambda state: budget.paused(state, reason),
        done=f"paused ({reason}); resume with `nodeheal resume`",
        unchanged="already paused for this reason",
    )


def run_resume(args: argparse.Namespace) -> int:
    return _mutate_clusters(
        args,
        question=lambda clusters: f"Resume NodeHeal in {', '.join(clusters)}? Remediations start again.",
        change=budget.resumed,
        done="resumed; remediations are admitted again",
        unchanged="was not paused",
    )
