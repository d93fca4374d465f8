"""Re-evaluation after a breaker reset (docs/architecture.md, D13): which still-bad nodes to look at again.

While the breaker was open, Admit refused every node and recorded it; those executions ended. The
exporter's later resyncs re-send the same transitions under the same base names (D3), so Step
Functions refuses them as duplicates: a refused node stays broken until its condition changes.
A person who resets the breaker therefore re-reads the live cluster and starts one new execution,
``<base name>-r<N>``, per bad condition; nothing recorded is replayed (invariant 5 still holds).

The rules, from the live Nodes, the ledger and the deployed settings:

* a condition is a candidate when it is bad on the live Node and inside the deployed rule's scope
  (``settings.scope``, what Admit checks), exactly the event the exporter would send for it now;
* a node whose lock an execution holds is left alone: that execution (or one waiting behind it)
  already re-reads the node;
* a candidate whose decision touches the cluster (cordon, reboot, replace) needs a budget slot.
  Only as many such nodes start as ``maxInFlight`` and ``maxPerHour`` leave room for now: each
  one the budgets refused would be a refusal toward reopening the breaker. The others are listed,
  never dropped, for the next reset (which re-evaluates again even when the breaker is closed);
* nothing starts while the cluster is paused: Admit would refuse every one.

The decision shown is the deployed policy with an empty history (``nodeheal explain``'s answer):
Admit's own, which also counts past reboots and attempts, can only be the same or lower.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from nodeheal.config import RemediationSettings
from nodeheal.errors import InvalidEventError
from nodeheal.events import NodeConditionEvent, PreviousState, node_identity
from nodeheal.kube_views import LiveNode
from nodeheal.policy.decide import Decision, NodeHistory, decide
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.scope import out_of_scope


@dataclass(frozen=True, slots=True)
class Candidate:
    """One bad condition of one live node, as the exporter would publish it now."""

    event: NodeConditionEvent
    decision: Decision
    #: The execution holding the node's lock; empty when none does.
    held_by: str = ""

    @property
    def node(self) -> str:
        return self.event.node.name

    @property
    def needs_slot(self) -> bool:
        return self.decision.action.mutates_cluster


@dataclass(frozen=True, slots=True)
class Plan:
    #: Re-evaluated now, one execution each.
    start: tuple[Candidate, ...]
    #: An execution holds the node: it is being looked at already.
    busy: tuple[Candidate, ...]
    #: No budget room for the node now: for the next reset.
    deferred: tuple[Candidate, ...]
    #: Nodes the budgets have room for now (maxInFlight and maxPerHour; the pool share is Admit's).
    room: int
    paused: bool = False


def still_bad(
    cluster: str,
    nodes: Iterable[Mapping[str, object]],
    settings: RemediationSettings,
    *,
    locks: Mapping[str, str],
    now: datetime,
) -> list[Candidate]:
    """Every bad, in-scope condition of ``nodes`` (raw API objects), in node and condition order.

    ``locks`` maps a node name to the execution holding its lock.
    """
    candidates: list[Candidate] = []
    for obj in nodes:
        try:
            live = LiveNode.from_api(obj)
        except (InvalidEventError, AttributeError, TypeError, ValueError):
            continue  # a Node the API server would not serve either; nothing to decide on
        bad = [
            condition
            for condition in live.conditions.values()
            if condition.is_bad and not out_of_scope(settings.scope, live.labels, condition)
        ]
        if not bad:
            continue
        identity = node_identity(obj)
        for condition in sorted(bad, key=lambda c: c.type):
            event = NodeConditionEvent(
                cluster=cluster,
                node=identity,
                condition=condition,
                observed_at=now,
                # The exporter's resync shape: the condition is bad and was bad when last seen.
                previous=PreviousState(condition.status, condition.reason),
                resync=True,
            )
            decision = decide(
                condition,
                labels=live.labels,
                history=NodeHistory(),
                policy=settings.policy,
                mode=settings.mode,
                now=now,
            )
            candidates.append(Candidate(event, decision, locks.get(live.name, "")))
    return sorted(candidates, key=lambda c: (c.node, c.event.condition.type))


def plan(
    candidates: Iterable[Candidate],
    state: ClusterAdmissionState,
    settings: RemediationSettings,
    *,
    now: datetime,
) -> Plan:
    """Which candidates to start now, given the cluster's admission state after the reset."""
    budgets = settings.budgets
    current = state.pruned(now, budgets)
    room = max(
        0,
        min(
            budgets.max_in_flight - len(current.in_flight),
            budgets.max_per_hour - len(current.recent_starts),
        ),
    )
    free = [c for c in candidates if not c.held_by]
    busy = tuple(c for c in candidates if c.held_by)
    if current.paused:
        return Plan(start=(), busy=busy, deferred=tuple(free), room=room, paused=True)
    # A node takes one slot however many of its conditions need one; they share its lock.
    slot_nodes = list(dict.fromkeys(c.node for c in free if c.needs_slot))
    admitted = set(slot_nodes[:room])
    start = tuple(c for c in free if c.node in admitted or c.node not in slot_nodes)
    deferred = tuple(c for c in free if c.node in slot_nodes and c.node not in admitted)
    return Plan(start=start, busy=busy, deferred=deferred, room=room)
