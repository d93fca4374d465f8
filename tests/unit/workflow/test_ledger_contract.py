"""One contract, two ledgers: the DynamoDB ledger (over moto) and the in-memory one the step tests
use must agree on every lock, preemption and end-of-execution rule, or the step tests prove
nothing about production (docs/architecture.md, D7)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodeheal.actions import Action
from nodeheal.aws.ledger import Ledger
from nodeheal.errors import ContendedError, LockNotHeldError, SupersededError
from nodeheal.workflow.episode import Sighting
from nodeheal.workflow.locks import LockClaim
from nodeheal.workflow.records import ExecutionEnd, Outcome, RecordWrite, RemediationRecord
from tests.aws_fixtures import create_ledger_table
from tests.clock import NOW
from tests.unit.workflow.fakes import INSTANCE, FakeLedger

TTL = timedelta(hours=1)


@dataclass
class Subject:
    ledger: Any
    set_now: Callable[[datetime], None]


@pytest.fixture(params=["dynamodb", "in-memory"])
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param == "in-memory":
        fake = FakeLedger(now=NOW)
        yield Subject(fake, lambda at: setattr(fake, "now", at))
        return
    clock = {"now": NOW}
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        create_ledger_table(client, "ledger")
        yield Subject(
            Ledger(client, "ledger", clock=lambda: clock["now"]), lambda at: clock.__setitem__("now", at)
        )


def claim(action: Action, acts_in: float = 0, condition: str = "GPUProblem") -> LockClaim:
    return LockClaim("gpu-a", condition, action, NOW + timedelta(seconds=acts_in))


def test_a_renewing_holder_keeps_its_lock_and_its_mutated_mark(subject: Subject) -> None:
    ledger = subject.ledger
    assert ledger.acquire_lock("c", INSTANCE, "a", TTL, claim(Action.REBOOT)).acquired
    ledger.claim_mutation("c", INSTANCE, "a", step="cordon", busy_for=timedelta(0))
    assert ledger.acquire_lock("c", INSTANCE, "a", TTL, claim(Action.REBOOT)).acquired
    refused = ledger.acquire_lock("c", INSTANCE, "b", TTL, claim(Action.REBOOT))
    assert not refused.acquired and refused.held_by is not None
    assert refused.held_by.mutated and refused.held_by.action is Action.REBOOT


def test_preemption_is_one_conditional_write_on_the_exact_holder(subject: Subject) -> None:
    ledger = subject.ledger
    ledger.acquire_lock("c", INSTANCE, "confirming", TTL, claim(Action.REPLACE, 600, "KernelDeadlock"))
    holder = ledger.acquire_lock("c", INSTANCE, "newcomer", TTL, claim(Action.REPLACE)).held_by
    assert holder is not None
    assert ledger.preempt_lock(
        "c", INSTANCE, "newcomer", TTL, claim(Action.REPLACE), holder=holder, require_unmutated=True
    )
    assert ledger.lock_holder("c", INSTANCE) == "newcomer"
    # A second newcomer holding the same stale view of the first holder cannot take it again.
    assert not ledger.preempt_lock(
        "c", INSTANCE, "late", TTL, claim(Action.REPLACE), holder=holder, require_unmutated=True
    )
    with pytest.raises(SupersededError):
        ledger.claim_mutation("c", INSTANCE, "confirming", step="cordon", busy_for=timedelta(0))


def test_a_holder_that_mutated_is_preempted_only_by_severity_and_only_between_steps(subject: Subject) -> None:
    ledger = subject.ledger
    ledger.acquire_lock("c", INSTANCE, "reboot", TTL, claim(Action.REBOOT))
    ledger.claim_mutation("c", INSTANCE, "reboot", step="drain", busy_for=timedelta(seconds=60))
    holder = ledger.acquire_lock("c", INSTANCE, "new", TTL, claim(Action.REPLACE)).held_by
    assert holder is not None
    assert not ledger.preempt_lock(
        "c", INSTANCE, "new", TTL, claim(Action.REPLACE), holder=holder, require_unmutated=True
    )
    assert not ledger.preempt_lock(
        "c", INSTANCE, "new", TTL, claim(Action.REPLACE), holder=holder, require_unmutated=False
    ), "its drain round may still be running"
    subject.set_now(NOW + timedelta(seconds=61))
    assert ledger.preempt_lock(
        "c", INSTANCE, "new", TTL, claim(Action.REPLACE), holder=holder, require_unmutated=False
    )


def test_claiming_a_mutation_without_the_lock_fails(subject: Subject) -> None:
    ledger = subject.ledger
    with pytest.raises(LockNotHeldError):
        ledger.claim_mutation("c", INSTANCE, "nobody", step="drain", busy_for=timedelta(0))
    ledger.acquire_lock("c", INSTANCE, "a", TTL, claim(Action.REPLACE))
    subject.set_now(NOW + TTL + timedelta(seconds=1))
    with pytest.raises(LockNotHeldError):
        ledger.claim_mutation("c", INSTANCE, "a", step="drain", busy_for=timedelta(0))


def test_history_follows_the_instance_not_the_name(subject: Subject) -> None:
    ledger = subject.ledger
    for instance, execution in (("i-old", "x-old"), ("i-new", "x-new")):
        ledger.put_record(
            RemediationRecord(
                cluster="c",
                node="gpu-a",
                execution=execution,
                started_at=NOW,
                finished_at=NOW,
                outcome=Outcome.REBOOTED,
                action=Action.REBOOT,
                planned_action=Action.REBOOT,
                reason="",
                summary="",
                instance_id=instance,
            )
        )
    since = NOW - timedelta(days=1)
    assert [r.execution for r in ledger.instance_records("c", "i-new", since)] == ["x-new"]
    assert [r.execution for r in ledger.instance_records("c", "i-old", since)] == ["x-old"]


def test_an_execution_ends_once(subject: Subject) -> None:
    ledger = subject.ledger
    assert not ledger.execution_ended("c", "x") and ledger.execution_end("c", "x") is None
    ledger.mark_execution_ended("c", "x", "replaced", "workflow")
    ledger.mark_execution_ended("c", "x", "failed", "finalizer")  # a later end changes nothing
    ledger.mark_execution_ended("c", "x", "failed", "workflow")  # nor a record step's over a step's
    assert ledger.execution_ended("c", "x")
    assert ledger.execution_end("c", "x") == ExecutionEnd("replaced", "workflow")


def test_a_record_steps_end_replaces_a_finalizers_and_no_finalizers_replaces_it(subject: Subject) -> None:
    """Issue 24, point 5: the Record step knows what happened, the finalizer only that the
    execution ended; the end marker keeps the outcome of the record that stands."""
    ledger = subject.ledger
    ledger.mark_execution_ended("c", "x", "failed", "finalizer")
    ledger.mark_execution_ended("c", "x", "failed", "sweeper")
    assert ledger.execution_end("c", "x") == ExecutionEnd("failed", "finalizer")
    ledger.mark_execution_ended("c", "x", "rebooted", "workflow")
    ledger.mark_execution_ended("c", "x", "failed", "sweeper")
    assert ledger.execution_end("c", "x") == ExecutionEnd("rebooted", "workflow")


def execution_record(outcome: Outcome, by: str, execution: str = "x") -> RemediationRecord:
    return RemediationRecord(
        cluster="c",
        node="gpu-a",
        execution=execution,
        started_at=NOW,
        finished_at=NOW + timedelta(minutes=3),
        outcome=outcome,
        action=Action.REBOOT,
        planned_action=Action.REBOOT,
        reason="Xid 48",
        summary=outcome.value,
        instance_id=INSTANCE,
        recorded_by=by,
    )


def the_outcome(ledger: Any, execution: str = "x") -> Outcome:
    (kept,) = [
        r for r in ledger.instance_records("c", INSTANCE, NOW - timedelta(days=1)) if r.execution == execution
    ]
    outcome: Outcome = kept.outcome
    return outcome


def test_a_finalizers_record_never_replaces_a_record_steps(subject: Subject) -> None:
    ledger = subject.ledger
    assert ledger.put_record(execution_record(Outcome.REBOOTED, "workflow")) == RecordWrite(True, None)
    refused = ledger.put_record(execution_record(Outcome.FAILED, "finalizer"))
    assert not refused.written and refused.previous == execution_record(Outcome.REBOOTED, "workflow")
    assert not ledger.put_record(execution_record(Outcome.FAILED, "sweeper")).written
    assert the_outcome(ledger) is Outcome.REBOOTED


def test_a_record_steps_record_replaces_a_finalizers(subject: Subject) -> None:
    ledger = subject.ledger
    assert ledger.put_record(execution_record(Outcome.FAILED, "finalizer")).written
    # The sweeper redoes a finalizer that died before its end marker; a record step corrects it.
    again = ledger.put_record(execution_record(Outcome.FAILED, "sweeper"))
    assert again.written and again.previous == execution_record(Outcome.FAILED, "finalizer")
    corrected = ledger.put_record(execution_record(Outcome.REBOOTED, "workflow"))
    assert corrected.written and corrected.previous == execution_record(Outcome.FAILED, "sweeper")
    assert the_outcome(ledger) is Outcome.REBOOTED
    # A retried record step rewrites its own; other executions' records are not involved.
    assert ledger.put_record(execution_record(Outcome.REBOOTED, "workflow")).written
    assert ledger.put_record(execution_record(Outcome.FAILED, "finalizer", execution="y")) == RecordWrite(
        True, None
    )
    assert the_outcome(ledger) is Outcome.REBOOTED and the_outcome(ledger, "y") is Outcome.FAILED


#: When a contender says it will be back (its next admit); a mark past it has lapsed.
BACK_BY = NOW + timedelta(minutes=5)


def test_a_more_severe_contender_stops_a_busy_holder_at_its_next_claim(subject: Subject) -> None:
    """D2 with the holder's step still running: the newcomer cannot preempt yet, so it marks the
    lock; the holder's next claim is held back (it must not reboot what the newcomer will replace)."""
    ledger = subject.ledger
    assert ledger.acquire_lock("c", INSTANCE, "reboot-holder", TTL, claim(Action.REBOOT)).acquired
    ledger.claim_mutation("c", INSTANCE, "reboot-holder", step="drain", busy_for=timedelta(minutes=3))
    holder = ledger.acquire_lock("c", INSTANCE, "replacer", TTL, claim(Action.REPLACE)).held_by
    assert holder is not None
    assert not ledger.preempt_lock(
        "c", INSTANCE, "replacer", TTL, claim(Action.REPLACE), holder=holder, require_unmutated=False
    )
    assert ledger.contend("c", INSTANCE, "replacer", claim(Action.REPLACE), holder=holder, until=BACK_BY)
    # A less severe contender does not displace it; the same one may mark again.
    assert not ledger.contend("c", INSTANCE, "alerter", claim(Action.CORDON), holder=holder, until=BACK_BY)
    assert ledger.contend("c", INSTANCE, "replacer", claim(Action.REPLACE), holder=holder, until=BACK_BY)
    with pytest.raises(ContendedError, match="replacer"):
        ledger.claim_mutation("c", INSTANCE, "reboot-holder", step="reboot", busy_for=timedelta(minutes=3))
    # Once the holder's step can no longer be running, the contender preempts as usual.
    subject.set_now(NOW + timedelta(minutes=4))
    current = ledger.acquire_lock("c", INSTANCE, "replacer", TTL, claim(Action.REPLACE)).held_by
    assert current is not None and current.contender == "replacer"
    assert ledger.preempt_lock(
        "c", INSTANCE, "replacer", TTL, claim(Action.REPLACE), holder=current, require_unmutated=False
    )
    ledger.claim_mutation("c", INSTANCE, "replacer", step="drain", busy_for=timedelta(minutes=3))


