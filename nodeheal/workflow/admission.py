"""Admit: the gate between an event and any mutation.

The event is a hint, never the truth. Admit re-reads the live Node, stops if it is gone, replaced,
or the condition is no longer bad, classifies the LIVE condition, applies the instance's history
(escalation, attempt cap), opt-out and the live mode, waits out the confirmation time, and for a
mutating action takes the node's lock (keyed by instance, D1) and a budget slot, tripping the
circuit breaker on a storm.

Admit runs again after every wait (confirmation, or behind another execution's lock), so each run
re-proves the node is the one admitted before and never lowers the decision (D2). A newcomer that
finds the lock held preempts the holder or waits behind it (nodeheal.workflow.locks); it is never
dropped: after waiting the lock TTL it hands the node to a person.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from nodeheal.actions import Action, Mode
from nodeheal.conditions import Condition
from nodeheal.config import RemediationSettings
from nodeheal.kube_views import NODEGROUP_LABEL, UNHEALTHY_TAINT_KEY, LiveNode
from nodeheal.policy.decide import Decision, NodeHistory, decide
from nodeheal.timestamps import parse_timestamp
from nodeheal.workflow import budget, step_events
from nodeheal.workflow.counted_condition import live_condition
from nodeheal.workflow.episode import (
    Sighting,
    episode_ended_at,
    episode_over_on,
    remembered_worst,
    sighting_of,
    sightings_on,
    to_clear,
)
from nodeheal.workflow.locks import LockClaim, LockView, may_preempt
from nodeheal.workflow.ports import KubeAccess, LedgerPort
from nodeheal.workflow.records import Outcome, RemediationRecord, identity_key, node_history
from nodeheal.workflow.scope import out_of_scope
from nodeheal.workflow.state import AdmittedNode, WorkflowState
from nodeheal.workflow.verdicts import CONFIRM, PROCEED, STOP, WAIT, Admission
from nodeheal.worst_case import contention_seconds


def admit(
    state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime, *, mode: Mode | None = None
) -> Admission:
    """Admit the event's node, or say why not. ``mode`` is the live mode (the function's
    environment, D4); None falls back to the mode the execution started with. The verdict is
    told on the Node as an Event (nodeheal.workflow.step_events)."""
    admission = _admit(state, kube, ledger, now, mode=mode)
    step_events.tell(kube, lambda: step_events.admitted(state, admission))
    return admission


def _admit(
    state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime, *, mode: Mode | None
) -> Admission:
    settings = state.settings
    previous = _previous_admission(state)
    node = kube.nodes.get(state.node_name)
    if node is None:
        _give_back(state, ledger, previous)
        return Admission(STOP, None, None, None, now, note="node no longer exists (live re-check)")
    if state.event.node.uid and node.uid != state.event.node.uid:
        _give_back(state, ledger, previous)
        return Admission(
            STOP,
            None,
            None,
            None,
            now,
            note=f"node {node.name} is a new object (uid {node.uid}, event had {state.event.node.uid})",
        )
    admitted_node = _admitted(node, settings.policy.node_pool_label)
    if previous.node is not None and (
        previous.node.uid != admitted_node.uid or previous.node.instance_id != admitted_node.instance_id
    ):
        # Re-admitting after a wait: the name now belongs to another node or instance.
        if previous.lock_held:
            ledger.release_lock(state.cluster, previous.node.subject, state.execution.name)
        return Admission(
            STOP,
            None,
            previous.node,
            None,
            now,
            note=(
                f"node {node.name} was replaced while this execution waited (now uid {node.uid}, "
                f"instance {admitted_node.instance_id or '-'}; admitted {previous.node.uid}, "
                f"{previous.node.instance_id or '-'}); nothing done to the new node"
            ),
        )
    live = live_condition(state, node, ledger, now)
    gone_note = _not_bad_note(state.condition_type, live)
    stop_note = gone_note or _scope_note(state, node, live)
    switched = ""
    if live is None or stop_note:
        taken_over = _displaced_to_take_over(state, ledger, node, admitted_node, previous)
        if taken_over is None:
            return _stop(
                state, ledger, node, admitted_node, live, previous, now, stop_note, fault_gone=bool(gone_note)
            )
        # This execution pushed a holder aside (D2) and its own fault is gone: the holder's fault
        # is still there and nobody else holds the node, so it is handled here, not dropped.
        switched = (
            f"{stop_note}; re-admitting {taken_over.type} of execution {previous.displaced_execution}, "
            "which this execution took the node from"
        )
        live = taken_over

    records = ledger.instance_records(
        state.cluster, admitted_node.subject, since=history_window_start(settings, now)
    )
    remembered = ledger.sightings(state.cluster, admitted_node.subject)
    ended_at = episode_ended_at(remembered, node)
    _remember_sightings(state, ledger, node, live, admitted_node, remembered, ended_at, now)
    decision = live_decision(
        live,
        node,
        settings,
        records,
        remembered,
        now,
        mode=mode or settings.mode,
        previous=previous.decision if _same_boot(previous, admitted_node) else None,
        sighted=_sighted(state, live, node, settings, now, ended_at),
    )
    remaining = (
        _confirmation_remaining(live, decision.confirm_seconds, state, now)
        if decision.confirm_seconds > 0 and decision.action is not Action.NONE
        else 0
    )
    if decision.action.mutates_cluster and names_no_instance(node):
        return _until_the_node_names_its_instance(
            state, decision, admitted_node, live, now, previous, switched
        )
    if not decision.action.mutates_cluster:
        # An alert or a record touches nothing: it takes no lock. But while another execution
        # remediates the node it waits behind it and is re-evaluated when that one ends (D19): a
        # lesser message of the fault being handled is no news of its own, and the holder's end
        # (a reboot, a replacement) decides what is left of it.
        if previous.lock_held:
            ledger.release_lock(state.cluster, admitted_node.subject, state.execution.name)
        holder = ledger.lock_holder(state.cluster, admitted_node.subject)
        if holder is not None and holder != state.execution.name:
            waiting = _behind_holder(state, decision, admitted_node, live, now, previous, holder)
            if waiting.verdict == WAIT:
                return replace(
                    waiting, note=_joined(switched, waiting.note), displaced=previous.displaced_json
                )
        if remaining > 0:
            return replace(
                _confirming(decision, admitted_node, live, now, remaining, lock_held=False),
                displaced=previous.displaced_json,
            )
        return Admission(
            PROCEED, decision, admitted_node, live, now, note=switched, displaced=previous.displaced_json
        )

    taken = _take_lock(state, ledger, decision, admitted_node, live, now, remaining, previous)
    if isinstance(taken, Admission):
        return replace(taken, note=_joined(switched, taken.note))
    preempted, displaced = taken
    if remaining > 0:
        # The lock is held through the wait, so a later fault of the node waits behind this one
        # or preempts it (D2) instead of acting beside it.
        return replace(
            _confirming(decision, admitted_node, live, now, remaining, lock_held=True),
            preempted=preempted,
            displaced=displaced,
        )

    verdict = _take_budget_slot(state, kube, ledger, node, admitted_node, now)
    if not verdict.admitted:
        ledger.release_lock(state.cluster, admitted_node.subject, state.execution.name)
        lowered = replace(
            decision,
            action=Action.ALERT,
            reason=f"{decision.reason} Not acted on: {verdict.reason}.",
        )
        return Admission(
            PROCEED,
            lowered,
            admitted_node,
            live,
            now,
            note=_joined(switched, verdict.reason),
            refused=True,
            breaker_opened=verdict.breaker_opened,
            preempted=preempted,
            displaced=displaced,
        )
    return Admission(
        PROCEED,
        decision,
        admitted_node,
        live,
        now,
        lock_held=True,
        note=_joined(switched, verdict.reason),
        preempted=preempted,
        displaced=displaced,
    )


def history_window_start(settings: RemediationSettings, now: datetime) -> datetime:
    """The oldest record of an instance that can still count: attempt cap or reboot escalation."""
    policy = settings.policy
    return now - timedelta(hours=max(policy.attempt_window_hours, policy.reboot_escalation_hours))


def live_decision(
    live: Condition,
    node: LiveNode,
    settings: RemediationSettings,
    records: Sequence[RemediationRecord],
    remembered: Sequence[Sighting],
    now: datetime,
    *,
    mode: Mode,
    previous: Decision | None = None,
    sighted: Decision | None = None,
) -> Decision:
    """The decision for the live condition of ``node``: the deployed policy, the instance's history
    (attempt cap, reboot escalation) and the worst fault seen in its episode (D2), whether an
    earlier admit of this execution (``previous``), an earlier execution (``records``), the
    episode memory (``remembered``) or the event itself (``sighted``) saw it."""
    return decide(
        live,
        labels=node.labels,
        history=node_history(records, settings.policy, now),
        policy=settings.policy,
        mode=mode,
        now=now,
        worst_seen=_worst_seen(
            previous,
            episode_worst(records, node, remembered),
            remembered_worst(remembered, node, now),
            sighted,
        ),
    )


#: Outcomes of an execution that decided on a confirmed fault and left the instance's episode
#: running: nothing rebooted or replaced it (those end the episode), and it was not skipped.
_EPISODE_DECISIONS = frozenset(
    {
        Outcome.REFUSED,
        Outcome.ALERTED,
        Outcome.CORDONED,
        Outcome.DRY_RUN,
        Outcome.PAUSED,
        Outcome.FAILED,
        Outcome.DRAIN_ABORTED,
        Outcome.SUPERSEDED,
    }
)


def episode_worst(
    records: Sequence[RemediationRecord], node: LiveNode, remembered: Sequence[Sighting] = ()
) -> Decision | None:
    """The most severe fault an earlier execution decided on in this episode of the instance (D19).

    A record carries no boot, so the episode memory places it: it belongs to the live node's
    episode when it is of the same Node object, no reboot or replacement was recorded after it,
    the memory, if it knows the live boot, knew it when the record ended (a record from before a
    reboot ended before anything of the new boot was seen; every admit remembers the boot it
    read), and the memory has not seen the node wholly healthy since it started. Its condition
    need not be bad now nor have kept its transition time: NPD rewrites both with a lesser reason,
    and a lesser reason does not mean the GPU healed. So a fault refused by a budget, or left to a
    person, still decides when the same dead GPU shows up again.
    """
    ended = max(
        (r.finished_at for r in records if r.outcome in (Outcome.REBOOTED, Outcome.REPLACED)), default=None
    )
    healthy_at = episode_ended_at(remembered, node)
    boot_seen = [s.seen_at for s in remembered if s.same_episode_object(node)]
    worst: RemediationRecord | None = None
    for record in records:
        if record.outcome not in _EPISODE_DECISIONS or record.node_uid != node.uid:
            continue
        if ended is not None and record.started_at <= ended:
            continue
        if healthy_at is not None and record.started_at <= healthy_at:
            continue
        if boot_seen and not any(seen <= record.finished_at for seen in boot_seen):
            continue
        if worst is None or record.planned_action.cost > worst.planned_action.cost:
            worst = record
    if worst is None:
        return None
    return Decision(
        action=worst.planned_action,
        planned_action=worst.planned_action,
        reason=worst.reason,
        xid=worst.xid,
        signal=worst.signal or f"{worst.condition.get('type', '')} (execution {worst.execution})",
        # It was decided on, so it had been confirmed: it acts now.
        confirm_seconds=0,
    )


def _reported_in_episode(
    state: WorkflowState, live: Condition, node: LiveNode, ended_at: datetime | None
) -> bool:
    """Whether the event's own report of ``live``'s condition belongs to the live node's episode
    (D19): the same Node object (admit checked the uid) and boot. An exporter that does not send
    the boot (before ``node.bootID``) is trusted only for the same bad period (same transition
    time), as before."""
    seen = state.event.condition
    if seen.type != live.type or not seen.is_bad:
        return False
    if state.event.node.uid and state.event.node.uid != node.uid:
        return False
    if ended_at is not None and state.event.observed_at <= ended_at:
        return False  # seen before NodeHeal read the whole node healthy: an earlier episode
    if state.event.node.boot_id:
        return state.event.node.boot_id == node.boot_id
    return seen.last_transition_time == live.last_transition_time


def _sighted(
    state: WorkflowState,
    live: Condition,
    node: LiveNode,
    settings: RemediationSettings,
    now: datetime,
    ended_at: datetime | None,
) -> Decision | None:
    """What the event itself reported, when it is a sighting of the live node's episode: the
    exporter saw that message on this node, and a lesser one that overwrote it since (NPD rewrites
    reason, message and transition time; the node monitoring agent the reason) does not mean it
    healed (D19)."""
    seen = state.event.condition
    if not _reported_in_episode(state, live, node, ended_at):
        return None
    if seen.message == live.message and seen.reason == live.reason:
        return None  # the live condition decides it anyway
    return decide(
        seen,
        labels=node.labels,
        history=NodeHistory(attempts_in_window=0, last_reboot_at=None),
        policy=settings.policy,
        mode=Mode.FULL,
        now=now,
    )


def _remember_sightings(
    state: WorkflowState,
    ledger: LedgerPort,
    node: LiveNode,
    live: Condition,
    admitted: AdmittedNode,
    remembered: Sequence[Sighting],
    ended_at: datetime | None,
    now: datetime,
) -> None:
    """Remember every bad condition of the live node, and the event's own report of this one
    (the exporter saw it; a lesser message may have overwritten it since), in the instance's
    episode memory (D2, D19), so that a later execution of the instance decides by them too. A
    condition already remembered as bad or worse in this episode is not written again."""
    seen = {
        sighting.condition_type: sighting
        for sighting in sightings_on(node, state.settings.policy, execution=state.execution.name, now=now)
    }
    reported = state.event.condition
    if _reported_in_episode(state, live, node, ended_at):
        sighting = sighting_of(reported, node, state.settings.policy, execution=state.execution.name, now=now)
        current = seen.get(live.type)
        if sighting is not None and (current is None or sighting.action.cost > current.action.cost):
            seen[live.type] = sighting
    stored = {sighting.condition_type: sighting for sighting in remembered}
    for condition_type, sighting in sorted(seen.items()):
        kept = stored.get(condition_type)
        if kept is None or sighting.replaces(kept):
            ledger.remember_sighting(state.cluster, admitted.subject, sighting)


def _worst_seen(*decisions: Decision | None) -> Decision | None:
    found = [d for d in decisions if d is not None]
    return max(found, key=lambda d: d.planned_action.cost) if found else None


@dataclass(frozen=True, slots=True)
class _Previous:
    """What an earlier run of admit in this execution decided (after a confirmation or lock wait)."""

    node: AdmittedNode | None = None
    decision: Decision | None = None
    waiting_since: datetime | None = None
    #: It took the node's lock (to confirm): a stop now must give it back.
    lock_held: bool = False
    #: The holder it preempted or contended, and that holder's condition type.
    displaced_execution: str = ""
    displaced_condition_type: str = ""

    @property
    def displaced_json(self) -> dict[str, str] | None:
        if not self.displaced_execution:
            return None
        return {"execution": self.displaced_execution, "conditionType": self.displaced_condition_type}


def _previous_admission(state: WorkflowState) -> _Previous:
    raw = state.step("admission")
    if not raw:
        return _Previous()
    decision_raw = raw.get("decision")
    waiting = raw.get("waitingSince")
    displaced = raw.get("displaced")
    displaced = displaced if isinstance(displaced, Mapping) else {}
    return _Previous(
        node=state.admitted_node,
        decision=Decision.from_json(decision_raw) if isinstance(decision_raw, Mapping) else None,
        waiting_since=parse_timestamp(waiting, "admission.waitingSince") if waiting else None,
        lock_held=bool(raw.get("lockHeld")),
        displaced_execution=str(displaced.get("execution", "")),
        displaced_condition_type=str(displaced.get("conditionType", "")),
    )


def _same_boot(previous: _Previous, node: AdmittedNode) -> bool:
    """An earlier admit's decision counts only on the boot it was made on (D19)."""
    return previous.node is None or previous.node.boot_id == node.boot_id


