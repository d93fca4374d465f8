"""``nodeheal pause|resume``: a person's "stop remediating" for a cluster, and its undo.

Pause lives in each cluster's admission state in the ledger (:mod:`nodeheal.commands.admission_state`),
which Admit reads before every remediation; running remediations read it before their next
mutation and stop there."""

from __future__ import annotations

import argparse
from typing import Any

from nodeheal.commands.admission_state import cluster_argument, mutate_clusters, report_changes
from nodeheal.commands.aws_access import add_aws_arguments
from nodeheal.errors import ConfigurationError
from nodeheal.workflow import budget


def register(subparsers: Any) -> None:
    pause = subparsers.add_parser(
        "pause",
        help="stop remediating in a cluster (running ones stop before their next mutation)",
        description=(
            "Stop admitting new remediations in a cluster: Admit refuses every node with your reason "
            "and records it. Running remediations stop before their next mutation, record `paused` and "
            "leave the node cordoned. Undo with `nodeheal resume`."
        ),
    )
    cluster_argument(pause, required=True)
    pause.add_argument("--reason", required=True, help="why (shown in every refusal and notification)")
    pause.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_aws_arguments(pause)
    pause.add_argument("--json", action="store_true", help="print each cluster's new state as JSON")
    pause.set_defaults(func=run_pause)

    resume = subparsers.add_parser(
        "resume",
        help="admit remediations again after `nodeheal pause`",
        description="Admit remediations again in a cluster paused with `nodeheal pause`.",
    )
    cluster_argument(resume, required=True)
    resume.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_aws_arguments(resume)
    resume.add_argument("--json", action="store_true", help="print each cluster's new state as JSON")
    resume.set_defaults(func=run_resume)


def run_pause(args: argparse.Namespace) -> int:
    reason = args.reason.strip()
    if not reason:
        raise ConfigurationError("--reason must say why")

    changes = mutate_clusters(
        args,
        question=lambda clusters: (
            f"Pause NodeHeal in {', '.join(clusters)} ({reason})? No new remediation will start."
        ),
        change=lambda state: budget.paused(state, reason),
        done=f"paused ({reason}); resume with `nodeheal resume`",
        unchanged="already paused for this reason",
    )
    return report_changes(args, changes)


def run_resume(args: argparse.Namespace) -> int:
    changes = mutate_clusters(
        args,
        question=lambda clusters: f"Resume NodeHeal in {', '.join(clusters)}? Remediations start again.",
        change=budget.resumed,
        done="resumed; remediations are admitted again",
        unchanged="was not paused",
    )
    return report_changes(args, changes)