def test_a_contender_needs_the_exact_holder(subject: Subject) -> None:
    ledger = subject.ledger
    assert ledger.acquire_lock("c", INSTANCE, "a", TTL, claim(Action.REBOOT)).acquired
    stale = ledger.acquire_lock("c", INSTANCE, "b", TTL, claim(Action.REPLACE)).held_by
    assert stale is not None
    ledger.release_lock("c", INSTANCE, "a")
    assert ledger.acquire_lock("c", INSTANCE, "c2", TTL, claim(Action.REBOOT)).acquired
    assert not ledger.contend("c", INSTANCE, "b", claim(Action.REPLACE), holder=stale, until=BACK_BY)


def test_a_contender_that_ends_first_lets_the_holder_go_on_once_its_mark_lapses(subject: Subject) -> None:
    """D2: the holder waits for a contender only while the contender keeps coming back. One that
    ended before taking over (aborted, timed out, its fault cleared) stops renewing its mark; past
    it the holder's claim goes through and its own fault is handled, not dropped."""
    ledger = subject.ledger
    assert ledger.acquire_lock("c", INSTANCE, "reboot-holder", TTL, claim(Action.REBOOT)).acquired
    ledger.claim_mutation("c", INSTANCE, "reboot-holder", step="drain", busy_for=timedelta(minutes=3))
    holder = ledger.acquire_lock("c", INSTANCE, "replacer", TTL, claim(Action.REPLACE)).held_by
    assert holder is not None
    assert ledger.contend("c", INSTANCE, "replacer", claim(Action.REPLACE), holder=holder, until=BACK_BY)
    # A renewal by the holder (a re-run of its admit) does not erase a mark that still holds.
    assert ledger.acquire_lock("c", INSTANCE, "reboot-holder", TTL, claim(Action.REBOOT)).acquired
    subject.set_now(BACK_BY)
    with pytest.raises(ContendedError, match="replacer"):
        ledger.claim_mutation("c", INSTANCE, "reboot-holder", step="reboot", busy_for=timedelta(minutes=3))
    subject.set_now(BACK_BY + timedelta(seconds=1))
    ledger.claim_mutation("c", INSTANCE, "reboot-holder", step="reboot", busy_for=timedelta(minutes=3))
    lock = ledger.read_lock("c", INSTANCE)
    assert (
        lock is not None
        and lock.execution == "reboot-holder"
        and not lock.contended(BACK_BY + timedelta(seconds=1))
    )