def _joined(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def _not_bad_note(condition_type: str, live: Condition | None) -> str:
    if live is not None and live.is_bad:
        return ""
    shown = f"{live.status}/{live.reason}" if live else "absent"
    return f"condition {condition_type} is no longer bad on the live node ({shown})"


def _scope_note(state: WorkflowState, node: LiveNode, live: Condition | None) -> str:
    if live is None:
        return ""
    note = out_of_scope(state.settings.scope, node.labels, live)
    return f"out-of-scope: {note}" if note else ""


def _stop(
    state: WorkflowState,
    ledger: LedgerPort,
    node: LiveNode,
    admitted: AdmittedNode,
    live: Condition | None,
    previous: _Previous,
    now: datetime,
    note: str,
    *,
    fault_gone: bool,
) -> Admission:
    """Stop: this execution's fault is gone (or out of scope) and it took no holder's over.

    A waiting or confirming execution may hold the lock from an earlier admit: it gives it back.
    A contender mark it left on a holder is withdrawn, so the holder carries on with its own fault
    instead of stopping for a successor that never comes (D2). A read of the whole node healthy
    ends the instance's episode (D19); while another condition is still bad, the episode goes on
    and the fault the event reported is remembered in it, as if it were still there."""
    _give_back(state, ledger, previous)
    if episode_over_on(node):
        ended = to_clear(ledger.sightings(state.cluster, admitted.subject), node)
        if ended:
            ledger.clear_sightings(state.cluster, admitted.subject, ended, now)
    elif fault_gone:
        _remember_gone_report(state, ledger, node, admitted)
    return Admission(STOP, None, admitted, live, now, note=note)


def _remember_gone_report(
    state: WorkflowState, ledger: LedgerPort, node: LiveNode, admitted: AdmittedNode
) -> None:
    """The event's fault is no longer on the live node, but another condition of the instance is
    bad, so its episode goes on (D19) and the fault still counts in it: a Xid 79 whose condition a
    detector restart cleared is the same dead GPU, and the execution holding the node for a lesser
    fault must replace it, not reboot it. Remembered as the exporter saw it, when it saw it, and only
    if it was confirmed then: a fault that cleared inside its confirmation time was a flap. A
    report the event cannot tie to this Node object and boot is not remembered."""
    reported = state.event.condition
    event_node = state.event.node
    if reported.type == "Ready" or not reported.is_bad:
        return
    if event_node.uid != node.uid or not event_node.boot_id or event_node.boot_id != node.boot_id:
        return
    remembered = ledger.sightings(state.cluster, admitted.subject)
    ended_at = episode_ended_at(remembered, node)
    if ended_at is not None and state.event.observed_at <= ended_at:
        return  # seen before NodeHeal read the whole node healthy: an earlier episode
    sighting = sighting_of(
        reported, node, state.settings.policy, execution=state.execution.name, now=state.event.observed_at
    )
    if sighting is None or not sighting.confirmed_when_seen:
        return
    kept = next((s for s in remembered if s.condition_type == reported.type), None)
    if kept is None or sighting.replaces(kept):
        ledger.remember_sighting(state.cluster, admitted.subject, sighting)


def _give_back(state: WorkflowState, ledger: LedgerPort, previous: _Previous) -> None:
    """A stop after an earlier admit of this execution: give back the lock it took to confirm and
    withdraw a contender mark it left on a holder, under the instance it admitted then. Record
    outcome cannot: a stop's Admission may name no node, and the event may name no instance (a
    node that joined before its providerID was set), so Record would look under another key and
    the lock would stay taken until its TTL."""
    if previous.node is None:
        return
    subject = previous.node.subject
    if previous.lock_held:
        ledger.release_lock(state.cluster, subject, state.execution.name)
    if previous.displaced_execution:
        ledger.withdraw_contention(state.cluster, subject, state.execution.name)


def _displaced_to_take_over(
    state: WorkflowState, ledger: LedgerPort, node: LiveNode, admitted: AdmittedNode, previous: _Previous
) -> Condition | None:
    """The fault of the holder this execution pushed aside, when this execution must handle it now:
    its own fault is gone, the holder's is still bad and in scope, and the holder no longer holds
    the node (it stopped for this execution). While the holder still holds it, it is given back
    instead (``_stop`` withdraws the contender mark) and the holder goes on."""
    condition_type = previous.displaced_condition_type
    if not previous.displaced_execution or not condition_type or condition_type == state.condition_type:
        return None
    condition = node.condition(condition_type)
    if condition is None or not condition.is_bad or condition_type == "Ready":
        return None
    if out_of_scope(state.settings.scope, node.labels, condition):
        return None
    if ledger.lock_holder(state.cluster, admitted.subject) == previous.displaced_execution:
        return None
    return condition


def _confirming(
    decision: Decision, node: AdmittedNode, live: Condition, now: datetime, remaining: int, *, lock_held: bool
) -> Admission:
    return Admission(
        CONFIRM,
        decision,
        node,
        live,
        now,
        wait_seconds=remaining,
        lock_held=lock_held,
        note=f"waiting {remaining}s for the condition to stay bad {decision.confirm_seconds}s",
    )


def _take_lock(
    state: WorkflowState,
    ledger: LedgerPort,
    decision: Decision,
    node: AdmittedNode,
    live: Condition,
    now: datetime,
    remaining: int,
    previous: _Previous,
) -> tuple[str, dict[str, str] | None] | Admission:
    """Take (or keep) the node's lock: (the preempted execution's name or "", the holder this
    execution displaced, D2), or the Admission to return when this execution must wait behind the
    holder or hand over to a person."""
    settings = state.settings
    ttl = timedelta(seconds=settings.lock_ttl_seconds)
    claim = LockClaim(
        node=node.name,
        condition_type=live.type,
        action=decision.action,
        acts_at=now + timedelta(seconds=remaining),
    )
    displaced = previous.displaced_json
    lock = ledger.acquire_lock(state.cluster, node.subject, state.execution.name, ttl, claim)
    if lock.acquired:
        lapsed = lock.lapsed
        if displaced is None and lapsed is not None and lapsed.condition_type:
            # Its holder outlived the lock TTL (an outage, a stuck step): it stops superseded at
            # its next step, so its fault is this execution's to take over if this one's clears.
            displaced = {"execution": lapsed.execution, "conditionType": lapsed.condition_type}
        return "", displaced
    holder = lock.held_by
    if holder is not None:
        allowed, only_if_unmutated = may_preempt(claim, holder, now)
        if allowed and ledger.preempt_lock(
            state.cluster,
            node.subject,
            state.execution.name,
            ttl,
            claim,
            holder=holder,
            require_unmutated=only_if_unmutated,
        ):
            return holder.execution, {"execution": holder.execution, "conditionType": holder.condition_type}
        if allowed and not only_if_unmutated and _contend(ledger, state, node, claim, holder, now):
            # More severe, but a step of the holder may still be running: the holder stops before
            # its next mutation (no reboot of a node this fault calls to replace), then this
            # execution preempts it after the wait.
            displaced = {"execution": holder.execution, "conditionType": holder.condition_type}
    waiting = _behind_holder(state, decision, node, live, now, previous, lock.holder or "unknown")
    return replace(waiting, displaced=displaced)


def _behind_holder(
    state: WorkflowState,
    decision: Decision,
    node: AdmittedNode,
    live: Condition,
    now: datetime,
    previous: _Previous,
    holder_name: str,
) -> Admission:
    """Wait behind the execution holding the node, re-evaluating the live node when it ends; past
    the lock TTL a person decides."""
    settings = state.settings
    waiting_since, waited = _waited(previous, now)
    if waited >= settings.lock_ttl_seconds:
        # The holder outlived the lock TTL it was given (renewed by re-admits): a person decides.
        return _a_person_decides(
            decision,
            node,
            live,
            now,
            waiting_since,
            why=(
                f"execution {holder_name} has held this node for {waited}s "
                f"(lockTtlSeconds {settings.lock_ttl_seconds})"
            ),
            note=f"waited {waited}s behind execution {holder_name}",
        )
    return Admission(
        WAIT,
        decision,
        node,
        live,
        now,
        wait_seconds=settings.lock_wait_poll_seconds,
        note=(
            f"execution {holder_name} is remediating this node; waiting behind it and re-evaluating "
            "the live node when it ends"
        ),
        waiting_since=waiting_since,
    )


def _waited(previous: _Previous, now: datetime) -> tuple[datetime, int]:
    """Since when this execution has been waiting (across its re-admits), and for how many
    whole seconds."""
    waiting_since = previous.waiting_since or now
    return waiting_since, int((now - waiting_since).total_seconds())


def _a_person_decides(
    decision: Decision,
    node: AdmittedNode,
    live: Condition,
    now: datetime,
    waiting_since: datetime,
    *,
    why: str,
    note: str,
) -> Admission:
    """A wait that outlasted the lock TTL ends in an alert: whatever keeps the node from being
    acted on has lasted longer than any remediation may, so a person looks instead."""
    return Admission(
        PROCEED,
        replace(
            decision,
            action=Action.ALERT,
            reason=f"{decision.reason} Not acted on: {why}; a person must look.",
        ),
        node,
        live,
        now,
        note=note,
        refused=True,
        waiting_since=waiting_since,
    )


def names_no_instance(node: LiveNode) -> bool:
    """The Node's ``spec.providerID`` is still empty: the cloud provider has not initialized it."""
    return not node.provider_id


def _until_the_node_names_its_instance(
    state: WorkflowState,
    decision: Decision,
    node: AdmittedNode,
    live: Condition,
    now: datetime,
    previous: _Previous,
    switched: str,
) -> Admission:
    """Wait for a Node that names no instance yet, then read it again (D1: every step acts on the
    instance admitted). A kubelet registering under an external cloud provider leaves
    ``spec.providerID`` empty until the cloud controller initializes the node, and a GPU dead on
    arrival may be reported before that; the API server lets the providerID change once, from
    empty (``ValidateNodeUpdate``: "node updates may not change providerID except from \"\" to
    valid"), so an instance admitted is the node's for good. The Admission names no node, so the
    next admit does not take the instance it then reads for a replacement. Past the lock TTL, as
    behind a holder, a person decides."""
    settings = state.settings
    waiting_since, waited = _waited(previous, now)
    if waited >= settings.lock_ttl_seconds:
        return _a_person_decides(
            decision,
            node,
            live,
            now,
            waiting_since,
            why=f"node {node.name} has named no instance for {waited}s (spec.providerID is empty)",
            note=_joined(switched, f"node named no instance for {waited}s"),
        )
    return Admission(
        WAIT,
        decision,
        None,
        live,
        now,
        wait_seconds=settings.lock_wait_poll_seconds,
        note=_joined(
            switched,
            f"node {node.name} names no instance yet (spec.providerID is empty until the cloud "
            "provider initializes it); reading it again",
        ),
        waiting_since=waiting_since,
    )


def _contend(
    ledger: LedgerPort,
    state: WorkflowState,
    node: AdmittedNode,
    claim: LockClaim,
    holder: LockView,
    now: datetime,
) -> bool:
    """Mark the busy holder's lock; this execution's next admit (one lock poll later) renews the
    mark or preempts, so the mark lapses if this execution ends first (nodeheal.worst_case)."""
    until = now + timedelta(seconds=contention_seconds(state.settings))
    return ledger.contend(
        state.cluster, node.subject, state.execution.name, claim, holder=holder, until=until
    )


def _admitted(node: LiveNode, pool_label: str) -> AdmittedNode:
    return AdmittedNode(
        name=node.name,
        uid=node.uid,
        instance_id=node.instance_id or "",
        provider_id=node.provider_id,
        pool=node.labels.get(pool_label, ""),
        instance_type=node.labels.get("node.kubernetes.io/instance-type", ""),
        boot_id=node.boot_id,
        had_nodeheal_taint=node.cordoned_by_nodeheal,
    )


def _confirmation_remaining(
    live: Condition, confirm_seconds: int, state: WorkflowState, now: datetime
) -> int:
    """Seconds until the condition has been bad for ``confirm_seconds`` (0 when it already has)."""
    since = live.last_transition_time or state.event.observed_at
    elapsed = (now - since).total_seconds()
    return max(0, math.ceil(confirm_seconds - elapsed))


#: The budget key of nodes that carry neither a NodePool nor a node group label: they are one pool.
UNLABELLED_POOL = "(no pool label)"


def budget_pool(labels: Mapping[str, str], pool_label: str) -> tuple[str, str]:
    """(key, label selector) of the pool whose unhealthy share a node counts toward (invariant 5).

    A Karpenter NodePool (``pool_label``), else an EKS managed node group, else every node that
    has neither label: each kind of node is held to the share, none escapes it by lacking a label.
    A Karpenter pool's key is its name alone, as budget slots have always recorded it.
    """
    if labels.get(pool_label):
        return labels[pool_label], f"{pool_label}={labels[pool_label]}"
    if labels.get(NODEGROUP_LABEL):
        return f"{NODEGROUP_LABEL}={labels[NODEGROUP_LABEL]}", f"{NODEGROUP_LABEL}={labels[NODEGROUP_LABEL]}"
    return UNLABELLED_POOL, f"!{pool_label},!{NODEGROUP_LABEL}"


class PoolNodes(Protocol):
    def list(self, label_selector: str | None = None) -> list[LiveNode]: ...


def pool_health_reader(nodes: PoolNodes, node: LiveNode, pool_label: str) -> Callable[[], budget.PoolHealth]:
    """Reads the health of ``node``'s pool (invariant 5) when called: the budget calls it only
    when its verdict depends on the pool, since it lists every node of the pool."""
    pool_key, selector = budget_pool(node.labels, pool_label)

    def pool_health() -> budget.PoolHealth:
        pool_nodes = nodes.list(selector)
        return budget.PoolHealth(
            pool=pool_key,
            size=len(pool_nodes),
            unhealthy_nodes=frozenset(
                identity_key(n.instance_id or "", n.uid, n.name)
                for n in pool_nodes
                if n.uid != node.uid and any(t.key == UNHEALTHY_TAINT_KEY for t in n.taints)
            ),
        )

    return pool_health


def _take_budget_slot(
    state: WorkflowState,
    kube: KubeAccess,
    ledger: LedgerPort,
    node: LiveNode,
    admitted: AdmittedNode,
    now: datetime,
) -> budget.BudgetVerdict:
    settings = state.settings

    current = ledger.read_admission_state(state.cluster)
    verdict = budget.admit(
        current,
        node=admitted.subject,
        execution=state.execution.name,
        pool=pool_health_reader(kube.nodes, node, settings.policy.node_pool_label),
        settings=settings.budgets,
        lock_ttl=timedelta(seconds=settings.lock_ttl_seconds),
        now=now,
    )
    if verdict.state != current:
        # Conditional on the version read above: a concurrent admission makes this raise
        # LedgerContentionError, which the state machine retries (the whole admit re-runs).
        ledger.write_admission_state(verdict.state)
    return verdict
