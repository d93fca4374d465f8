"""``nodeheal breaker status|reset``: the circuit breaker of each cluster, shown and closed.

The breaker lives in each cluster's admission state in the ledger (the item Admit reads before
every remediation; :mod:`nodeheal.commands.admission_state` reads and writes it). NodeHeal opens it
when too many nodes fail together and only a person closes it. Every write is conditional on the
version read, so a reset cannot silently undo an admission made meanwhile.

A reset also re-reads the live cluster and, once the person has seen the list and agreed, starts a
``-r<N>`` execution for each condition still bad (D13 in docs/architecture.md, and
:mod:`nodeheal.workflow.reevaluation`):
the executions refused while the breaker was open have ended, and their transitions' deliveries
are duplicates now, so without this those nodes would stay broken until their condition changed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal.aws.ledger import Ledger
from nodeheal.commands.admission_state import cluster_argument, mutate_clusters, state_json, update_state
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
from nodeheal.errors import ConfigurationError, DuplicateExecutionError, NodeHealError
from nodeheal.events import NodeConditionEvent
from nodeheal.timestamps import format_timestamp, utc_now
from nodeheal.workflow import budget
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.ingest import execution_input, reevaluation_name
from nodeheal.workflow.reevaluation import Candidate, Plan, plan, still_bad

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
    cluster_argument(status, required=False)
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
    cluster_argument(reset, required=True)
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
    reset.add_argument(
        "--json",
        action="store_true",
        help="print the list and what was done as one JSON document (instead of the tables)",
    )
    reset.set_defaults(func=run_reset)


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


@dataclass(frozen=True, slots=True)
class _Reevaluation:
    """What a reset will do in one cluster, read before the person is asked."""

    cluster: str
    state: ClusterAdmissionState
    plan: Plan


@dataclass(frozen=True, slots=True)
class DeployedWorkflow:
    """The deployed remediation workflow: where re-evaluations start and the settings they run with."""

    client: Any
    arn: str
    settings: RemediationSettings


def run_reset(args: argparse.Namespace) -> int:
    if args.no_reevaluate:
        changes = mutate_clusters(
            args,
            question=lambda clusters: (
                f"Close the circuit breaker of {', '.join(clusters)}? Remediations start again; the nodes "
                "refused while it was open are not re-evaluated."
            ),
            change=budget.closed_breaker,
            done="breaker closed; remediations are admitted again",
            unchanged="breaker was already closed",
        )
        if changes is None:
            return 1
        if args.json:
            print_json(
                {
                    "reevaluated": False,
                    "clusters": [_reset_json(c.before, closed=c.written, nodes=[]) for c in changes],
                }
            )
        return 0
    clusters = list(dict.fromkeys(args.cluster))
    if len(clusters) > 1 and not args.eks:
        raise ConfigurationError(
            "a kubeconfig context reaches one cluster: reset one cluster at a time, pass --eks to reach "
            "each through EKS, or --no-reevaluate to only close the breakers"
        )
    ledger, _, table = open_ledger(args)
    workflow = deployed_workflow(args)
    now = utc_now()
    views = [_read_cluster(args, ledger, table, workflow.settings, cluster, now) for cluster in clusters]
    if not args.json:
        for view in views:
            _show(view, workflow.settings)
    starting = sum(len(view.plan.start) for view in views)
    opened = [view.cluster for view in views if view.state.breaker.open]
    if not opened and not starting:
        if args.json:
            _print_reset(views, closed=set(), started={})
        else:
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
    closed: set[str] = set()
    started: dict[str, list[Started]] = {}
    for view in views:
        with aws_errors(f"update ledger table {table}"):
            written = update_state(ledger, view.cluster, budget.closed_breaker).written
        if written:
            closed.add(view.cluster)
        if not args.json:
            print(f"{view.cluster}: {'breaker closed' if written else 'breaker was already closed'}")
        started[view.cluster] = _start(ledger, workflow, view, now, quiet=args.json)
    if args.json:
        _print_reset(views, closed=closed, started=started)
    return 0


@dataclass(frozen=True, slots=True)
class Started:
    """A re-evaluation a person asked Step Functions for."""

    execution: str
    #: False when an execution of that name existed already (nothing was started).
    new: bool
    #: The new execution's ARN; empty when nothing was started.
    arn: str
    #: The input it was started with (what ingest would have given it).
    input: Mapping[str, Any]


def start_reevaluation(
    ledger: Ledger, workflow: DeployedWorkflow, event: NodeConditionEvent, *, started_by: str, now: datetime
) -> Started:
    """Start one person's re-evaluation of ``event``'s transition (docs/architecture.md, D3), for
    ``breaker reset`` and ``retry`` alike: named ``<base name>-r<N>``, N from the cluster's counter in
    the ledger (never reused), with the input ingest gives an execution; its ``eventId``
    ``<started_by>-r<N>`` says in the execution's input who asked."""
    from nodeheal.runtime import SfnExecutionStarter

    number = ledger.next_reevaluation(event.cluster)
    name = reevaluation_name(event, number)
    payload = execution_input(event, event_id=f"{started_by}-r{number}", received_at=now)
    try:
        arn = SfnExecutionStarter(workflow.client, workflow.arn).start(name, payload)
    except DuplicateExecutionError:
        return Started(name, new=False, arn="", input=payload)
    return Started(name, new=True, arn=arn, input=payload)