def sighting(
    action: Action,
    *,
    since: datetime = NOW,
    seen_in: float = 0,
    boot: str = "boot-1",
    condition: str = "GPUProblem",
    xid: int | None = 79,
) -> Sighting:
    return Sighting(
        condition_type=condition,
        since=since,
        node_uid="uid-a",
        boot_id=boot,
        action=action,
        signal=f"xid:{xid}" if xid is not None else "reason:GPUFailure",
        xid=xid,
        confirm_seconds=0,
        execution=f"exec-{action.value}-{seen_in:g}",
        seen_at=NOW + timedelta(seconds=seen_in),
    )


def test_the_episode_memory_keeps_the_worst_of_a_bad_period_in_any_order(subject: Subject) -> None:
    """Two executions that saw different messages of one bad period both write; the worse stays
    whichever wrote last (D2: severity only rises), and one item per condition type is kept."""
    ledger = subject.ledger
    assert ledger.remember_sighting("c", INSTANCE, sighting(Action.REPLACE, seen_in=1))
    assert not ledger.remember_sighting("c", INSTANCE, sighting(Action.REBOOT, seen_in=2, xid=None))
    assert not ledger.remember_sighting("c", INSTANCE, sighting(Action.REPLACE, seen_in=3))
    assert ledger.remember_sighting(
        "c", INSTANCE, sighting(Action.ALERT, condition="KernelDeadlock", xid=None)
    )
    kept = {s.condition_type: s for s in ledger.sightings("c", INSTANCE)}
    assert set(kept) == {"GPUProblem", "KernelDeadlock"}
    assert kept["GPUProblem"] == sighting(Action.REPLACE, seen_in=1)
    assert kept["KernelDeadlock"].xid is None and kept["KernelDeadlock"].action is Action.ALERT
    assert ledger.sightings("c", "i-0other") == [] and ledger.sightings("other", INSTANCE) == []


