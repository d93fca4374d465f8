"""The code before each fix of the dropped-fault class (docs/architecture.md, D19; the issue "no dead GPU left
behind"), as patches the search puts back one fix at a time (tests/simulation/test_finds_defects.py).

Each function here is the shipped function as it was before its fix, trimmed to what the fix
changed; nothing else of NodeHeal is touched. The search must find every one of these defects with
the fault kinds the simulation draws for every seed (nodeheal.sim.seeded.faults.DROPPED_FAULTS),
with no fault planned by hand for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal import payload
from nodeheal.conditions import Condition
from nodeheal.errors import SupersededError
from nodeheal.kube_views import LiveNode, PodView
from nodeheal.sim.seeded.memory_ledger import MemoryLedger
from nodeheal.workflow import admission, drain_policy, episode, recording
from nodeheal.workflow.drain_policy import (
    SKIP_DRAIN_ANNOTATION,
    NodeState,
    PodAction,
    PodClass,
    PodPlan,
    eviction_mode,
    namespace_matches,
)
from nodeheal.workflow.episode import Sighting
from nodeheal.workflow.records import ExecutionEnd, RecordWrite, RemediationRecord
from nodeheal.workflow.state import WorkflowState


@dataclass(frozen=True)
class Patch:
    """One function or constant of NodeHeal replaced by the code before a fix."""

    module: Any
    name: str
    before_the_fix: Any


# -- 1. the episode ended at a new reason or transition time ---------------------------------------


def _still_describes_by_transition_time(sighting: Sighting, node: LiveNode, now: datetime) -> bool:
    """A remembered fault counted only while its condition kept the same lastTransitionTime."""
    live = node.condition(sighting.condition_type)
    return (
        sighting.node_uid == node.uid
        and sighting.boot_id == node.boot_id
        and live is not None
        and live.is_bad
        and live.last_transition_time == sighting.since
        and (now - sighting.since).total_seconds() >= sighting.confirm_seconds
    )


def _replaces_by_transition_time(self: Sighting, stored: Sighting) -> bool:
    """A later transition time was a new bad period: a lesser sighting replaced a worse one."""
    if self.since != stored.since:
        return self.since > stored.since
    if (self.node_uid, self.boot_id) == (stored.node_uid, stored.boot_id):
        return self.action.cost > stored.action.cost
    return self.seen_at > stored.seen_at


def _reported_by_transition_time(
    state: WorkflowState, live: Condition, node: LiveNode, ended_at: datetime | None
) -> bool:
    """The event's own report counted only for the same transition time as the live condition."""
    seen = state.event.condition
    return seen.type == live.type and seen.is_bad and seen.last_transition_time == live.last_transition_time


# -- 2. a contender that ends before it takes over ---------------------------------------------------


def _takes_nothing_over(*_: Any) -> None:
    return None


def _withdraws_nothing(self: MemoryLedger, cluster: str, subject: str, execution: str) -> bool:
    return False


def _claim_stops_at_any_mark(
    self: MemoryLedger, cluster: str, subject: str, execution: str, *, step: str, busy_for: Any
) -> None:
    """A contender's mark stopped the holder at once, for good, whether or not the contender was
    still there to take the node over (it might have ended a second after marking)."""
    held = self._live(subject)
    if held is not None and held.execution == execution and held.contender:
        raise SupersededError(f"{held.contender} waits to take over {subject}")
    MemoryLedger_claim_mutation(self, cluster, subject, execution, step=step, busy_for=busy_for)


MemoryLedger_claim_mutation = MemoryLedger.claim_mutation


# -- 3. the holds were decided before refuse -----------------------------------------------------------


def _holds_before_refuse(
    pod: PodView, settings: Any, node_state: NodeState, now: datetime, drain_started: datetime
) -> PodPlan:
    """``plan_pod`` with the do-not-disrupt and allow-completion holds checked before refusal."""
    elapsed = (now - drain_started).total_seconds()

    def plan(action: PodAction, reason: str, *classes: PodClass) -> PodPlan:
        return PodPlan(pod=pod, action=action, classes=classes, reason=reason)

    never_moved = (
        pod.is_daemonset_pod
        or pod.is_mirror_pod
        or pod.is_finished
        or pod.annotations.get(SKIP_DRAIN_ANNOTATION, "").lower() == "true"
        or namespace_matches(pod.namespace, settings.never_drain_namespaces)
        or pod.deletion_requested
    )
    if not never_moved:
        if pod.do_not_disrupt and elapsed < settings.do_not_disrupt_wait_seconds:
            return plan(PodAction.WAIT, "karpenter.sh/do-not-disrupt held", PodClass.DO_NOT_DISRUPT_HELD)
        if eviction_mode(pod, settings.eviction_modes) == "allow-completion":
            return plan(PodAction.WAIT, "allow-completion: left to finish", PodClass.ALLOW_COMPLETION)
    return _SHIPPED_PLAN_POD(pod, settings, node_state, now, drain_started)


_SHIPPED_PLAN_POD = drain_policy.plan_pod


# -- 4. the 4 KiB cut kept Xid lines in message order ----------------------------------------------------


