"""Ends no Catch sees (defect 5, D6 in docs/architecture.md): an aborted or timed-out execution still leaves a
ledger record, releases its lock and budget slot and tells a person, through the finalizer (fed the
documented "Step Functions Execution Status Change" event, which moto does not emit) or the sweeper.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeheal.timestamps import utc_now
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import CLUSTER, XID_79, Pipeline

FINALIZER = "lambdas.finalize.handler"
#: A drain that outlasts the test: the execution is still draining when it is stopped.
LONG_DRAIN = {"drain": {"timeoutSeconds": 600}}


def status_change_event(execution: dict[str, Any], state_machine_arn: str) -> dict[str, Any]:
    """The event Step Functions sends to the default bus when an execution ends (User Guide,
    "Step Functions execution status change" event example)."""
    return {
        "version": "0",
        "id": "315c1398-40ff-a850-213b-158f73e60175",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": "123456789012",
        "time": utc_now().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-west-2",
        "resources": [execution["executionArn"]],
        "detail": {
            "executionArn": execution["executionArn"],
            "stateMachineArn": state_machine_arn,
            "name": execution["name"],
            "status": execution["status"],
            "startDate": int(execution["startDate"].timestamp() * 1000),
            "stopDate": int(execution["stopDate"].timestamp() * 1000) if execution.get("stopDate") else None,
            "input": execution.get("input"),
            "inputDetails": {"included": True},
            "output": None,
            "outputDetails": None,
        },
    }


def finalizer_call(pipeline: Pipeline, payload: Any) -> dict[str, Any]:
    result: dict[str, Any] = pipeline.aws.call_handler(pipeline.aws.function_logical_id(FINALIZER), payload)
    return result


@pytest.mark.nodeheal_config(LONG_DRAIN)
def test_defect_5_an_aborted_execution_is_recorded_released_and_notified(pipeline: Pipeline) -> None:
    instance, arn = pipeline.start_blocked_drain()
    sfn = pipeline.aws.client("stepfunctions")
    assert pipeline.lock_holder("gpu-a") is not None
    sfn.stop_execution(executionArn=arn, error="OperatorStopped", cause="stopped by hand")
    ended = pipeline.aws.wait_for_execution(arn, timeout=30)
    assert ended["status"] == "ABORTED"
    assert pipeline.records("gpu-a") == [], "no Catch saw the abort"
    pipeline.aws.notifications()  # drain what the workflow sent before

    described = sfn.describe_execution(executionArn=arn)
    result = finalizer_call(pipeline, status_change_event(described, described["stateMachineArn"]))

    assert result["results"][0]["status"] == "recorded"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.FAILED and record.error in ("OperatorStopped", "ExecutionAborted")
    assert "node left cordoned" in record.summary
    assert record.instance_id == instance
    assert pipeline.lock_holder("gpu-a") is None
    ledger = pipeline.aws.runtime_for(pipeline.aws.function_logical_id(FINALIZER)).ledger
    assert instance not in ledger.read_admission_state(CLUSTER).in_flight, "budget slot released"
    sent = pipeline.aws.notifications()
    assert len(sent) == 1 and "failed" in sent[0]["subject"]

    # The same event again (EventBridge is at-least-once), and the sweeper: nothing more happens.
    again = finalizer_call(pipeline, status_change_event(described, described["stateMachineArn"]))
    assert again["results"][0]["status"] == "already-recorded"
    swept = finalizer_call(pipeline, {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})
    assert [r["status"] for r in swept["results"]] == ["already-recorded"]
    assert len(pipeline.records("gpu-a")) == 1 and pipeline.aws.notifications() == []


@pytest.mark.nodeheal_config(LONG_DRAIN)
def test_defect_5_the_sweeper_finds_an_end_whose_event_was_lost(pipeline: Pipeline) -> None:
    _, arn = pipeline.start_blocked_drain()
    pipeline.aws.client("stepfunctions").stop_execution(executionArn=arn)
    pipeline.aws.wait_for_execution(arn, timeout=30)

    swept = finalizer_call(pipeline, {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})

    assert [r["status"] for r in swept["results"]] == ["recorded"]
    assert pipeline.only_record("gpu-a").outcome is Outcome.FAILED
    assert pipeline.lock_holder("gpu-a") is None


def test_defect_5_a_failure_record_failure_already_wrote_is_not_written_again(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a", owned=False)  # ownership check fails -> Record failure -> FAILED
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    assert execution["status"] == "FAILED"
    pipeline.aws.notifications()
    described = pipeline.aws.client("stepfunctions").describe_execution(
        executionArn=execution["executionArn"]
    )

    result = finalizer_call(pipeline, status_change_event(described, described["stateMachineArn"]))

    assert result["results"][0]["status"] == "already-recorded"
    assert len(pipeline.records("gpu-a")) == 1 and pipeline.aws.notifications() == []


def test_defect_5_a_status_change_event_without_an_execution_is_refused(pipeline: Pipeline) -> None:
    bad = {"detail-type": "Step Functions Execution Status Change", "source": "aws.states", "detail": {}}
    with pytest.raises(Exception, match="executionArn"):
        finalizer_call(pipeline, bad)
    assert json.dumps(bad)  # the malformed event is the caller's to dead-letter; nothing was written
    assert pipeline.records("gpu-a") == []
