from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from nodeheal.actions import Action
from nodeheal.aws.ledger import Ledger
from nodeheal.config import PolicySettings
from nodeheal.errors import LedgerContentionError
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.records import DroppedEvent, Outcome, RemediationRecord, node_history
from tests.aws_fixtures import create_ledger_table
from tests.clock import NOW


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger(clock: Clock) -> Iterator[Ledger]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        create_ledger_table(client, "ledger")
        yield Ledger(client, "ledger", clock=clock)


def record(node: str, outcome: Outcome, started: datetime, execution: str = "") -> RemediationRecord:
    return RemediationRecord(
        cluster="c",
        node=node,
        execution=execution or f"x-{node}-{started:%H%M%S}",
        started_at=started,
        finished_at=started + timedelta(minutes=5),
        outcome=outcome,
        action=Action.REPLACE,
        planned_action=Action.REPLACE,
        reason="Xid 79",
        summary="done",
        xid=79,
        stage_seconds={"faultToCordon": 1.25},
    )


def test_lock_is_exclusive_reentrant_and_expires(ledger: Ledger, clock: Clock) -> None:
    ttl = timedelta(minutes=10)
    assert ledger.acquire_lock("c", "n1", "exec-a", ttl).acquired
    assert ledger.acquire_lock("c", "n1", "exec-a", ttl).acquired  # retried step
    held = ledger.acquire_lock("c", "n1", "exec-b", ttl)
    assert not held.acquired and held.holder == "exec-a"
    assert ledger.lock_holder("c", "n1") == "exec-a"
    # A crashed execution never releases: the TTL frees the node (DynamoDB deletes lazily, so the
    # ledger compares expiresAt itself).
    clock.now = NOW + ttl + timedelta(seconds=1)
    assert ledger.lock_holder("c", "n1") is None
    assert ledger.acquire_lock("c", "n1", "exec-b", ttl).acquired


def test_release_never_frees_someone_elses_lock(ledger: Ledger) -> None:
    ledger.acquire_lock("c", "n1", "exec-a", timedelta(minutes=10))
    assert not ledger.release_lock("c", "n1", "exec-b")
    assert ledger.lock_holder("c", "n1") == "exec-a"
    assert ledger.release_lock("c", "n1", "exec-a")
    assert ledger.lock_holder("c", "n1") is None


def test_admission_state_is_written_with_optimistic_concurrency(ledger: Ledger) -> None:
    empty = ledger.read_admission_state("c")
    assert empty.version == 0
    written = ledger.write_admission_state(ClusterAdmissionState("c", paused=True))
    assert written.version == 1
    with pytest.raises(LedgerContentionError):
        ledger.write_admission_state(empty)  # stale: someone wrote version 1 meanwhile
    current = ledger.read_admission_state("c")
    assert current.paused and current.version == 1
    assert ledger.write_admission_state(current).version == 2


def test_records_by_node_and_cluster(ledger: Ledger) -> None:
    ledger.put_record(record("n1", Outcome.REBOOTED, NOW - timedelta(hours=3)))
    ledger.put_record(record("n1", Outcome.REPLACED, NOW - timedelta(hours=1)))
    ledger.put_record(record("n2", Outcome.ALERTED, NOW - timedelta(minutes=30)))
    n1 = ledger.node_records("c", "n1", since=NOW - timedelta(days=1))
    assert [r.outcome for r in n1] == [Outcome.REBOOTED, Outcome.REPLACED]
    assert n1[0].stage_seconds == {"faultToCordon": 1.25}
    assert ledger.node_records("c", "n1", since=NOW - timedelta(hours=2))[0].outcome is Outcome.REPLACED
    newest_first = ledger.cluster_records("c", since=NOW - timedelta(days=1))
    assert [r.node for r in newest_first] == ["n2", "n1", "n1"]
    assert len(ledger.cluster_records("c", since=NOW - timedelta(days=1), limit=1)) == 1


def test_rewriting_a_record_is_idempotent(ledger: Ledger) -> None:
    ledger.put_record(record("n1", Outcome.REPLACED, NOW, execution="x"))
    ledger.put_record(record("n1", Outcome.REPLACED, NOW, execution="x"))
    assert len(ledger.node_records("c", "n1", since=NOW - timedelta(days=1))) == 1


def test_node_history_counts_attempts_and_last_reboot() -> None:
    policy = PolicySettings(attempt_window_hours=24)
    records = [
        record("n1", Outcome.REBOOTED, NOW - timedelta(hours=30)),
        record("n1", Outcome.REBOOTED, NOW - timedelta(hours=2)),
        record("n1", Outcome.FAILED, NOW - timedelta(hours=1)),
        record("n1", Outcome.REFUSED, NOW - timedelta(minutes=5)),
    ]
    history = node_history(records, policy, NOW)
    assert history.attempts_in_window == 2  # refusals are not attempts; 30 h ago is outside
    assert history.last_reboot_at == NOW - timedelta(hours=2) + timedelta(minutes=5)


def test_dropped_events_are_kept(ledger: Ledger) -> None:
    ledger.put_dropped_event(
        DroppedEvent(at=NOW, event_id="e1", reason="stale", category="stale", cluster="c", node="n1")
    )
    dropped = ledger.dropped_events(since=NOW - timedelta(hours=1))
    assert [(d.event_id, d.category) for d in dropped] == [("e1", "stale")]
