"""Defect 7: what the synthesized state machine does when a Lambda task is killed or throttled."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeheal.cdk.workflow_tasks import WORKFLOW_TASKS, TaskSpec
from nodeheal.errors import DeadlineExceededError
from tests.infrastructure.conftest import Synthesized

LAMBDA_TIMEOUTS = {"Sandbox.Timedout", "Lambda.Unknown"}
#: What CDK's retry_on_service_exceptions adds, plus the throttle it leaves out.
LAMBDA_SERVICE_EXCEPTIONS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}


def _task_states(synthesized: Synthesized) -> dict[str, tuple[TaskSpec, dict[str, Any]]]:
    """Every Task state of the state machine with the spec of the function it invokes."""
    (machine,) = synthesized.resources("AWS::StepFunctions::StateMachine").values()
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    # A token becomes the logical id it refers to, so a state can be traced to its function.
    text = "".join(
        part if isinstance(part, str) else next(iter(part.values()))[0] if "Fn::GetAtt" in part else "TOKEN"
        for part in parts
    )
    definition = json.loads(text)
    function_ids = {
        resource["Properties"]["FunctionName"]: logical_id
        for logical_id, resource in synthesized.resources("AWS::Lambda::Function").items()
    }
    spec_by_id = {
        function_ids[f"{synthesized.config.stack_name}-{spec.name}"]: spec for spec in WORKFLOW_TASKS
    }
    tasks: dict[str, tuple[TaskSpec, dict[str, Any]]] = {}
    for name, state in definition["States"].items():
        if state["Type"] == "Task":
            # Tasks invoke the function directly (payload only): the Resource is its ARN.
            tasks[name] = (spec_by_id[state["Resource"]], state)
    return tasks


def _retried(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Error name -> the retrier that handles it (the first one naming it, as Step Functions reads)."""
    handled: dict[str, dict[str, Any]] = {}
    for retrier in state.get("Retry", []):
        for error in retrier["ErrorEquals"]:
            handled.setdefault(error, retrier)
    return handled


@pytest.fixture(scope="module")
def task_states(default_stack: Synthesized) -> dict[str, tuple[TaskSpec, dict[str, Any]]]:
    return _task_states(default_stack)


def test_defect_7_every_workflow_function_is_a_task_state(
    task_states: dict[str, tuple[TaskSpec, dict[str, Any]]],
) -> None:
    assert {spec.name for spec, _ in task_states.values()} == {spec.name for spec in WORKFLOW_TASKS}


def test_defect_7_idempotent_steps_retry_lambda_timeouts_under_both_names(
    task_states: dict[str, tuple[TaskSpec, dict[str, Any]]],
) -> None:
    idempotent = {name: state for name, (spec, state) in task_states.items() if spec.idempotent}
    assert "Evict pods" in idempotent and "Record failure" in idempotent
    for name, state in idempotent.items():
        retried = _retried(state)
        assert retried.keys() >= LAMBDA_TIMEOUTS, name
        for error in LAMBDA_TIMEOUTS:
            retrier = retried[error]
            # Bounded: each retry may last a whole Lambda timeout again.
            assert 1 <= retrier["MaxAttempts"] <= 3, name
            assert retrier["IntervalSeconds"] <= 5, name


def test_defect_7_reboot_is_not_retried_after_a_lambda_timeout(
    task_states: dict[str, tuple[TaskSpec, dict[str, Any]]],
) -> None:
    spec, state = task_states["Reboot instance"]
    assert not spec.idempotent
    assert not LAMBDA_TIMEOUTS & _retried(state).keys()


def test_defect_7_every_step_retries_deadlines_and_lambda_service_exceptions_once_each(
    task_states: dict[str, tuple[TaskSpec, dict[str, Any]]],
) -> None:
    for name, (_, state) in task_states.items():
        named = [error for retrier in state["Retry"] for error in retrier["ErrorEquals"]]
        assert len(named) == len(set(named)), f"{name}: an error in two retriers: {named}"
        retried = _retried(state)
        assert retried.keys() >= LAMBDA_SERVICE_EXCEPTIONS, name
        assert DeadlineExceededError.__name__ in retried, name
