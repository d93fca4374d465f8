"""What ``nodeheal breaker`` and ``nodeheal pause|resume`` share: each cluster's admission state in
the ledger (the item Admit reads before every remediation), shown as JSON and changed by a
conditional write on the version read, so that a person's change cannot silently undo an admission
made meanwhile."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeheal.aws.ledger import Ledger
from nodeheal.commands.aws_access import aws_errors
from nodeheal.commands.history import open_ledger
from nodeheal.commands.output import confirm, print_json
from nodeheal.errors import LedgerContentionError
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.budget import ClusterAdmissionState

#: Attempts of a conditional write that lost a race with an admission (which takes milliseconds).
WRITE_ATTEMPTS = 5


def cluster_argument(parser: argparse.ArgumentParser, *, required: bool) -> None:
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


@dataclass(frozen=True, slots=True)
class Change:
    """One cluster's admission state as a person's command found it and left it."""

    before: ClusterAdmissionState
    after: ClusterAdmissionState
    #: False when the change was already in place (nothing was written).
    written: bool


def update_state(
    ledger: Ledger,
    cluster: str,
    change: Callable[[ClusterAdmissionState], ClusterAdmissionState | None],
) -> Change:
    """Apply ``change`` to the cluster's state with optimistic concurrency."""
    for _ in range(WRITE_ATTEMPTS):
        current = ledger.read_admission_state(cluster)
        updated = change(current)
        if updated is None:
            return Change(current, current, written=False)
        try:
            return Change(current, ledger.write_admission_state(updated), written=True)
        except LedgerContentionError:
            continue
    raise LedgerContentionError(
        f"the admission state of {cluster} kept changing under {WRITE_ATTEMPTS} attempts; try again"
    )


def mutate_clusters(
    args: argparse.Namespace,
    *,
    question: Callable[[Sequence[str]], str],
    change: Callable[[ClusterAdmissionState], ClusterAdmissionState | None],
    done: str,
    unchanged: str,
) -> list[Change] | None:
    """Confirm, then apply ``change`` to each cluster; None when the person said no."""
    ledger, _, table = open_ledger(args)
    clusters = list(dict.fromkeys(args.cluster))
    if not confirm(question(clusters), assume_yes=args.yes):
        print("cancelled; nothing changed", file=sys.stderr)
        return None
    changes = []
    with aws_errors(f"update ledger table {table}"):
        for cluster in clusters:
            changes.append(update_state(ledger, cluster, change))
            if not args.json:
                print(f"{cluster}: {done if changes[-1].written else unchanged}")
    return changes


def changes_json(changes: Sequence[Change]) -> list[dict[str, Any]]:
    """``pause`` / ``resume --json``: per cluster, whether this command changed it and its state now."""
    return [{"cluster": c.after.cluster, "changed": c.written, "state": state_json(c.after)} for c in changes]


def report_changes(args: argparse.Namespace, changes: list[Change] | None) -> int:
    if changes is None:
        return 1
    if args.json:
        print_json(changes_json(changes))
    return 0