def test_a_later_boot_replaces_a_worse_sighting_and_a_new_transition_time_does_not(subject: Subject) -> None:
    """A later sighting on another boot (or Node object) replaces one that no longer describes the
    instance, even when it is lesser, and an older one from the first boot never comes back. On one
    boot a new transition time is the same episode (D19: NPD rewrites it with every new reason), so
    a lesser sighting never replaces a worse one however its transition time moved."""
    ledger = subject.ledger
    ledger.remember_sighting("c", INSTANCE, sighting(Action.REPLACE, seen_in=1))
    assert ledger.remember_sighting(
        "c", INSTANCE, sighting(Action.REBOOT, seen_in=5, boot="boot-2", xid=None)
    )
    (kept,) = ledger.sightings("c", INSTANCE)
    assert (kept.action, kept.boot_id, kept.xid) == (Action.REBOOT, "boot-2", None)
    # An older sighting from the first boot, written late, does not return.
    assert not ledger.remember_sighting("c", INSTANCE, sighting(Action.REPLACE, seen_in=2))
    later = NOW + timedelta(minutes=5)
    assert not ledger.remember_sighting(
        "c", INSTANCE, sighting(Action.ALERT, since=later, seen_in=400, boot="boot-2")
    )
    assert ledger.remember_sighting(
        "c", INSTANCE, sighting(Action.REPLACE, since=later, seen_in=500, boot="boot-2")
    )
    (kept,) = ledger.sightings("c", INSTANCE)
    assert (kept.since, kept.action, kept.xid) == (later, Action.REPLACE, 79)


