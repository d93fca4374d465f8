"""Record outcome and the finalizer reach one end (issue 24, point 5; D6 in docs/architecture.md).

Step Functions does not stop a task's Lambda when the execution times out or is aborted, and
Record outcome has no Catch: when it fails, the execution fails with no Catch. Either way the
finalizer may account for an execution whose Record step has written, or will still write,
what happened. Each test interleaves the real ``record`` and ``finalize`` over the in-memory
ledger and over the DynamoDB ledger (moto), and checks that:

- the record says what happened (``rebooted``), so the 24-hour reboot->replace escalation sees
  the reboot;
- the end marker's outcome is the record's;
- one notification is sent, and the lock is released.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodeheal.actions import Action, Mode
from nodeheal.aws.attribute_values import deserialize_item, serialize_item
from nodeheal.aws.ledger import Ledger
from nodeheal.conditions import Condition
from nodeheal.config import RemediationSettings
from nodeheal.policy.decide import decide
from nodeheal.sim.seeded.dynamo import DynamoLedger
from nodeheal.workflow.finalizer import RECORD_STEP_LIFETIME, EndedExecution, finalize, sweep
from nodeheal.workflow.recording import record
from nodeheal.workflow.records import Outcome, RemediationRecord, node_history
from nodeheal.workflow.state import WorkflowState
from tests.aws_fixtures import create_ledger_table
from tests.unit.workflow.fakes import (
    CLUSTER,
    INSTANCE,
    NOW,
    FakeLedger,
    gpu_problem,
    live_node,
    workflow_state,
)

EXECUTION = "exec-1"
ARN = f"arn:aws:states:us-west-2:1:execution:sm:{EXECUTION}"
XID_48 = "NVRM: Xid (PCI:0000:53:00): 48, pid=2411, name=python3, An uncorrectable double bit error"
#: The execution timed out while Record outcome was running; the finalizer runs on its status-change
#: event seconds later.
STOPPED = NOW - timedelta(seconds=1)
FINALIZED = NOW + timedelta(seconds=2)
#: The next run of the sweeper, five minutes on.
SWEPT = STOPPED + timedelta(minutes=5)
TTL = timedelta(hours=1)


class StepDiedError(Exception):
    """Record outcome's Lambda stopped part-way (killed, or a call that failed)."""


@dataclass
class Notifier:
    sent: list[Any] = field(default_factory=list)
    failing: bool = False

    def publish(self, notification: Any) -> str:
        if self.failing:
            raise RuntimeError("sns:Publish failed")
        self.sent.append(notification)
        return f"msg-{len(self.sent)}"

    @property
    def outcomes(self) -> list[str]:
        return [n.attributes["outcome"] for n in self.sent]


@dataclass
class Subject:
    """One ledger (in memory or DynamoDB) whose next call of an operation can run other work first."""

    ledger: Any
    end_marker: Callable[[], Mapping[str, Any] | None]
    pending: dict[str, Callable[[], None]] = field(default_factory=dict)

    def before(self, operation: str, action: Callable[[], None]) -> None:
        """Run ``action`` once, at the next call of ``operation``, before it does anything."""
        self.pending[operation] = action

    def on_call(self, operation: str) -> None:
        action = self.pending.pop(operation, None)
        if action is not None:
            action()

    def the_record(self) -> RemediationRecord:
        records = [
            r
            for r in self.ledger.instance_records(CLUSTER, INSTANCE, NOW - timedelta(days=1))
            if r.execution == EXECUTION
        ]
        assert len(records) == 1, records
        only: RemediationRecord = records[0]
        return only


@pytest.fixture(params=["in-memory", "dynamodb"])
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param == "in-memory":
        memory = FakeLedger(now=NOW)

        def memory_marker() -> Mapping[str, Any] | None:
            end = memory.ended.get(EXECUTION)
            return None if end is None else {"outcome": end.outcome, "recordedBy": end.by}

        made = Subject(memory, memory_marker)
        memory.on_call = made.on_call
        yield made
        return
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        create_ledger_table(client, "ledger")

        def dynamo_marker() -> Mapping[str, Any] | None:
            key = serialize_item({"pk": f"EXECUTION#{CLUSTER}#{EXECUTION}", "sk": "END"})
            item = client.get_item(TableName="ledger", Key=key, ConsistentRead=True).get("Item")
            return None if item is None else deserialize_item(item)

        dynamo = DynamoLedger(Ledger(client, "ledger", clock=lambda: NOW), lambda: NOW, lambda _: None)
        made = Subject(dynamo, dynamo_marker)
        dynamo.on_call = made.on_call
        yield made


