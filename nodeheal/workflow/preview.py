"""What Admit would do about a node now, read without writing anything (docs/architecture.md, D18).

``nodeheal doctor --node`` asks, for a real node and the deployed policy: if one of its conditions
reached NodeHeal now, what would Admit decide, and would it act? The answer is Admit's own reasoning
run over the same reads, and none of its writes:

* the live Node is read, every bad condition inside the deployed rule's scope is looked at, as the
  exporter would publish it (``settings.scope``, :func:`~nodeheal.workflow.scope.out_of_scope`);
* the decision is :func:`~nodeheal.workflow.admission.live_decision`, Admit's: the deployed policy,
  the instance's history in the ledger (attempt cap, reboot escalation) and the worst fault seen in
  its episode, in the live mode (the admit function's environment, D4);
* a decision that mutates the cluster needs the node's lock and a budget slot: the lock is read
  (an execution holding it would be waited behind or preempted, D2) and the budgets are asked with
  :func:`nodeheal.workflow.budget.admit`, which returns the state Admit would write; it is not written.

Where Admit would write (the episode memory, the lock, the budget slot, a refusal that may trip the
breaker), the preview says what it would write instead. An execution that really runs may decide
more (an event can carry a worse message than the live one, D2), never less.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from nodeheal.actions import Action, Mode
from nodeheal.conditions import Condition
from nodeheal.config import RemediationSettings
from nodeheal.kube_views import LiveNode
from nodeheal.policy.decide import Decision
from nodeheal.workflow import budget
from nodeheal.workflow.admission import (
    PoolNodes,
    history_window_start,
    live_decision,
    pool_health_reader,
)
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.episode import Sighting
from nodeheal.workflow.locks import LockClaim, LockView, may_preempt
from nodeheal.workflow.records import RemediationRecord, identity_key
from nodeheal.workflow.scope import out_of_scope

#: The execution name the budget is asked for: no execution is started (D18), so none holds a slot.
PREVIEW_EXECUTION = "nodeheal-doctor-preview"


class LedgerReader(Protocol):
    """The reads of the ledger Admit makes; a preview needs nothing else of it."""

    def instance_records(self, cluster: str, subject: str, since: datetime) -> list[RemediationRecord]: ...
    def sightings(self, cluster: str, subject: str) -> list[Sighting]: ...
    def read_lock(self, cluster: str, subject: str) -> LockView | None: ...
    def read_admission_state(self, cluster: str) -> ClusterAdmissionState: ...


@dataclass(frozen=True, slots=True)
class ConditionPreview:
    """One bad, in-scope condition of the node and what Admit would do about it now."""

    condition: Condition
    decision: Decision
    #: Seconds the condition must still stay bad before the decision acts (its confirmSeconds).
    confirm_remaining: int
    #: What Admit would do now, in a sentence.
    outcome: str
    #: Admit would go on to mutate the node now (admitted, confirmed, holding the lock and a slot).
    acts: bool = False
    #: Admit would lower the action to an alert (a budget, the breaker, a pause).
    refused: bool = False


@dataclass(frozen=True, slots=True)
class NodePreview:
    node: LiveNode
    #: The key locks and history follow (the instance, D1).
    subject: str
    mode: Mode
    conditions: tuple[ConditionPreview, ...]
    #: Bad conditions the deployed rule does not cover, and why.
    out_of_scope: tuple[tuple[Condition, str], ...]


def preview(
    cluster: str,
    node: LiveNode,
    settings: RemediationSettings,
    *,
    mode: Mode,
    ledger: LedgerReader,
    nodes: PoolNodes,
    now: datetime,
) -> NodePreview:
    """What Admit would do about each bad condition of ``node`` now; reads only."""
    subject = identity_key(node.instance_id or "", node.uid, node.name)
    bad = sorted((c for c in node.conditions.values() if c.is_bad), key=lambda c: c.type)
    scoped = [c for c in bad if not out_of_scope(settings.scope, node.labels, c)]
    excluded = tuple((c, out_of_scope(settings.scope, node.labels, c)) for c in bad if c not in scoped)
    if not scoped:
        return NodePreview(node, subject, mode, (), excluded)
    records = ledger.instance_records(cluster, subject, since=history_window_start(settings, now))
    remembered = ledger.sightings(cluster, subject)
    lock = ledger.read_lock(cluster, subject)
    holder = lock if lock is not None and lock.expires_at > now else None
    state = ledger.read_admission_state(cluster)
    pool = pool_health_reader(nodes, node, settings.policy.node_pool_label)
    previews = []
    for condition in scoped:
        decision = live_decision(condition, node, settings, records, remembered, now, mode=mode)
        remaining = _confirmation_remaining(condition, decision, now)
        previews.append(
            _what_admit_does(decision, condition, remaining, subject, holder, state, pool, settings, now)
        )
    return NodePreview(node, subject, mode, tuple(previews), excluded)


def _confirmation_remaining(condition: Condition, decision: Decision, now: datetime) -> int:
    """Admit's confirmation wait, from the live condition's transition time."""
    if decision.confirm_seconds <= 0 or decision.action is Action.NONE:
        return 0
    since = condition.last_transition_time or now
    return max(0, math.ceil(decision.confirm_seconds - (now - since).total_seconds()))


def _what_admit_does(
    decision: Decision,
    condition: Condition,
    remaining: int,
    subject: str,
    holder: LockView | None,
    state: ClusterAdmissionState,
    pool: Callable[[], budget.PoolHealth],
    settings: RemediationSettings,
    now: datetime,
) -> ConditionPreview:
    if not decision.action.mutates_cluster:
        # An alert or a record touches nothing: no lock, no budget.
        what = "records it" if decision.action is Action.NONE else "alerts a person; touches nothing"
        if decision.action is Action.NONE and decision.planned_action is not Action.NONE:
            what = f"records what it would do ({decision.planned_action.value}); touches nothing"
        if remaining:
            what = f"waits {remaining}s more for the condition to stay bad, then {what}"
        return ConditionPreview(condition, decision, remaining, what)
    if holder is not None:
        claim = LockClaim(
            node=holder.node,
            condition_type=condition.type,
            action=decision.action,
            acts_at=now + timedelta(seconds=remaining),
        )
        preempts, only_if_unmutated = may_preempt(claim, holder, now)
        if preempts and not (only_if_unmutated and holder.mutated):
            what = (
                f"takes the node over from execution {holder.execution}, which holds its lock (D2 preemption)"
            )
        else:
            what = (
                f"waits behind execution {holder.execution}, which holds the node's lock, then decides anew"
            )
        return ConditionPreview(condition, decision, remaining, what)
    if remaining:
        return ConditionPreview(
            condition,
            decision,
            remaining,
            f"takes the node's lock and waits {remaining}s more for the condition to stay bad "
            f"(confirmSeconds {decision.confirm_seconds})",
        )
    verdict = budget.admit(
        state,
        node=subject,
        execution=PREVIEW_EXECUTION,
        pool=pool,
        settings=settings.budgets,
        lock_ttl=timedelta(seconds=settings.lock_ttl_seconds),
        now=now,
    )
    if not verdict.admitted:
        return ConditionPreview(
            condition, decision, 0, f"refuses it and alerts a person: {verdict.reason}", refused=True
        )
    return ConditionPreview(
        condition,
        decision,
        0,
        f"admits it ({verdict.reason}) and goes on to {decision.action.value}",
        acts=True,
    )