def _bound_message_in_order(message: str, limit: int = payload.MAX_MESSAGE_BYTES) -> str:
    """Xid lines kept first in message order while they fit, the rest from the top."""
    json_bytes, raw_bytes, prefix_within = payload.json_bytes, payload._raw_bytes, payload._prefix_within
    if json_bytes(message) <= limit:
        return message
    size = raw_bytes(message)
    budget = limit - payload._marker_cost(size)
    newline = json_bytes("\n")
    lines = message.splitlines(keepends=True)
    kept: dict[int, str] = {}
    kept_bytes = 0

    def take(index: int, text: str, *, whole: bool) -> None:
        nonlocal budget, kept_bytes
        kept[index] = text if whole else f"{text}\n"
        budget -= json_bytes(text) + (0 if whole else newline)
        kept_bytes += raw_bytes(text)

    for index, line in enumerate(lines):
        match = payload._XID_LINE.search(line)
        if match is None:
            continue
        if json_bytes(line) <= budget:
            take(index, line, whole=True)
            continue
        piece = prefix_within(line[match.start() :], budget - newline)
        if piece:
            take(index, piece, whole=False)
        break
    for index, line in enumerate(lines):
        if index in kept or budget <= 0:
            continue
        if json_bytes(line) <= budget:
            take(index, line, whole=True)
            continue
        piece = prefix_within(line, budget - newline)
        if piece:
            take(index, piece, whole=False)
        break
    text = "".join(kept[index] for index in sorted(kept))
    if text and not text.endswith(payload._LINE_ENDS):
        text += "\n"
    return text + payload._MARKER.format(size - kept_bytes)


# -- 5. the finalizer's record replaced Record outcome's ---------------------------------------------------


def _put_record_last_writer_wins(self: MemoryLedger, record: RemediationRecord) -> RecordWrite:
    self.on_call("put_record")
    previous = next((r for r in self.records if r.execution == record.execution), None)
    self.records = [r for r in self.records if r.execution != record.execution]
    self.records.append(record)
    return RecordWrite(True, previous)


def _mark_ended_first_writer_wins(
    self: MemoryLedger, cluster: str, execution: str, outcome: str, by: str
) -> None:
    self.on_call("mark_execution_ended")
    self.ended.setdefault(execution, ExecutionEnd(outcome, by))


def _account_for_end_unconditionally(
    state: WorkflowState,
    ledger: Any,
    notifier: Any,
    record_: RemediationRecord,
    *,
    region: str,
    step_may_be_running: bool = False,
) -> dict[str, Any]:
    """Whoever got past the end marker's check wrote its record over the other's."""
    if ledger.execution_ended(state.cluster, state.execution.name):
        recording._release(state, ledger)
        return {"notification": "", "alreadyRecorded": True}
    ledger.put_record(record_)
    recording._release(state, ledger)
    notified = ""
    if notifier is not None and recording._worth_notifying(state, record_, ledger):
        notified = notifier.publish(recording.render_notification(record_, state, region=region))
    ledger.mark_execution_ended(
        state.cluster, state.execution.name, record_.outcome.value, record_.recorded_by
    )
    return {"notification": notified, "alreadyRecorded": False}


#: Each fix of the dropped-fault class: the patches that put its code back as it was before.
REVERTS: dict[str, tuple[Patch, ...]] = {
    "episode across a new reason": (
        Patch(episode, "still_describes", _still_describes_by_transition_time),
        Patch(Sighting, "replaces", _replaces_by_transition_time),
        Patch(admission, "_reported_in_episode", _reported_by_transition_time),
    ),
    "contender takes over or gives back": (
        Patch(admission, "_displaced_to_take_over", _takes_nothing_over),
        Patch(MemoryLedger, "withdraw_contention", _withdraws_nothing),
    ),
    "a contender that ends first": (Patch(MemoryLedger, "claim_mutation", _claim_stops_at_any_mark),),
    "refuse before the holds": (Patch(drain_policy, "plan_pod", _holds_before_refuse),),
    "the worst line survives the cut": (Patch(payload, "bound_message", _bound_message_in_order),),
    "Record outcome stands over the finalizer": (
        Patch(MemoryLedger, "put_record", _put_record_last_writer_wins),
        Patch(MemoryLedger, "mark_execution_ended", _mark_ended_first_writer_wins),
        Patch(recording, "_account_for_end", _account_for_end_unconditionally),
    ),
}

#: Layers taken out with a fix because they would hide its defect (the search checks that the fix
#: alone, put back with the layer still out, passes the schedule): a contender that gives the node
#: back withdraws its mark at once, and a mark that lapses lets the holder go on a few minutes
#: later; either saves the holder of trace 118 on its own.
BEHIND: dict[str, tuple[Patch, ...]] = {
    "contender takes over or gives back": REVERTS["a contender that ends first"],
}

__all__ = ["BEHIND", "REVERTS", "Patch"]


#: What the search (``make soak``: test_finds_defects.py) found for each fix on the code before it,
#: shrunk: (seed, plan, invariant broken). Every fault in these plans is one every seed may draw.
FOUND: dict[str, tuple[int, str, str]] = {
    "episode across a new reason": (
        76,
        "gpu-fault@134#73707524 lesser-reason-before-admit@140#389096353 gpu-fault@144#353633251 "
        "second-condition@361#841217273",
        "I8 severity only rises",
    ),
    "contender takes over or gives back": (
        118,
        "gpu-fault@184#284222243 contender-ends@194#769602542",
        "I2 no bad condition dropped",
    ),
    "a contender that ends first": (
        747,
        "gpu-fault@3#554270620 contender-ends@4#752330183 execution-abort@48#914433361 "
        "api-timeout@79#602309323 gpu-fault@98#457556603 forged-event@222#176536227",
        "I2 no bad condition dropped",
    ),
    "refuse before the holds": (
        37,
        "gpu-fault@78#861543639 refuse-beside-held@82#444225159",
        "I14 refuse evicts nothing",
    ),
    "the worst line survives the cut": (
        54,
        "fatal-xid-last@41#390288885 second-condition@380#939334412",
        "I8 severity only rises",
    ),
    "Record outcome stands over the finalizer": (
        7,
        "timeout-in-record@42#429627578 gpu-fault@191#170518978",
        "I15 what is recorded is what happened",
    ),
}
