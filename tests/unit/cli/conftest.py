"""AWS for the operator subcommands: moto with a ledger table and a NodeHeal stack whose outputs
name it, exactly what ``--stack`` resolution reads in a real account."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodeheal.actions import Action
from nodeheal.aws.ledger import Ledger
from nodeheal.cli import main
from nodeheal.workflow.records import Outcome, RemediationRecord
from tests.aws_fixtures import create_ledger_table
from tests.unit.workflow.fakes import CLUSTER

REGION = "us-west-2"
TABLE = "NodeHeal-LedgerTable1234"
BUS = "nodeheal"
NODE = "ip-10-0-158-235.us-west-2.compute.internal"
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:123456789012:stateMachine:NodeHeal-remediation"


def create_stack(cloudformation: Any, name: str = "NodeHeal") -> None:
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {
            "LedgerTableName": {"Value": TABLE},
            "EventBusName": {"Value": BUS},
            "StateMachineArn": {"Value": STATE_MACHINE_ARN},
        },
    }
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig naming ``server``, as the person's own would (the fake API server in tests)."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sim", "cluster": {"server": server}}],
                "users": [{"name": "sre", "user": {"token": "sim-token"}}],
                "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sre"}}],
                "current-context": "sim",
            }
        )
    )
    return path


@dataclass
class Aws:
    ledger: Ledger
    dynamodb: Any
    events: Any


@pytest.fixture
def aws() -> Iterator[Aws]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        create_ledger_table(dynamodb, TABLE)
        create_stack(boto3.client("cloudformation", region_name=REGION))
        yield Aws(Ledger(dynamodb, TABLE), dynamodb, boto3.client("events", region_name=REGION))


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*argv: str) -> Result:
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse usage errors
            code = int(exit_.code or 0)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def make_record(
    *,
    node: str = NODE,
    cluster: str = CLUSTER,
    started: datetime,
    outcome: Outcome = Outcome.REPLACED,
    action: Action = Action.REPLACE,
    xid: int | None = 79,
    execution: str | None = None,
) -> RemediationRecord:
    short = node.split(".")[0]
    name = execution or f"{cluster}-{short}-GPUProblem-{started.strftime('%Y%m%dT%H%M%SZ')}"
    return RemediationRecord(
        cluster=cluster,
        node=node,
        execution=name,
        execution_arn=f"arn:aws:states:{REGION}:123456789012:execution:NodeHealRemediation:{name}",
        started_at=started,
        finished_at=started + timedelta(minutes=4),
        outcome=outcome,
        action=action,
        planned_action=action,
        reason="Xid 79: GPU has fallen off the bus; hardware, replace",
        summary="instance i-0abc1234567890def terminated",
        xid=xid,
        signal="xid",
        condition={
            "type": "GPUProblem",
            "status": "True",
            "reason": "GPUFellOffBus",
            "message": "NVRM: Xid 79",
        },
        instance_id="i-0abc1234567890def",
        instance_type="p5.48xlarge",
        node_pool="gpu",
        stage_seconds={
            "ingested": 1.2,
            "admitted": 0.4,
            "cordoned": 0.3,
            "faultToCordon": 3.1,
            "faultToRecorded": 241.0,
        },
        stage_times={"fault": "2026-11-21T10:00:00.000Z", "cordon": "2026-11-21T10:00:03.100Z"},
        pods_evicted=3,
        pdb_blocked=1,
    )


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)