def rebooted_state() -> WorkflowState:
    """What Record outcome receives after a reboot that healed the node: it was rebooted,
    recovered and uncordoned."""
    node = live_node(condition=gpu_problem(message=XID_48))
    return workflow_state(
        node,
        execution=EXECUTION,
        condition=gpu_problem(message=XID_48),
        extra={
            "admission": {
                "verdict": "proceed",
                "decision": {
                    "action": "reboot",
                    "plannedAction": "reboot",
                    "reason": "Xid 48",
                    "xid": 48,
                    "signal": "xid:48",
                    "confirmSeconds": 0,
                    "escalated": False,
                },
                "node": {
                    "name": "gpu-a",
                    "uid": node.uid,
                    "instanceId": INSTANCE,
                    "providerId": node.provider_id,
                    "pool": "gpu",
                    "instanceType": "p5.48xlarge",
                    "bootId": "boot-1",
                },
                "lockHeld": True,
                "at": "2026-11-21T10:00:03.000Z",
            },
            "cordon": {"performed": True, "at": "2026-11-21T10:00:03.500Z"},
            "drain": {"evicted": 2, "at": "2026-11-21T10:00:20.000Z"},
            "instance": {
                "performed": True,
                "bootIdBefore": "boot-1",
                "instanceId": INSTANCE,
                "rebootedAt": "2026-11-21T10:00:21.000Z",
                "at": "2026-11-21T10:00:21.000Z",
            },
            "recovery": {
                "status": "recovered",
                "detail": "new boot, Ready, GPUProblem False",
                "at": "2026-11-21T10:03:00.000Z",
            },
            "uncordon": {"performed": True, "at": "2026-11-21T10:03:01.000Z"},
        },
    )


@dataclass
class Executions:
    """Step Functions as the finalizer reads it: the execution ended ``status``; the last state it
    entered was Record outcome, whose input is ``state``."""

    state: WorkflowState
    status: str = "TIMED_OUT"

    def describe(self, execution_arn: str) -> EndedExecution:
        return EndedExecution(
            arn=ARN,
            name=EXECUTION,
            status=self.status,
            started_at=self.state.execution.started_at,
            stopped_at=STOPPED,
        )

    def last_state(self, execution_arn: str) -> Mapping[str, Any] | None:
        return self.state.raw

    def ended_since(self, since: datetime, *, longest_execution: timedelta) -> list[str]:
        return [ARN] if since <= STOPPED else []


def record_outcome(subject: Subject, state: WorkflowState, notifier: Notifier) -> dict[str, Any]:
    return record(state, subject.ledger, notifier, NOW, region="us-west-2")


def finalizer(subject: Subject, state: WorkflowState, notifier: Notifier, status: str = "TIMED_OUT") -> str:
    result = finalize(
        ARN,
        executions=Executions(state, status),
        ledger=subject.ledger,
        notifier=notifier,
        now=FINALIZED,
        region="us-west-2",
        by="finalizer",
    )
    return result.status


def holding_the_lock(subject: Subject) -> None:
    assert subject.ledger.acquire_lock(CLUSTER, INSTANCE, EXECUTION, TTL).acquired


def assert_what_happened_is_recorded(subject: Subject, notifier: Notifier, *, notified: list[str]) -> None:
    recorded = subject.the_record()
    assert recorded.outcome is Outcome.REBOOTED, recorded.summary
    marker = subject.end_marker()
    assert marker is not None and marker["outcome"] == recorded.outcome.value, marker
    assert notifier.outcomes == notified
    assert subject.ledger.lock_holder(CLUSTER, INSTANCE) is None
    assert_the_reboot_escalates(subject)


def assert_the_reboot_escalates(subject: Subject) -> None:
    """A new Xid 48 an hour later is a replacement: the reboot is in the instance's history."""
    later = NOW + timedelta(hours=1)
    settings = RemediationSettings()
    records = subject.ledger.instance_records(CLUSTER, INSTANCE, later - timedelta(hours=48))
    history = node_history(records, settings.policy, later)
    assert history.last_reboot_at is not None
    condition = Condition.from_api(
        {**gpu_problem(message=XID_48), "lastTransitionTime": "2026-11-21T11:00:00Z"}
    )
    decision = decide(
        condition, labels={}, history=history, policy=settings.policy, mode=Mode.FULL, now=later
    )
    assert decision.action is Action.REPLACE and decision.escalated, decision.reason


