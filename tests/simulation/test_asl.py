"""The simulation's state machine interpreter, against the semantics of the Amazon States Language
(its Retry, Catch, Choice, Wait and path rules) and against the definition the stack synthesizes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeheal.errors import STOP_ERRORS
from nodeheal.sim.seeded import asl
from nodeheal.sim.seeded.template import SimTemplate

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


def machine(states: dict[str, Any], **top: Any) -> asl.StateMachine:
    return asl.StateMachine.from_definition({"StartAt": next(iter(states)), "States": states, **top})


def run(
    m: asl.StateMachine, answers: list[asl.TaskOutcome], data: Any = None, limit: int = 50
) -> tuple[asl.Execution, list[str], list[Any]]:
    execution = asl.Execution(m, "e", "arn:aws:states:us-west-2:1:execution:sm:e", data or {}, T0)
    payloads: list[Any] = []
    seen: list[str] = []
    now = T0
    rng = random.Random(1)

    def invoke(state: str, resource: str, payload: Any) -> asl.TaskOutcome:
        payloads.append(payload)
        return answers.pop(0)

    for _ in range(limit):
        if execution.done:
            break
        now = max(now, execution.wake_at or now)
        seen.append(execution.current)
        execution.step(now, invoke, rng)
    return execution, seen, payloads


RETRY = [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 2, "MaxAttempts": 2, "BackoffRate": 2.0}]


def test_a_retrier_retries_with_backoff_then_the_catcher_takes_the_error() -> None:
    m = machine(
        {
            "Work": {
                "Type": "Task",
                "Resource": "fn",
                "Retry": RETRY,
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.failure", "Next": "Failed"}],
                "End": True,
            },
            "Failed": {"Type": "Pass", "End": True},
        }
    )
    flaky = asl.TaskOutcome(error="Flaky", cause="c")
    execution, seen, _ = run(m, [flaky, flaky, flaky])
    assert seen == ["Work", "Work", "Work", "Failed"]
    assert execution.status == asl.SUCCEEDED
    assert execution.data == {"failure": {"Error": "Flaky", "Cause": "c"}}


def test_retry_waits_grow_by_the_backoff_rate() -> None:
    m = machine({"Work": {"Type": "Task", "Resource": "fn", "Retry": RETRY, "End": True}})
    execution = asl.Execution(m, "e", "arn", {}, T0)
    rng = random.Random(1)
    flaky = asl.TaskOutcome(error="Flaky")
    execution.step(T0, lambda *_: flaky, rng)
    assert execution.wake_at == T0 + timedelta(seconds=2)
    execution.step(T0 + timedelta(seconds=2), lambda *_: flaky, rng)
    assert execution.wake_at == T0 + timedelta(seconds=2 + 4)
    execution.step(T0 + timedelta(seconds=6), lambda *_: flaky, rng)
    assert execution.status == asl.FAILED and execution.error == "Flaky"


def test_an_exhausted_first_matching_retrier_does_not_fall_through_to_a_later_one() -> None:
    retry = [
        {"ErrorEquals": ["Flaky"], "MaxAttempts": 0},
        {"ErrorEquals": ["States.ALL"], "MaxAttempts": 5, "IntervalSeconds": 1},
    ]
    m = machine({"Work": {"Type": "Task", "Resource": "fn", "Retry": retry, "End": True}})
    execution, seen, _ = run(m, [asl.TaskOutcome(error="Flaky")])
    assert seen == ["Work"] and execution.status == asl.FAILED


def test_states_all_does_not_catch_a_data_limit() -> None:
    m = machine(
        {
            "Work": {
                "Type": "Task",
                "Resource": "fn",
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Succeed"},
        }
    )
    big = asl.TaskOutcome(output="x" * (asl.MAX_PAYLOAD_BYTES + 1))
    execution, _, _ = run(m, [big])
    assert execution.status == asl.FAILED and execution.error == "States.DataLimitExceeded"


def test_choice_rules_result_paths_and_the_context_object() -> None:
    m = machine(
        {
            "Load": {
                "Type": "Pass",
                "Parameters": {"event.$": "$.event", "execution": {"name.$": "$$.Execution.Name"}},
                "Next": "Work",
            },
            "Work": {"Type": "Task", "Resource": "fn", "ResultPath": "$.work.result", "Next": "Which?"},
            "Which?": {
                "Type": "Choice",
                "Choices": [
                    {
                        "And": [
                            {"Variable": "$.work.result.ok", "BooleanEquals": True},
                            {"Variable": "$.missing", "IsPresent": False},
                        ],
                        "Next": "Wait",
                    }
                ],
                "Default": "Nope",
            },
            "Wait": {"Type": "Wait", "SecondsPath": "$.work.result.seconds", "Next": "Done"},
            "Done": {"Type": "Succeed"},
            "Nope": {"Type": "Fail", "Error": "Nope"},
        }
    )
    original = {"event": {"a": 1}, "noise": True}
    execution, seen, payloads = run(m, [asl.TaskOutcome(output={"ok": True, "seconds": 30})], original)
    assert seen == ["Load", "Work", "Which?", "Wait", "Wait", "Done"]
    assert payloads == [{"event": {"a": 1}, "execution": {"name": "e"}}]
    assert execution.status == asl.SUCCEEDED
    assert execution.data["work"] == {"result": {"ok": True, "seconds": 30}}
    assert original == {"event": {"a": 1}, "noise": True}, "a ResultPath never changes the input in place"


def test_a_definition_pointing_nowhere_is_refused() -> None:
    with pytest.raises(asl.AslError, match="does not exist"):
        machine({"A": {"Type": "Pass", "Next": "B"}})
    with pytest.raises(asl.AslError, match="not supported"):
        machine({"A": {"Type": "Map", "End": True}})


def test_the_simulation_walks_the_state_machine_the_stack_deploys(template: SimTemplate) -> None:
    states = template.machine.states
    edges = template.machine.edges()
    stops = sorted(error.__name__ for error in STOP_ERRORS)
    tasks = [name for name, state in states.items() if state["Type"] == "Task"]
    assert {
        "Admit",
        "Cordon",
        "Evict pods",
        "Reboot instance",
        "Terminate instance",
        "Record outcome",
    } <= set(tasks)
    for name in tasks:
        resource = states[name]["Resource"]
        assert resource in template.functions, f"{name} runs a function the template does not deploy"
        catches = states[name].get("Catch") or []
        if name not in ("Record outcome", "Record failure"):
            assert sorted(catches[0]["ErrorEquals"]) == stops
            assert catches[-1]["ErrorEquals"] == ["States.ALL"]
    assert "Terminate instance" in edges["Was the instance rebooted?"]
    assert template.machine.timeout_seconds is not None and template.machine.timeout_seconds > 0
