"""The ledger's contract in memory, for the step tests and the seeded simulation (docs/architecture.md, D7).

Same conditional semantics as :class:`nodeheal.aws.ledger.Ledger`: locks keyed by identity (the
instance), expiring at their TTL; preemption conditional on the exact holder and on its claimed
step having finished; the cluster admission item versioned (a stale write is
``LedgerContentionError``); records and end markers keyed by execution, a record step's standing
over a finalizer's (:func:`~nodeheal.workflow.records.replaces_record`,
:func:`~nodeheal.workflow.records.replaces_end`).
``tests/unit/workflow/test_ledger_contract.py`` runs one contract against both.

``on_call`` is called with the operation's name before each operation does anything: the
simulation uses it to interleave other work between a step's reads and writes and to inject
ledger faults there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeheal.actions import Action
from nodeheal.errors import ContendedError, LedgerContentionError, LockNotHeldError, SupersededError
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.episode import Sighting
from nodeheal.workflow.locks import LockClaim, LockView
from nodeheal.workflow.records import (
    DroppedEvent,
    ExecutionEnd,
    RecordWrite,
    RemediationRecord,
    replaces_end,
    replaces_record,
)
from nodeheal.workflow.signal_windows import SignalWindow

_EPOCH = datetime(2026, 11, 21, 10, 5, tzinfo=UTC)


def _millis(at: datetime) -> str:
    """A time as the DynamoDB ledger stores it (milliseconds), which its conditions compare."""
    return format_timestamp(at, millis=True)


@dataclass
class LockAnswer:
    acquired: bool
    holder: str
    held_by: LockView | None = None
    lapsed: LockView | None = None


def _no_call(operation: str) -> None:
    return None


@dataclass
class MemoryLedger:
    locks: dict[str, LockView] = field(default_factory=dict)
    states: dict[str, ClusterAdmissionState] = field(default_factory=dict)
    records: list[RemediationRecord] = field(default_factory=list)
    dropped: list[DroppedEvent] = field(default_factory=list)
    ended: dict[str, ExecutionEnd] = field(default_factory=dict)
    #: (cluster, instance, condition type) -> the remembered sighting (the episode memory, D2).
    remembered: dict[tuple[str, str, str], Sighting] = field(default_factory=dict)
    #: (cluster, instance, signal) -> (counted-signal window, when it expires).
    windows: dict[tuple[str, str, str], tuple[SignalWindow, datetime]] = field(default_factory=dict)
    now: datetime = _EPOCH
    #: The next write of the admission state loses a race (then behaves normally again).
    contention_once: bool = False
    #: When set, the time is read from here instead of ``now`` (the simulation's clock).
    clock: Callable[[], datetime] | None = None
    on_call: Callable[[str], None] = _no_call

    def _now(self) -> datetime:
        return self.clock() if self.clock is not None else self.now

    def _live(self, subject: str) -> LockView | None:
        held = self.locks.get(subject)
        return held if held is not None and held.expires_at > self._now() else None

    def _view(self, execution: str, ttl: timedelta, claim: LockClaim | None, **extra: Any) -> LockView:
        expires_at = self._now() + ttl
        if claim is None:
            return LockView(execution=execution, expires_at=expires_at, **extra)
        return LockView(
            execution=execution,
            expires_at=expires_at,
            node=claim.node,
            condition_type=claim.condition_type,
            action=claim.action,
            acts_at=claim.acts_at,
            **extra,
        )

    def _exactly(self, subject: str, holder: LockView) -> LockView | None:
        """The lock, if it is still exactly ``holder``'s (not renewed or handed on meanwhile)."""
        current = self.locks.get(subject)
        if (
            current is None
            or current.execution != holder.execution
            or current.expires_at != holder.expires_at
        ):
            return None
        return current

    def acquire_lock(
        self, cluster: str, subject: str, execution: str, ttl: timedelta, claim: LockClaim | None = None
    ) -> LockAnswer:
        self.on_call("acquire_lock")
        held = self._live(subject)
        if held is not None and held.execution != execution:
            return LockAnswer(False, held.execution, held)
        keep: dict[str, Any] = {"mutated": held.mutated, "busy_until": held.busy_until} if held else {}
        if held is not None and held.contended(self._now()) and held.contender_until is not None:
            # A renewal does not erase a contender that still waits for the node (D2).
            keep |= {
                "contender": held.contender,
                "contender_action": held.contender_action,
                "contender_until": held.contender_until,
            }
        if held is not None and held.lapsed_from:
            keep |= {"lapsed_from": held.lapsed_from, "lapsed_condition_type": held.lapsed_condition_type}
        expired = self.locks.get(subject) if held is None else None
        if expired is not None and expired.execution != execution and expired.condition_type:
            keep |= {"lapsed_from": expired.execution, "lapsed_condition_type": expired.condition_type}
        self.locks[subject] = self._view(execution, ttl, claim, **keep)
        return LockAnswer(True, execution, lapsed=self.locks[subject].lapsed_view())

    def preempt_lock(
        self,
        cluster: str,
        subject: str,
        execution: str,
        ttl: timedelta,
        claim: LockClaim,
        *,
        holder: LockView,
        require_unmutated: bool,
    ) -> bool:
        self.on_call("preempt_lock")
        current = self._exactly(subject, holder)
        if current is None:
            return False
        if current.busy_until is not None and current.busy_until >= self._now():
            return False
        if require_unmutated and current.mutated:
            return False
        self.locks[subject] = self._view(execution, ttl, claim)
        return True

    def contend(
        self,
        cluster: str,
        subject: str,
        execution: str,
        claim: LockClaim,
        *,
        holder: LockView,
        until: datetime,
    ) -> bool:
        self.on_call("contend")
        current = self._exactly(subject, holder)
        if current is None:
            return False
        if (
            current.contender
            and current.contender != execution
            and current.contender_action.cost >= claim.action.cost
        ):
            return False
        self.locks[subject] = replace(
            current, contender=execution, contender_action=claim.action, contender_until=until
        )
        return True

    def withdraw_contention(self, cluster: str, subject: str, execution: str) -> bool:
        self.on_call("withdraw_contention")
        current = self.locks.get(subject)
        if current is None or current.contender != execution:
            return False
        self.locks[subject] = replace(
            current, contender="", contender_action=Action.NONE, contender_until=None
        )
        return True

    def claim_mutation(
        self, cluster: str, subject: str, execution: str, *, step: str, busy_for: timedelta
    ) -> None:
        self.on_call("claim_mutation")
        held = self._live(subject)
        if held is None:
            raise LockNotHeldError(f"{execution} no longer holds the lock of {subject}")
        if held.execution != execution:
            raise SupersededError(f"{held.execution} took over {subject}")
        if held.contended(self._now()):
            raise ContendedError(
                f"{held.contender} ({held.contender_action.value}) waits to take over {subject}"
            )
        self.locks[subject] = replace(held, mutated=True, busy_until=self._now() + busy_for)

    def lock_holder(self, cluster: str, subject: str) -> str | None:
        self.on_call("lock_holder")
        held = self._live(subject)
        return held.execution if held else None

    def read_lock(self, cluster: str, subject: str) -> LockView | None:
        self.on_call("read_lock")
        return self._live(subject)

    def release_lock(self, cluster: str, subject: str, execution: str) -> bool:
        self.on_call("release_lock")
        held = self.locks.get(subject)
        if held is not None and held.execution == execution:
            del self.locks[subject]
            return True
        return False

    def read_admission_state(self, cluster: str) -> ClusterAdmissionState:
        self.on_call("read_admission_state")
        return self.states.get(cluster, ClusterAdmissionState(cluster))

    def write_admission_state(self, state: ClusterAdmissionState) -> ClusterAdmissionState:
        self.on_call("write_admission_state")
        if self.contention_once:
            self.contention_once = False
            raise LedgerContentionError("lost a race")
        if self.states.get(state.cluster, ClusterAdmissionState(state.cluster)).version != state.version:
            raise LedgerContentionError("stale")
        written = replace(state, version=state.version + 1)
        self.states[state.cluster] = written
        return written

    def put_record(self, record: RemediationRecord) -> RecordWrite:
        self.on_call("put_record")
        previous = next((r for r in self.records if r.execution == record.execution), None)
        if previous is not None and not replaces_record(record.recorded_by, previous.recorded_by):
            return RecordWrite(False, previous)
        self.records = [r for r in self.records if r.execution != record.execution]
        self.records.append(record)
        return RecordWrite(True, previous)

    def instance_records(self, cluster: str, subject: str, since: datetime) -> list[RemediationRecord]:
        self.on_call("instance_records")
        return [r for r in self.records if r.subject == subject and r.started_at >= since]

    def remember_sighting(self, cluster: str, subject: str, sighting: Sighting) -> bool:
        self.on_call("remember_sighting")
        key = (cluster, subject, sighting.condition_type)
        stored = self.remembered.get(key)
        if stored is not None and not sighting.replaces(stored):
            return False
        self.remembered[key] = sighting
        return True

    def read_signal_window(self, cluster: str, instance_id: str, signal: str) -> SignalWindow | None:
        self.on_call("read_signal_window")
        stored = self.windows.get((cluster, instance_id, signal))
        if stored is None or stored[1] <= self._now():
            return None
        return stored[0]

    def write_signal_window(self, window: SignalWindow, *, expires_at: datetime) -> SignalWindow:
        """Conditional on the version read, as :meth:`nodeheal.aws.ledger.Ledger.write_signal_window`."""
        self.on_call("write_signal_window")
        key = (window.cluster, window.instance_id, window.signal)
        stored = self.windows.get(key)
        live = stored is not None and stored[1] > self._now()
        stored_version = stored[0].version if stored is not None and live else 0
        if stored_version != window.version:
            raise LedgerContentionError(
                f"the {window.signal} window of {window.instance_id} changed since it was read"
            )
        written = replace(window, version=window.version + 1)
        self.windows[key] = (written, expires_at)
        return written

    def sightings(self, cluster: str, subject: str) -> list[Sighting]:
        self.on_call("sightings")
        return [s for (c, i, _), s in sorted(self.remembered.items()) if (c, i) == (cluster, subject)]

    def clear_sightings(self, cluster: str, subject: str, sightings: list[Sighting], at: datetime) -> int:
        self.on_call("clear_sightings")
        marked = 0
        for sighting in sightings:
            key = (cluster, subject, sighting.condition_type)
            stored = self.remembered.get(key)
            if stored is None or stored.cleared_at is not None:
                continue
            same = (stored.node_uid, stored.boot_id, _millis(stored.seen_at)) == (
                sighting.node_uid,
                sighting.boot_id,
                _millis(sighting.seen_at),
            )
            if same:
                self.remembered[key] = replace(stored, cleared_at=at)
                marked += 1
        return marked

    def execution_ended(self, cluster: str, execution: str) -> bool:
        self.on_call("execution_ended")
        return execution in self.ended

    def execution_end(self, cluster: str, execution: str) -> ExecutionEnd | None:
        self.on_call("execution_end")
        return self.ended.get(execution)

    def mark_execution_ended(self, cluster: str, execution: str, outcome: str, by: str) -> None:
        self.on_call("mark_execution_ended")
        stored = self.ended.get(execution)
        if stored is None or replaces_end(by, stored.by):
            self.ended[execution] = ExecutionEnd(outcome, by)

    def put_dropped_event(self, dropped: DroppedEvent) -> None:
        self.on_call("put_dropped_event")
        self.dropped.append(dropped)

    # -- what the simulation reads and a person writes: no scheduling point, no injected fault ----

    def observed_state(self, cluster: str) -> ClusterAdmissionState:
        return self.states.get(cluster, ClusterAdmissionState(cluster))

    def observed_records(self, cluster: str) -> list[RemediationRecord]:
        return [r for r in self.records if r.cluster == cluster]

    def observed_ended(self, cluster: str, execution: str) -> bool:
        return execution in self.ended

    def observed_end(self, cluster: str, execution: str) -> ExecutionEnd | None:
        return self.ended.get(execution)

    def observed_locks(self, cluster: str) -> list[tuple[str, LockView]]:
        return [(subject, lock) for subject, lock in self.locks.items() if lock.expires_at > self._now()]

    def operator_change(
        self, cluster: str, change: Callable[[ClusterAdmissionState], ClusterAdmissionState | None]
    ) -> bool:
        """A person's ``nodeheal pause|resume|breaker reset``."""
        current = self.observed_state(cluster)
        changed = change(current)
        if changed is None:
            return False
        self.states[cluster] = replace(changed, version=current.version + 1)
        return True