@pytest.mark.parametrize("during", ["release_lock", "mark_execution_ended"])
def test_the_finalizer_never_replaces_what_record_outcome_wrote(subject: Subject, during: str) -> None:
    """The execution times out while Record outcome runs; the finalizer runs after Record outcome
    wrote its record, before its end marker (before or after it notified)."""
    state = rebooted_state()
    holding_the_lock(subject)
    notifier = Notifier()
    finalized: list[str] = []
    subject.before(during, lambda: finalized.append(finalizer(subject, state, notifier)))

    result = record_outcome(subject, state, notifier)

    # The finalizer found Record outcome's record and left the end to it.
    assert finalized == ["recording"] and result["outcome"] == "rebooted"
    assert_what_happened_is_recorded(subject, notifier, notified=["rebooted"])


def test_record_outcome_corrects_a_finalizer_that_wrote_between_its_check_and_its_record(
    subject: Subject,
) -> None:
    """The finalizer runs whole between Record outcome's read of the end marker and its record."""
    state = rebooted_state()
    holding_the_lock(subject)
    notifier = Notifier()
    finalized: list[str] = []
    subject.before("put_record", lambda: finalized.append(finalizer(subject, state, notifier)))

    result = record_outcome(subject, state, notifier)

    assert finalized == ["recorded"] and result["outcome"] == "rebooted"

    # The finalizer told a person first; the correction is in the ledger, not in a second message.
    assert_what_happened_is_recorded(subject, notifier, notified=["failed"])


def test_a_late_record_outcome_corrects_the_finalizers_end(subject: Subject) -> None:
    """Record outcome's Lambda reaches the ledger only after the finalizer accounted for the end."""
    state = rebooted_state()
    holding_the_lock(subject)
    notifier = Notifier()
    assert finalizer(subject, state, notifier) == "recorded"
    assert subject.the_record().outcome is Outcome.FAILED

    result = record_outcome(subject, state, notifier)

    assert result["outcome"] == "rebooted"
    assert_what_happened_is_recorded(subject, notifier, notified=["failed"])


def sweeper(
    subject: Subject, state: WorkflowState, notifier: Notifier, status: str = "TIMED_OUT"
) -> list[str]:
    """The sweep after the finalizer's event: no Record step can be running by then."""
    assert SWEPT >= STOPPED + RECORD_STEP_LIFETIME
    swept = sweep(
        executions=Executions(state, status),
        ledger=subject.ledger,
        notifier=notifier,
        now=SWEPT,
        region="us-west-2",
        look_back=timedelta(hours=1),
        longest_execution=timedelta(hours=2),
    )
    return [r.status for r in swept]


def test_record_outcome_that_failed_after_its_record_is_finished_by_the_sweeper(subject: Subject) -> None:
    """No race at all: Record outcome wrote its record, then its publish failed. It has no Catch,
    so the execution FAILED and the finalizer accounts for it."""
    state = rebooted_state()
    holding_the_lock(subject)
    notifier = Notifier(failing=True)
    with pytest.raises(RuntimeError, match="Publish"):
        record_outcome(subject, state, notifier)
    assert subject.end_marker() is None
    notifier.failing = False

    assert finalizer(subject, state, notifier, status="FAILED") == "recording"
    assert subject.the_record().outcome is Outcome.REBOOTED and notifier.outcomes == []

    assert sweeper(subject, state, notifier, status="FAILED") == ["recorded"]
    assert_what_happened_is_recorded(subject, notifier, notified=["rebooted"])


def test_a_record_step_that_died_while_the_execution_timed_out_is_finished_by_the_sweeper(
    subject: Subject,
) -> None:
    """Record outcome wrote its record and died; the execution timed out meanwhile. The finalizer
    cannot tell a dead Lambda from a running one, so it leaves the end to it; the sweeper, once
    no Record step can still be running, finishes it."""
    state = rebooted_state()
    holding_the_lock(subject)
    notifier = Notifier()

    def dies() -> None:
        raise StepDiedError("Record outcome's Lambda was killed")

    subject.before("release_lock", dies)
    with pytest.raises(StepDiedError):
        record_outcome(subject, state, notifier)
    assert finalizer(subject, state, notifier) == "recording"
    assert subject.the_record().outcome is Outcome.REBOOTED and notifier.outcomes == []
    assert subject.ledger.lock_holder(CLUSTER, INSTANCE) is None, "the finalizer released it"

    assert sweeper(subject, state, notifier) == ["recorded"]
    assert_what_happened_is_recorded(subject, notifier, notified=["rebooted"])
