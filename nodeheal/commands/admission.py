"""``nodeheal breaker status|reset`` and ``nodeheal pause|resume``: the person's levers on admission.

Both live in each cluster's admission state in the ledger (the item Admit reads before every
remediation). The breaker is opened by NodeHeal when too many nodes fail together and only a person
closes it; pause is a person's "stop remediating": running ones stop before their next mutation.
Every write is conditional on the version read, so a reset cannot silently undo an admission made meanwhile.

A reset also re-reads the live cluster and, once the person has seen the list and agreed, starts a
``-r<N>`` execution for each condition still bad (DESIGN D13, :mod:`nodeheal.workflow.reevaluation`):
the executions refused while the breaker was open have ended, and their transitions' deliveries
are duplicates now, so without this those nodes would stay broken until their condition changed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal.aws.ledger import Ledger
from nodeheal.commands.aws_access import (
    STATE_MACHINE_OUTPUT,
    add_aws_arguments,
    aws_errors,
    session,
    stack_output,
)
from nodeheal.commands.history import open_ledger
from nodeheal.commands.kube_access import add_kube_arguments, kube_transport
from nodeheal.commands.output import confirm, print_json, print_table
from nodeheal.config import RemediationSettings
from nodeheal.errors import ConfigurationError, DuplicateExecutionError, LedgerContentionError, NodeHealError
from nodeheal.timeutil import format_timestamp, utc_now
from nodeheal.workflow import budget
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.ingest import execution_input, execution_name, reevaluation_name
from nodeheal.workflow.reevaluation import Candidate, Plan, plan, still_bad

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
        help="close the breaker and re-evaluate the nodes still bad",
        description=(
            "Close the breaker of a cluster and forget the refusals that tripped it. Do this once you know "
            "why several nodes failed together (see docs/operations.md, runbook 'breaker open'). First it "
            "reads the live cluster and lists every node whose condition is still bad (in the deployed "
            "rule's scope) with the deployed policy's decision; once confirmed it closes the breaker and "
            "starts one re-evaluation per bad condition, named <execution>-r<N>. Nodes an execution holds "
            "are left to it; nodes the budgets have no room for now are listed for the next reset, which "
            "re-evaluates again even when the breaker is already closed."
        ),
    )
    _cluster_argument(reset, required=True)
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    reset.add_argument(
        "--no-reevaluate",
        action="store_true",
        help="only close the breaker: read no node, start nothing (nodes refused meanwhile stay as they are)",
    )
    add_aws_arguments(reset)
    reset.add_argument(
        "--state-machine",
        metavar="ARN",
        help=f"remediation state machine (default: the stack's {STATE_MACHINE_OUTPUT} output)",
    )
    add_kube_arguments(reset)
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


@dataclass(frozen=True, slots=True)
class _Reevaluation:
    """What a reset will do in one cluster, read before the person is asked."""

    cluster: str
    state: ClusterAdmissionState
    plan: Plan


@dataclass(frozen=True, slots=True)
class _Workflow:
    """The deployed remediation workflow: where re-evaluations start and the settings they run with."""

    client: Any
    arn: str
    settings: RemediationSettings


def run_reset(args: argparse.Namespace) -> int:
    if args.no_reevaluate:
        return _mutate_clusters(
            args,
            question=lambda clusters: (
                f"Close the circuit breaker of {', '.join(clusters)}? Remediations start again; the nodes "
                "refused while it was open are not re-evaluated."
            ),
            change=budget.closed_breaker,
            done="breaker closed; remediations are admitted again",
            unchanged="breaker was already closed",
        )
    clusters = list(dict.fromkeys(args.cluster))
    if len(clusters) > 1 and not args.eks:
        raise ConfigurationError(
            "a kubeconfig context reaches one cluster: reset one cluster at a time, pass --eks to reach "
            "each through EKS, or --no-reevaluate to only close the breakers"
        )
    ledger, _, table = open_ledger(args)
    workflow = _workflow(args)
    now = utc_now()
    views = [_read_cluster(args, ledger, table, workflow.settings, cluster, now) for cluster in clusters]
    for view in views:
        _show(view, workflow.settings)
    starting = sum(len(view.plan.start) for view in views)
    opened = [view.cluster for view in views if view.state.breaker.open]
    if not opened and not starting:
        print("nothing to do: no breaker is open and no node needs re-evaluating")
        return 0
    steps = [f"close the circuit breaker of {', '.join(opened)}"] if opened else []
    if starting:
        steps.append(f"start the {starting} re-evaluation(s) marked re-evaluate above")
    question = " and ".join(steps) + "?"
    question = question[0].upper() + question[1:]
    if not confirm(question, assume_yes=args.yes):
        print("cancelled; nothing changed", file=sys.stderr)
        return 1
    for view in views:
        with aws_errors(f"update ledger table {table}"):
            _, written = _update(ledger, view.cluster, budget.closed_breaker)
        print(f"{view.cluster}: {'breaker closed' if written else 'breaker was already closed'}")
        _start(ledger, workflow, view, now)
    return 0


def _workflow(args: argparse.Namespace) -> _Workflow:
    boto_session = session(args)
    arn = args.state_machine or stack_output(boto_session, args.stack, STATE_MACHINE_OUTPUT)
    from nodeheal.aws.executions import deployed_settings

    with aws_errors(f"read state machine {arn}"):
        client = boto_session.client("stepfunctions")
        settings = deployed_settings(client, arn)
    return _Workflow(client, arn, settings)


def _read_cluster(
    args: argparse.Namespace,
    ledger: Ledger,
    table: str,
    settings: RemediationSettings,
    cluster: str,
    now: datetime,
) -> _Reevaluation:
    from nodeheal.kube.nodes import NodeOperations

    with aws_errors(f"read ledger table {table}"):
        state = ledger.read_admission_state(cluster)
        locks = {lock.node: lock.execution for _, lock in ledger.held_locks(cluster)}
    try:
        nodes = NodeOperations(kube_transport(args, cluster)).list_raw()
    except NodeHealError as exc:
        hint = (
            "; pass --kubeconfig/--context or --eks to reach it, or --no-reevaluate to only close the breaker"
        )
        raise type(exc)(f"cannot list the nodes of {cluster}: {exc}{hint}") from exc
    candidates = still_bad(cluster, nodes, settings, locks=locks, now=now)
    after_reset = budget.closed_breaker(state) or state
    return _Reevaluation(cluster, state, plan(candidates, after_reset, settings, now=now))


def _show(view: _Reevaluation, settings: RemediationSettings) -> None:
    breaker = view.state.breaker
    if breaker.open:
        since = format_timestamp(breaker.opened_at) if breaker.opened_at else "?"
        print(f"{view.cluster}: breaker OPEN since {since} ({breaker.reason})")
    else:
        print(f"{view.cluster}: breaker closed")
    listed = [*view.plan.start, *view.plan.deferred, *view.plan.busy]
    if not listed:
        print(f"  no node is still bad in {view.cluster} (read live just now): nothing to re-evaluate")
        return
    budgets = settings.budgets
    later = (
        f"later: no budget room (maxInFlight {budgets.max_in_flight}, maxPerHour {budgets.max_per_hour})"
        if not view.plan.paused
        else "later: NodeHeal is paused here"
    )
    rows = [
        {
            "node": c.node,
            "condition": f"{c.event.condition.type}={c.event.condition.status}",
            "reason": c.event.condition.reason,
            "decision": c.decision.action.value,
            "now": _what_now(c, view.plan, later),
        }
        for c in listed
    ]
    print(f"nodes still bad in {view.cluster} (read live just now), and the deployed policy's decision:")
    print_table(
        rows,
        [
            ("node", "NODE"),
            ("condition", "CONDITION"),
            ("reason", "REASON"),
            ("decision", f"DECISION ({settings.mode.value})"),
            ("now", "NOW"),
        ],
    )
    if view.plan.paused:
        print(f"  {view.cluster} is paused: nothing starts until `nodeheal resume --cluster {view.cluster}`")


def _what_now(candidate: Candidate, reevaluation: Plan, later: str) -> str:
    if candidate.held_by:
        return f"left to {candidate.held_by}, which holds the node"
    if candidate in reevaluation.start:
        return "re-evaluate"
    return later


def _start(ledger: Ledger, workflow: _Workflow, view: _Reevaluation, now: datetime) -> None:
    from nodeheal.runtime import SfnExecutionStarter

    starter = SfnExecutionStarter(workflow.client, workflow.arn)
    for candidate in view.plan.start:
        with aws_errors(f"start a re-evaluation of {candidate.node}"):
            number = ledger.next_reevaluation(view.cluster)
            name = reevaluation_name(execution_name(candidate.event), number)
            payload = execution_input(candidate.event, event_id=f"breaker-reset-r{number}", received_at=now)
            try:
                starter.start(name, payload)
            except DuplicateExecutionError:
                print(f"  {name} exists already; not started again")
                continue
        print(f"  started {name}")
    deferred = sorted({c.node for c in view.plan.deferred})
    if deferred:
        print(
            f"  not started: {', '.join(deferred)} ({len(deferred)} node(s)); once the running remediations "
            f"end, run `nodeheal breaker reset --cluster {view.cluster}` again to re-evaluate them"
        )
    if view.plan.start:
        print(f"  follow them with: nodeheal history --cluster {view.cluster} --since 1h")


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
