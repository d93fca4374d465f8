"""The step registry (nodeheal.steps): each step declared once, and what derives from it agrees.

The derived forms are held equal to the registry elsewhere too: the template's functions and task
states (tests/infrastructure/test_resources.py, test_lambda_timeouts.py), the RBAC manifest
(tests/infrastructure/test_rbac.py) and the worst case (tests/unit/test_worst_case.py). Here: the
entries themselves, the Events step_events writes under each step's name, and the timeline's words.
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
from nodeheal.workflow import step_events
from nodeheal.worst_case import TASK_TIMEOUT_SECONDS

#: A row of the reasons table in nodeheal.workflow.step_events's docstring: reason, type, written by.
TABLE_ROW = re.compile(r"^(?P<reason>[A-Z][A-Za-z]+)\s+(?:Normal|Warning)\s+(?P<by>[a-z-]+)", re.MULTILINE)


def told_by_table() -> dict[str, set[str]]:
    """Step name -> the reasons step_events's table says it writes (the first word that names a step)."""
    names = {step.name for step in STEPS}
    told: dict[str, set[str]] = {}
    for row in TABLE_ROW.finditer(step_events.__doc__ or ""):
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
def test_the_step_events_table_and_the_entry_name_the_same_event_reasons(step: Step) -> None:
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


#: One result per step and what the timeline prints for it: the wording moved into the registry
#: unchanged, and these hold it.
TIMELINE_CASES = [
    (
        steps.ADMIT,
        {
            "verdict": "proceed",
            "decision": {"action": "replace", "reason": "Xid 79 (bus). NodeHeal: X: gone"},
        },
        ("decision", "decision: REPLACE - Xid 79; gone"),
    ),
    (
        steps.ADMIT,
        {"verdict": "wait", "note": "held"},
        ("decision", "waiting behind another remediation: held"),
    ),
    (
        steps.CORDON,
        {"performed": True},
        ("cordoned", "cordoned and tainted nodeheal.io/unhealthy:NoSchedule"),
    ),
    (steps.CORDON, {"skipped": "dry-run"}, ("cordoned", "cordon skipped: dry-run")),
    (
        steps.DRAIN,
        {"done": True, "evicted": 3, "pdbBlocked": 1},
        ("drained", "drained: 3 pod(s) evicted, 1 eviction(s) refused by a PDB"),
    ),
    (
        steps.DRAIN,
        {"rounds": 2, "evicted": 1, "terminating": 2, "lastBlocked": ["a"], "heldBackDoNotDisrupt": 1},
        (
            "drain-round",
            "eviction round 2: 1 evicted, 2 terminating, 1 refused by a PDB (429), retried next round, "
            "1 karpenter.sh/do-not-disrupt held back",
        ),
    ),
    (steps.FORCE_DRAIN, {"forced": 2}, ("forced", "drain timed out: force-deleted 2 pod(s)")),
    (
        steps.TERMINATE,
        {"performed": True, "instanceId": "i-1", "escalation": True},
        ("terminated", "EC2 TerminateInstances i-1 (reboot did not heal it)"),
    ),
    (
        steps.TERMINATE,
        {"nodeClaim": "gpu-abc", "instanceId": "i-1"},
        ("terminated", "deleted NodeClaim gpu-abc: Karpenter terminates i-1"),
    ),
    (steps.REBOOT, {"skipped": "paused"}, ("rebooted", "RebootInstances not called: paused")),
    (steps.UNCORDON, {"performed": True}, ("uncordoned", "uncordoned: back in service")),
    (
        steps.RECORD_FAILURE,
        {"outcome": "failed", "summary": "boom"},
        ("recorded", "recorded in the ledger: failed - boom"),
    ),
]


@pytest.mark.parametrize(("step", "result", "line"), TIMELINE_CASES)
def test_the_timeline_describes_a_step_in_its_entrys_words(
    step: Step, result: dict[str, object], line: tuple[str, str]
) -> None:
    assert describe_task(step.handler, result) == line


@pytest.mark.parametrize("runs", [0, 1, 2])
def test_a_step_the_worst_case_does_not_name_counts_as_often_as_the_longest_path_runs_it(
    monkeypatch: pytest.MonkeyPatch, runs: int
) -> None:
    """A new step lengthens the lock's worst case by its own, with no term written for it; one on a
    branch the longest path never takes lengthens nothing."""
    from nodeheal import worst_case
    from nodeheal.config import RemediationSettings

    settings = RemediationSettings.from_json({})
    before = worst_case.holding_worst_case(settings)
    extra = Step(
        "extra",
        "Extra",
        "lambdas.extra.handler",
        "A step added later",
        steps.Calls(kube_requests=1, aws_calls=1),
        result_key="extra",
        runs_on_the_longest_path=runs,
    )
    monkeypatch.setattr(worst_case, "STEPS", (*STEPS, extra))
    timeouts = {**worst_case.TASK_TIMEOUT_SECONDS, extra.name: extra.timeout_seconds}
    after = worst_case.holding_worst_case(settings, timeouts)
    clauses = worst_case.task_retry_clauses(settings.retry)
    added = runs * worst_case.task_worst_case_seconds(extra.timeout_seconds, clauses)
    assert after.total_seconds - before.total_seconds == added
    assert [term.name for term in after.terms].count("extra") == (1 if runs else 0)