def test_a_healthy_read_ends_the_episode_and_the_next_sighting_starts_another(subject: Subject) -> None:
    """D19: only a read of the whole node healthy ends the episode. The clear marks what was read,
    never a sighting written since; after it, a later sighting replaces even a worse one, and a
    sighting made before the clear (a late write) does not undo it."""
    ledger = subject.ledger
    ledger.remember_sighting("c", INSTANCE, sighting(Action.REPLACE, seen_in=1))
    ledger.remember_sighting(
        "c", INSTANCE, sighting(Action.ALERT, seen_in=1, condition="KernelDeadlock", xid=None)
    )
    read = ledger.sightings("c", INSTANCE)
    # A worse sighting of KernelDeadlock lands between the read and the clear: it stays.
    assert ledger.remember_sighting(
        "c", INSTANCE, sighting(Action.REBOOT, seen_in=2, condition="KernelDeadlock", xid=None)
    )
    cleared_at = NOW + timedelta(seconds=3)
    assert ledger.clear_sightings("c", INSTANCE, read, cleared_at) == 1
    kept = {s.condition_type: s for s in ledger.sightings("c", INSTANCE)}
    assert kept["GPUProblem"].cleared_at == cleared_at and kept["KernelDeadlock"].cleared_at is None
    # Clearing twice marks nothing more.
    assert ledger.clear_sightings("c", INSTANCE, read, cleared_at + timedelta(seconds=1)) == 0
    # Seen before the clear: a late write of the ended episode does not come back.
    assert not ledger.remember_sighting("c", INSTANCE, sighting(Action.REPLACE, seen_in=2.5))
    # Seen after it: the next episode starts, lesser or not.
    assert ledger.remember_sighting("c", INSTANCE, sighting(Action.ALERT, seen_in=4, xid=13))
    kept = {s.condition_type: s for s in ledger.sightings("c", INSTANCE)}
    assert (kept["GPUProblem"].action, kept["GPUProblem"].cleared_at) == (Action.ALERT, None)


def test_a_fault_seen_again_past_its_confirmation_time_is_remembered_as_confirmed(subject: Subject) -> None:
    """Seed 5000836: a KernelDeadlock (replace after 600 s) was remembered when first seen, inside
    its confirmation time, then admitted with replace once it had stayed bad 600 s. It cleared;
    a GPU fault of the same node was then rebooted, because the memory still held the first,
    unconfirmed sighting, which reads as a flap once its condition is healthy. The confirmed
    sighting of the same severity now replaces it; an unconfirmed one never replaces either."""
    ledger = subject.ledger
    first = replace(sighting(Action.REPLACE, condition="KernelDeadlock", xid=None), confirm_seconds=600)
    assert not first.confirmed_when_seen
    assert ledger.remember_sighting("c", INSTANCE, first)
    again_unconfirmed = replace(first, seen_at=NOW + timedelta(seconds=300), execution="second")
    assert not ledger.remember_sighting("c", INSTANCE, again_unconfirmed)
    confirmed = replace(first, seen_at=NOW + timedelta(seconds=600), execution="confirmed")
    assert confirmed.confirmed_when_seen
    assert ledger.remember_sighting("c", INSTANCE, confirmed)
    [kept] = ledger.sightings("c", INSTANCE)
    assert (kept.execution, kept.seen_at) == ("confirmed", NOW + timedelta(seconds=600))
    # Seen confirmed once, it stays: a later sighting of the same severity changes nothing.
    assert not ledger.remember_sighting("c", INSTANCE, replace(confirmed, seen_at=NOW + timedelta(hours=1)))


def test_a_lock_taken_after_its_holder_ran_out_remembers_whose_it_was(subject: Subject) -> None:
    """Seed 8000534: a GPU holder's lock ran out in an outage, and a KernelDeadlock execution took
    the node; its admit was retried (a lost race on the budget item), and the retry's renewal no
    longer knew whose fault it had taken over. The lock keeps it through every renewal."""
    ledger = subject.ledger
    assert ledger.acquire_lock("c", INSTANCE, "gpu-holder", TTL, claim(Action.REBOOT)).acquired
    subject.set_now(NOW + TTL + timedelta(seconds=1))
    taken = ledger.acquire_lock("c", INSTANCE, "kd", TTL, claim(Action.REPLACE, condition="KernelDeadlock"))
    assert taken.acquired and taken.lapsed is not None
    assert (taken.lapsed.execution, taken.lapsed.condition_type) == ("gpu-holder", "GPUProblem")
    again = ledger.acquire_lock("c", INSTANCE, "kd", TTL, claim(Action.REPLACE, condition="KernelDeadlock"))
    assert again.acquired and again.lapsed is not None and again.lapsed.execution == "gpu-holder"
    # A lock taken from nobody remembers nobody.
    assert ledger.release_lock("c", INSTANCE, "kd")
    fresh = ledger.acquire_lock("c", INSTANCE, "next", TTL, claim(Action.REBOOT))
    assert fresh.acquired and fresh.lapsed is None