def _print_reset(
    views: Sequence[_Reevaluation], *, closed: set[str], started: Mapping[str, Sequence[Started]]
) -> None:
    """``breaker reset --json``: each cluster's breaker as read, whether this reset closed it, and
    every node still bad with the deployed policy's decision, what the reset does about it and the
    execution it started. ``started[cluster]`` follows the order of that cluster's ``plan.start``."""
    print_json(
        {
            "reevaluated": True,
            "clusters": [
                _reset_json(view.state, closed=view.cluster in closed, nodes=_nodes_json(view, started))
                for view in views
            ],
        }
    )


def _reset_json(
    before: ClusterAdmissionState, *, closed: bool, nodes: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "cluster": before.cluster,
        # As read before the reset: a script sees why it was open and since when.
        "breaker": state_json(before)["breaker"],
        "closed": closed,
        "paused": before.paused,
        "nodes": nodes,
    }


def _nodes_json(view: _Reevaluation, started: Mapping[str, Sequence[Started]]) -> list[dict[str, Any]]:
    outcomes = list(started.get(view.cluster, ()))
    plan_ = view.plan
    nodes = [
        _candidate_json(c, "re-evaluate", outcomes[i] if i < len(outcomes) else None)
        for i, c in enumerate(plan_.start)
    ]
    nodes += [_candidate_json(c, "paused" if plan_.paused else "later", None) for c in plan_.deferred]
    nodes += [_candidate_json(c, "held", None) for c in plan_.busy]
    return nodes


def _candidate_json(candidate: Candidate, planned: str, started: Started | None) -> dict[str, Any]:
    """``planned``: re-evaluate (now), later (no budget room), paused, or held (an execution has the node)."""
    condition = candidate.event.condition
    return {
        "node": candidate.node,
        "condition": {"type": condition.type, "status": condition.status, "reason": condition.reason},
        "decision": candidate.decision.to_json(),
        "plan": planned,
        "heldBy": candidate.held_by or None,
        "execution": started.execution if started else None,
        "started": bool(started and started.new),
    }


def deployed_workflow(args: argparse.Namespace) -> DeployedWorkflow:
    """The state machine (``--state-machine``, else the stack's output) and the settings it hands
    every execution; a ConfigurationError when it is not NodeHeal's remediation workflow."""
    boto_session = session(args)
    arn = args.state_machine or stack_output(boto_session, args.stack, STATE_MACHINE_OUTPUT)
    from nodeheal.aws.executions import deployed_settings

    with aws_errors(f"read state machine {arn}"):
        client = boto_session.client("stepfunctions")
        settings = deployed_settings(client, arn)
    return DeployedWorkflow(client, arn, settings)


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


def _start(
    ledger: Ledger, workflow: DeployedWorkflow, view: _Reevaluation, now: datetime, *, quiet: bool
) -> list[Started]:
    """Start the plan's re-evaluations, one result per ``plan.start`` in its order; ``quiet``
    prints nothing (the caller reports as JSON)."""
    say = (lambda _: None) if quiet else print
    results: list[Started] = []
    for candidate in view.plan.start:
        with aws_errors(f"start a re-evaluation of {candidate.node}"):
            started = start_reevaluation(
                ledger, workflow, candidate.event, started_by="breaker-reset", now=now
            )
        results.append(started)
        say(
            f"  started {started.execution}"
            if started.new
            else f"  {started.execution} exists already; not started again"
        )
    deferred = sorted({c.node for c in view.plan.deferred})
    if deferred:
        say(
            f"  not started: {', '.join(deferred)} ({len(deferred)} node(s)); once the running remediations "
            f"end, run `nodeheal breaker reset --cluster {view.cluster}` again to re-evaluate them"
        )
    if view.plan.start:
        say(f"  follow them with: nodeheal history --cluster {view.cluster} --since 1h")
    return results
