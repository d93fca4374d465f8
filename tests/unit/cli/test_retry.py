"""``nodeheal retry EXECUTION`` against moto's Step Functions running the executions (so they
really end FAILED, TIMED_OUT or ABORTED), a moto ledger and the stack outputs that name them."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodeheal.actions import Action
from nodeheal.aws.ledger import Ledger
from nodeheal.config import RemediationSettings
from nodeheal.events import NodeConditionEvent
from nodeheal.workflow.budget import BreakerState
from nodeheal.workflow.ingest import execution_input, execution_name, reevaluation_name
from nodeheal.workflow.locks import LockClaim
from tests.aws_fixtures import create_ledger_table
from tests.unit.cli.conftest import CLUSTER, REGION, STATE_MACHINE_ARN, TABLE, Result, create_stack
from tests.unit.workflow.fakes import INSTANCE

Cli = Callable[..., Result]

NODE = "ip-10-0-158-235.us-west-2.compute.internal"
#: Seconds an execution of the short state machine may run: it times out while waiting.
SHORT_TIMEOUT = 1
#: Bound on how long a test waits for moto to end an execution (they end in milliseconds, or
#: after SHORT_TIMEOUT).
ENDS_WITHIN = 30.0


def detail(**node: Any) -> dict[str, Any]:
    return {
        "schemaVersion": "1.1",
        "cluster": CLUSTER,
        "node": {
            "name": NODE,
            "uid": "4c1b6a0e-1f0e-4c55-9f2b-0b9f1f7c2a11",
            "providerID": f"aws:///us-west-2b/{INSTANCE}",
            "nodePool": "gpu",
            "labels": {"karpenter.sh/nodepool": "gpu"},
            **node,
        },
        "condition": {
            "type": "GPUProblem",
            "status": "True",
            "reason": "GPUFellOffBus",
            "message": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
            "lastTransitionTime": "2026-11-21T10:00:00Z",
        },
        "observedAt": "2026-11-21T10:00:01.234Z",
        "resync": False,
    }


EVENT = NodeConditionEvent.from_detail(detail())
BASE = execution_name(EVENT)


def definition(*, timeout: int | None = None) -> str:
    """The remediation workflow cut to what retry meets: ``Load settings`` hands out the settings
    (retry checks it is NodeHeal's), then the eventId routes the run. Ingest's executions fail in
    ``Cordon``, ``hold`` waits (running, or timing out on the short machine), ``fine`` succeeds,
    and a retry's (``retry-of-...``) succeeds."""
    document: dict[str, Any] = {
        "StartAt": "Load settings",
        "States": {
            "Load settings": {
                "Type": "Pass",
                "Parameters": {
                    "event.$": "$.event",
                    "eventId.$": "$.eventId",
                    "settings": RemediationSettings().to_json(),
                },
                "Next": "Admit",
            },
            "Admit": {
                "Type": "Choice",
                "Choices": [
                    {"Variable": "$.eventId", "StringMatches": "retry-of-*", "Next": "Done"},
                    {"Variable": "$.eventId", "StringEquals": "fine", "Next": "Done"},
                    {"Variable": "$.eventId", "StringEquals": "hold", "Next": "Wait for the node's lock"},
                ],
                "Default": "Cordon",
            },
            "Wait for the node's lock": {"Type": "Wait", "Seconds": 3600, "Next": "Done"},
            "Cordon": {
                "Type": "Fail",
                "Error": "KubernetesApiError",
                "Cause": f"cordon node {NODE}: 403 Forbidden: nodes is forbidden",
            },
            "Done": {"Type": "Succeed"},
        },
    }
    if timeout is not None:
        document["TimeoutSeconds"] = timeout
    return json.dumps(document)


@dataclass
class Aws:
    ledger: Ledger
    sfn: Any
    short: str  # a second deployment whose executions time out

    def start(
        self, event_id: str, *, name: str = BASE, machine: str = STATE_MACHINE_ARN, payload: Any = None
    ) -> str:
        """An execution as ingest starts one: the event under its D3 name (docs/architecture.md)."""
        received = datetime(2026, 11, 21, 10, 0, 2, tzinfo=UTC)
        document = (
            payload
            if payload is not None
            else execution_input(EVENT, event_id=event_id, received_at=received)
        )
        return str(
            self.sfn.start_execution(stateMachineArn=machine, name=name, input=json.dumps(document))[
                "executionArn"
            ]
        )

    def ended(self, arn: str) -> dict[str, Any]:
        """The execution once moto has ended it (waits on its status, bounded)."""
        deadline = time.monotonic() + ENDS_WITHIN
        while True:
            described: dict[str, Any] = self.sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                return described
            assert time.monotonic() < deadline, f"{arn} still running after {ENDS_WITHIN} s"
            time.sleep(0.01)

    def waiting(self, arn: str) -> bool:
        """Wait until the execution has entered its Wait state (only then can moto stop it): True,
        or False when it ended without waiting."""
        deadline = time.monotonic() + ENDS_WITHIN
        while True:
            events = self.sfn.get_execution_history(executionArn=arn)["events"]
            if any(event["type"] == "WaitStateEntered" for event in events):
                return True
            if self.sfn.describe_execution(executionArn=arn)["status"] != "RUNNING":
                return False
            assert time.monotonic() < deadline, f"{arn} neither waits nor ends"
            time.sleep(0.01)

    def executions(self, machine: str = STATE_MACHINE_ARN) -> dict[str, dict[str, Any]]:
        listed = self.sfn.list_executions(stateMachineArn=machine)["executions"]
        return {
            item["name"]: json.loads(self.sfn.describe_execution(executionArn=item["executionArn"])["input"])
            for item in listed
        }


@pytest.fixture
def aws() -> Iterator[Aws]:
    # moto runs each execution's ASL in a daemon thread, so statuses are the real ones.
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        create_ledger_table(dynamodb, TABLE)
        create_stack(boto3.client("cloudformation", region_name=REGION))
        sfn = boto3.client("stepfunctions", region_name=REGION)
        role = "arn:aws:iam::123456789012:role/NodeHeal-workflow"
        arn = sfn.create_state_machine(name="NodeHeal-remediation", definition=definition(), roleArn=role)
        assert arn["stateMachineArn"] == STATE_MACHINE_ARN
        short = sfn.create_state_machine(
            name="NodeHeal-short", definition=definition(timeout=SHORT_TIMEOUT), roleArn=role
        )["stateMachineArn"]
        aws = Aws(Ledger(dynamodb, TABLE), sfn, short)
        yield aws
        for machine in (STATE_MACHINE_ARN, short):  # end the waiting ones' threads
            for item in sfn.list_executions(stateMachineArn=machine, statusFilter="RUNNING")["executions"]:
                if aws.waiting(item["executionArn"]):
                    sfn.stop_execution(executionArn=item["executionArn"])


@pytest.fixture
def failed(aws: Aws) -> str:
    """Ingest's execution failed in Cordon, and Record failure recorded it (lock released)."""
    arn = aws.start("0d4f8b1c-ab14-4b63-8a8e-2c3c0b8a3c01")
    assert aws.ended(arn)["status"] == "FAILED"
    aws.ledger.mark_execution_ended(CLUSTER, BASE, "failed", "record-failure")
    return arn


def field(out: str, label: str) -> str:
    """One ``label: value`` field of what retry shows, its wrapped lines joined back into one."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{label}:"))
    value = [lines[start].split(":", 1)[1].strip()]
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        value.append(line.strip())
    return " ".join(value)


def test_retry_starts_a_new_execution_from_the_failed_ones_event(cli: Cli, aws: Aws, failed: str) -> None:
    result = cli("retry", BASE, "--yes")
    assert result.code == 0, result.err
    # What it found and what it will start, before it starts it.
    assert field(result.out, "execution").startswith(f"{BASE} (FAILED at 20")
    assert (
        field(result.out, "error")
        == f"KubernetesApiError: cordon node {NODE}: 403 Forbidden: nodes is forbidden"
    )
    assert field(result.out, "node") == f"{NODE} (instance {INSTANCE}, cluster {CLUSTER})"
    assert field(result.out, "condition") == "GPUProblem=True (GPUFellOffBus)"
    assert field(result.out, "recorded").startswith("yes: lock and budget slot released")
    assert field(result.out, "will start").startswith(
        f"{BASE}-r<N> (N: the cluster's next re-evaluation number)"
    )
    # Named as every person's re-evaluation is (D3): the base name and -r<N> from the ledger's counter.
    name = reevaluation_name(EVENT, 1)
    assert f"started {name}\n" in result.out
    assert f"nodeheal history show {name}" in result.out
    started = aws.executions()
    assert set(started) == {BASE, name}
    assert started[name]["event"] == started[BASE]["event"] == EVENT.to_detail()
    assert started[name]["eventId"] == f"retry-of-{BASE}-r1"
    assert (
        aws.ended(f"{STATE_MACHINE_ARN.replace(':stateMachine:', ':execution:')}:{name}")["status"]
        == "SUCCEEDED"
    )
    assert aws.ledger.next_reevaluation(CLUSTER) == 2, "the counter moved on"


def test_retry_and_breaker_reset_share_the_counter_and_the_base_name(cli: Cli, aws: Aws, failed: str) -> None:
    for _ in range(3):  # three re-evaluations a breaker reset started in this cluster
        aws.ledger.next_reevaluation(CLUSTER)
    assert cli("retry", BASE, "--yes").code == 0
    first = reevaluation_name(EVENT, 4)
    assert first in aws.executions()
    # The retry failed too: retrying it keeps the transition's base name, with the next number.
    again = aws.start("not-a-retry", name=reevaluation_name(EVENT, 99))
    assert aws.ended(again)["status"] == "FAILED"
    assert cli("retry", reevaluation_name(EVENT, 99), "--yes").code == 0
    assert reevaluation_name(EVENT, 5) in aws.executions()


def test_retry_takes_the_execution_arn(cli: Cli, aws: Aws, failed: str) -> None:
    result = cli("retry", failed, "--yes")
    assert result.code == 0, result.err
    assert reevaluation_name(EVENT, 1) in aws.executions()


def test_a_timed_out_execution_is_retried_on_its_state_machine(cli: Cli, aws: Aws) -> None:
    arn = aws.start("hold", machine=aws.short)
    assert aws.ended(arn)["status"] == "TIMED_OUT"
    result = cli("retry", BASE, "--state-machine", aws.short, "--yes")
    assert result.code == 0, result.err
    assert field(result.out, "execution").startswith(f"{BASE} (TIMED_OUT at ")
    # Not recorded yet and no lock in the ledger: the finalizer has not run (it would say so).
    assert field(result.out, "recorded") == "not yet (the finalizer or the sweeper records it within minutes)"
    assert set(aws.executions(aws.short)) == {BASE, reevaluation_name(EVENT, 1)}
    assert aws.executions() == {}


def test_an_aborted_execution_still_holding_its_lock_is_retried_and_waits_behind_it(
    cli: Cli, aws: Aws
) -> None:
    arn = aws.start("hold")
    claim = LockClaim(
        node=NODE, condition_type="GPUProblem", action=Action.REPLACE, acts_at=datetime.now(UTC)
    )
    assert aws.ledger.acquire_lock(CLUSTER, INSTANCE, BASE, timedelta(hours=9), claim).acquired
    assert aws.waiting(arn)
    aws.sfn.stop_execution(executionArn=arn)
    assert aws.ended(arn)["status"] == "ABORTED"
    result = cli("retry", BASE, "--yes")
    assert result.code == 0, result.err
    assert field(result.out, "execution").startswith(f"{BASE} (ABORTED at ")
    assert field(result.out, "recorded").startswith(
        "not yet: it still holds the node's lock until the finalizer"
    )
    assert reevaluation_name(EVENT, 1) in aws.executions()


def test_retry_json_is_one_document(cli: Cli, aws: Aws, failed: str) -> None:
    result = cli("retry", BASE, "--yes", "--json")
    assert result.code == 0, result.err
    document = result.json()
    name = reevaluation_name(EVENT, 1)
    assert (document["cluster"], document["node"]) == (CLUSTER, NODE)
    retried = document["retried"]
    assert (retried["execution"], retried["arn"], retried["status"]) == (BASE, failed, "FAILED")
    assert retried["error"] == "KubernetesApiError" and "403 Forbidden" in retried["cause"]
    assert retried["recorded"] is True and retried["stoppedAt"].endswith("Z")
    started = document["started"]
    assert started["execution"] == name
    assert started["arn"] == f"{STATE_MACHINE_ARN.replace(':stateMachine:', ':execution:')}:{name}"
    assert started["input"] == aws.executions()[name]


@pytest.mark.parametrize(
    ("event_id", "status", "message"),
    [
        ("hold", "RUNNING", "is still running: a retry would race it for the node"),
        ("fine", "SUCCEEDED", "succeeded: it ended as its record says"),
    ],
)
def test_an_execution_that_did_not_fail_is_refused(
    cli: Cli, aws: Aws, event_id: str, status: str, message: str
) -> None:
    arn = aws.start(event_id)
    if status != "RUNNING":
        assert aws.ended(arn)["status"] == status
    result = cli("retry", BASE, "--yes")
    assert result.code == 2
    assert result.err.startswith(f"nodeheal retry: {BASE} is {status} and {message}")
    assert "only a FAILED, TIMED_OUT or ABORTED execution can be retried" in result.err
    assert set(aws.executions()) == {BASE}
    assert aws.ledger.next_reevaluation(CLUSTER) == 1, "no number was taken"


def test_an_unknown_execution_is_refused(cli: Cli, aws: Aws) -> None:
    result = cli("retry", "training-on-eks-gone", "--yes")
    assert result.code == 2
    assert "no execution 'training-on-eks-gone' in state machine" in result.err
    assert "ExecutionDoesNotExist" in result.err


def test_an_execution_of_another_state_machine_is_refused(cli: Cli, aws: Aws) -> None:
    arn = aws.start("hold", machine=aws.short)
    assert aws.ended(arn)["status"] == "TIMED_OUT"
    result = cli("retry", arn, "--yes")  # the stack's state machine is NodeHeal-remediation
    assert result.code == 2
    assert f"is not an execution of NodeHeal's state machine {STATE_MACHINE_ARN}" in result.err
    assert aws.executions(aws.short).keys() == {BASE} and aws.executions() == {}


def test_an_execution_not_started_by_nodeheal_is_refused(cli: Cli, aws: Aws) -> None:
    arn = aws.start("", name="by-hand", payload={"eventId": "by-hand", "event": {"cluster": CLUSTER}})
    assert aws.ended(arn)["status"] == "FAILED"
    result = cli("retry", "by-hand", "--yes")
    assert result.code == 2
    assert "the input of by-hand is not a NodeHeal event" in result.err
    assert set(aws.executions()) == {"by-hand"}


def test_a_paused_cluster_starts_nothing(cli: Cli, aws: Aws, failed: str) -> None:
    state = aws.ledger.read_admission_state(CLUSTER)
    aws.ledger.write_admission_state(replace(state, paused=True, paused_reason="driver rollout"))
    result = cli("retry", BASE, "--yes")
    assert result.code == 1
    assert f"not started: {CLUSTER} is paused (driver rollout)" in result.err
    assert f"nodeheal resume --cluster {CLUSTER}" in result.err
    assert set(aws.executions()) == {BASE}


def test_an_open_breaker_starts_nothing_and_points_to_the_reset(cli: Cli, aws: Aws, failed: str) -> None:
    state = aws.ledger.read_admission_state(CLUSTER)
    opened = BreakerState(open=True, opened_at=datetime.now(UTC), reason="3 nodes refused by the budget")
    aws.ledger.write_admission_state(replace(state, breaker=opened))
    result = cli("retry", BASE, "--yes", "--json")
    assert (result.code, result.out) == (1, "")
    assert "the circuit breaker of training-on-eks is open (3 nodes refused by the budget)" in result.err
    assert f"nodeheal breaker reset --cluster {CLUSTER}" in result.err
    assert set(aws.executions()) == {BASE}


def test_a_node_another_execution_holds_is_left_to_it(cli: Cli, aws: Aws, failed: str) -> None:
    claim = LockClaim(
        node=NODE, condition_type="GPUProblem", action=Action.REPLACE, acts_at=datetime.now(UTC)
    )
    assert aws.ledger.acquire_lock(CLUSTER, INSTANCE, "newer-execution", timedelta(hours=9), claim).acquired
    result = cli("retry", BASE, "--yes")
    assert result.code == 1
    assert f"not started: newer-execution holds {NODE} now: it re-reads the node already" in result.err
    assert set(aws.executions()) == {BASE}


def test_without_a_terminal_it_shows_what_it_would_start_and_starts_nothing(
    cli: Cli, aws: Aws, failed: str
) -> None:
    result = cli("retry", BASE)
    assert result.code == 2
    assert "pass --yes" in result.err
    assert field(result.out, "will start").startswith(f"{BASE}-r<N>")
    assert set(aws.executions()) == {BASE}


def test_answered_no_nothing_starts(cli: Cli, aws: Aws, failed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    result = cli("retry", BASE)
    assert result.code == 1
    assert f"Start a new execution for {NODE} (GPUProblem) from {BASE}? [y/N]" in result.err
    assert "cancelled; nothing started" in result.err
    assert set(aws.executions()) == {BASE}
    assert aws.ledger.next_reevaluation(CLUSTER) == 1
