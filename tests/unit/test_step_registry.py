"""The step registry (nodeheal.steps): each step declared once, and what derives from it agrees.

The derived forms are held equal to the registry elsewhere too: the template's functions and task
states (tests/infrastructure/test_resources.py, test_lambda_timeouts.py), the RBAC manifest
(tests/infrastructure/test_rbac.py) and the worst case (tests/unit/test_timing.py). Here: the
entries themselves, the Events the story writes under each step's name, and the timeline's words.
"""

from __future__ import annotations

import importlib
import re

import pytest

from nodeheal import steps
from nodeheal.cdk.workflow_tasks import WORKFLOW_TASKS, TaskSpec
from nodeheal.rbac import KUBERNETES_RULES
from nodeheal.sim.timeline import describe_task
from nodeheal.steps import STEPS, Step
from nodeheal.timing import TASK_TIMEOUT_SECONDS
from nodeheal.workflow import story

#: A row of the reasons table in nodeheal.workflow.story's docstring: reason, type, written by.
TABLE_ROW = re.compile(r"^(?P<reason>[A-Z][A-Za-z]+)\s+(?:Normal|Warning)\s+(?P<by>[a-z-]+)", re.MULTILINE)


def told_by_table() -> dict[str, set[str]]:
    """Step name -> the reasons story's table says it writes (the first word that names a step)."""
    names = {step.name for step in STEPS}
    told: dict[str, set[str]] = {}
    for row in TABLE_ROW.finditer(story.__doc__ or ""):
        if row["by"] in names:
            told.setdefault(row["by"], set()).add(row["reason"])
    return told


@pytest.mark.parametrize("step", STEPS, ids=lambda step: step.name)
def test_each_step_is_declared_once(step: Step) -> None:
    assert [other.name for other in STEPS].count(step.name) == 1
    assert [other.state for other in STEPS].count(step.state) == 1
    assert steps.step_named(step.name) is step
    assert steps.step_of_handler(step.handler) is step


@pytest.mark.parametrize("step", STEPS, ids=lambda step: step.name)
def test_the_handler_named_by_the_entry_exists(step: Step) -> None:
    module, function = step.handler.rsplit(".", 1)
    assert callable(getattr(importlib.import_module(module), function))


@pytest.mark.parametrize("step", STEPS, ids=lambda step: step.name)
def test_the_deployed_task_is_the_entry(step: Step) -> None:
    (task,) = [task for task in WORKFLOW_TASKS if task.name == step.name]
    assert task == TaskSpec.of(step)
    assert task.idempotent is step.idempotent
    assert TASK_TIMEOUT_SECONDS[step.name] == step.timeout_seconds == step.calls.timeout_seconds
    assert KUBERNETES_RULES.get(step.name, ()) == step.kubernetes_rules


@pytest.mark.parametrize("step", STEPS, ids=lambda step: step.name)
def test_every_step_with_kubernetes_rules_may_write_events(step: Step) -> None:
    assert not step.kubernetes or steps.EVENTS in step.kubernetes_rules
    # A step without cluster access cannot write an Event, so it declares no reason.
    assert step.kubernetes or not step.event_reasons


@pytest.mark.parametrize("step", STEPS, ids=lambda step: step.name)
def test_the_story_table_and_the_entry_name_the_same_event_reasons(step: Step) -> None:
    """Every reason the table gives the step is declared, and every reason declared is in the
    table under the step (but the stop's, which the table gives every step at once)."""
    tabled = told_by_table().get(step.name, set())
    assert tabled <= set(step.event_reasons)
    assert set(step.event_reasons) - {steps.STOPPED_REASON} <= tabled


def test_a_step_that_is_not_mutating_needs_no_lock_claim() -> None:
    """The guard's ledger grants go with mutating (tests/infrastructure/test_resources.py holds the
    deployed form); a read-only step is idempotent by nature."""
    for step in STEPS:
        if not step.mutating:
            assert step.idempotent, step.name


def test_check_recovery_is_told_in_the_timeline_by_its_outcome_only() -> None:
    handler = steps.CHECK_RECOVERY.handler
    assert describe_task(handler, {"status": "pending", "detail": "waiting"}) is None
    assert describe_task(handler, {"status": "recovered", "detail": "boot ID changed"}) == (
        "recovered",
        "recovery recovered: boot ID changed",
    )
    assert describe_task(handler, {"status": "failed", "detail": "not Ready"}) == (
        "recovery-failed",
        "recovery failed: not Ready",
    )
