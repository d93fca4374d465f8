"""What each step tells the Node (nodeheal.workflow.step_events), over in-memory ports.

The end-to-end sequence through the deployed state machine and the fake API server is in
tests/workflow/test_node_events.py; here are the rules a single step follows: which verdict or
result is told and how, that a wait is told once, that a quiet drain round is not told, that a stop
is told before it reaches the state machine, and that nothing about telling can fail a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from nodeheal.actions import Mode
from nodeheal.config import RemediationSettings
from nodeheal.errors import RemediationPausedError
from nodeheal.kube_event_body import EventType, ObjectEvent, event_body
from nodeheal.kube_views import PodView
from nodeheal.workflow import mutations, step_events
from nodeheal.workflow.admission import admit
from nodeheal.workflow.ports import KubeAccess
from nodeheal.workflow.state import WorkflowState
from tests.unit.workflow.fakes import (
    CLUSTER,
    INSTANCE,
    NOW,
    FakeLedger,
    FakeNodes,
    NoPods,
    gpu_problem,
    live_node,
    workflow_state,
)

NO_XID = "nvidia-smi failed: Unable to determine the device handle for GPU 0000:53:00.0: Unknown Error"


@dataclass
class RecordingEvents:
    told: list[ObjectEvent] = field(default_factory=list)
    lost_why: list[str] = field(default_factory=list)

    def record(self, events: Sequence[ObjectEvent]) -> None:
        self.told.extend(events)

    def lost(self, count: int, why: str) -> None:
        self.lost_why.append(why)

    def reasons(self) -> list[str]:
        return [event.reason for event in self.told]


def kube_with(nodes: FakeNodes, events: RecordingEvents) -> KubeAccess:
    return KubeAccess(nodes=nodes, pods=NoPods(), events=events)


def setup(condition: dict[str, Any] | None = None) -> tuple[FakeNodes, FakeLedger, RecordingEvents]:
    node = live_node(condition=condition or gpu_problem())
    return FakeNodes({node.name: node}), FakeLedger(), RecordingEvents()


def admitted_state(nodes: FakeNodes, ledger: FakeLedger, **kwargs: Any) -> WorkflowState:
    """The state after a real admit (its result under ``admission``), as the state machine passes it."""
    state = workflow_state(nodes.nodes["gpu-a"], **kwargs)
    admission = admit(state, KubeAccess(nodes, NoPods()), ledger, NOW)
    return workflow_state(
        nodes.nodes["gpu-a"], **kwargs, extra={"admission": admission.to_json(state.event.condition.message)}
    )


# -- admit ------------------------------------------------------------------------------------------


def test_a_decision_to_replace_is_a_warning_on_the_node_naming_the_execution() -> None:
    nodes, ledger, events = setup()
    admit(workflow_state(nodes.nodes["gpu-a"]), kube_with(nodes, events), ledger, NOW)

    (decided,) = events.told
    body = event_body(decided)
    assert (decided.reason, decided.action, decided.type) == (
        "RemediationDecided",
        "Decide",
        EventType.WARNING,
    )
    assert body["regarding"] == {
        "kind": "Node",
        "name": "gpu-a",
        "uid": nodes.nodes["gpu-a"].uid,
        "apiVersion": "v1",
    }
    assert body["reportingInstance"] == "nodeheal-admit" and body["metadata"]["namespace"] == "default"
    assert body["note"].startswith("Decided replace for GPUProblem=True (Xid 79): Xid 79 in the message")
    assert body["note"].endswith("(execution exec-1)")


def test_dry_run_tells_what_would_have_been_done() -> None:
    nodes, ledger, events = setup()
    settings = RemediationSettings(mode=Mode.DRY_RUN)
    admit(workflow_state(nodes.nodes["gpu-a"], settings=settings), kube_with(nodes, events), ledger, NOW)

    (decided,) = events.told
    assert decided.reason == "RemediationDecided" and decided.type is EventType.WARNING
    assert decided.note.startswith("Decided none for GPUProblem=True (Xid 79)")
    assert "would have done replace" in decided.note


def test_nothing_to_do_is_a_normal_decision() -> None:
    xid13 = "NVRM: Xid (PCI:0000:53:00): 13, pid=1, name=python3, Graphics SM Warp Exception"
    nodes, ledger, events = setup(gpu_problem(message=xid13))
    admit(
        workflow_state(nodes.nodes["gpu-a"], condition=gpu_problem(message=xid13)),
        kube_with(nodes, events),
        ledger,
        NOW,
    )

    (decided,) = events.told
    assert decided.type is EventType.NORMAL and decided.note.startswith(
        "Decided none for GPUProblem=True (Xid 13)"
    )


def test_a_confirmation_is_told_when_it_starts_not_at_each_admission_during_it() -> None:
    nodes, ledger, events = setup(gpu_problem(message=NO_XID, at="2026-11-21T10:04:30Z"))
    first = workflow_state(nodes.nodes["gpu-a"])
    admission = admit(first, kube_with(nodes, events), ledger, NOW)
    assert events.reasons() == ["ConfirmationStarted"]
    assert "waiting 90s for the condition to stay bad 120s before acting" in events.told[0].note

    again = workflow_state(nodes.nodes["gpu-a"], extra={"admission": admission.to_json()})
    admit(again, kube_with(nodes, events), ledger, NOW + timedelta(seconds=30))
    admit(again, kube_with(nodes, events), ledger, NOW + timedelta(seconds=90))
    assert events.reasons() == ["ConfirmationStarted", "RemediationDecided"]


def test_waiting_behind_another_execution_is_told_once() -> None:
    nodes, ledger, events = setup()
    ledger.acquire_lock(CLUSTER, INSTANCE, "exec-other", timedelta(hours=1))
    ledger.claim_mutation(CLUSTER, INSTANCE, "exec-other", step="drain", busy_for=timedelta(0))
    admission = admit(workflow_state(nodes.nodes["gpu-a"]), kube_with(nodes, events), ledger, NOW)
    waiting = workflow_state(nodes.nodes["gpu-a"], extra={"admission": admission.to_json()})
    admit(waiting, kube_with(nodes, events), ledger, NOW + timedelta(seconds=30))

    assert events.reasons() == ["WaitingForLock"]
    assert "exec-other is remediating this node" in events.told[0].note


def test_a_condition_gone_healthy_is_told_as_skipped_with_why() -> None:
    nodes, ledger, events = setup(gpu_problem(status="False", message="ok"))
    admit(
        workflow_state(nodes.nodes["gpu-a"], condition=gpu_problem()), kube_with(nodes, events), ledger, NOW
    )

    (skipped,) = events.told
    assert (skipped.reason, skipped.type) == ("RemediationSkipped", EventType.NORMAL)
    assert "condition GPUProblem is no longer bad on the live node" in skipped.note


def test_a_budget_refusal_is_a_warning() -> None:
    nodes, ledger, events = setup()
    nodes.nodes["gpu-b"] = live_node("gpu-b", instance_id="i-0bbb1234def567890")
    nodes.taint("gpu-b")
    settings = RemediationSettings.from_json(
        {
            **RemediationSettings(mode=Mode.FULL).to_json(),
            "budgets": {"maxUnhealthyPoolShare": 0.0, "minPoolAllowance": 1},
        }
    )
    admit(workflow_state(nodes.nodes["gpu-a"], settings=settings), kube_with(nodes, events), ledger, NOW)

    (refused,) = events.told
    assert (refused.reason, refused.type) == ("RemediationRefused", EventType.WARNING)
    assert refused.note.startswith("replace not done:") and "allowance is 1" in refused.note


# -- steps ------------------------------------------------------------------------------------------


def test_cordon_tells_what_comes_next() -> None:
    nodes, ledger, events = setup()
    state = admitted_state(nodes, ledger)

    mutations.cordon(state, kube_with(nodes, events), ledger, NOW, mode=Mode.FULL)

    (cordoned,) = events.told
    assert (cordoned.reason, cordoned.function) == ("Cordoned", "cordon")
    assert "GPUProblem=True (Xid 79)" in cordoned.note and "terminate the instance" in cordoned.note


def test_a_stop_is_told_on_the_node_then_reaches_the_state_machine() -> None:
    nodes, ledger, events = setup()
    state = admitted_state(nodes, ledger)

    with pytest.raises(RemediationPausedError):
        mutations.cordon(state, kube_with(nodes, events), ledger, NOW, mode=Mode.DRY_RUN)

    (stopped,) = events.told
    assert (stopped.reason, stopped.type, stopped.function) == (
        "RemediationSkipped",
        EventType.WARNING,
        "cordon",
    )
    assert stopped.note.startswith(
        "Stopped (RemediationPaused): cordon not done: NodeHeal now runs in dry-run"
    )
    assert not nodes.nodes["gpu-a"].unschedulable


def test_a_broken_story_never_fails_the_step() -> None:
    """The story is built inside the guard: a bug in it is logged and counted as lost Events, and
    the step's own work and result are untouched."""
    nodes, ledger, events = setup()
    state = admitted_state(nodes, ledger)

    def broken(*args: object) -> list[ObjectEvent]:
        raise KeyError("admission")

    # The undecorated step (functools.wraps keeps it), told by a story that raises.
    cordon = step_events.told("cordon", broken)(mutations.cordon.__wrapped__)  # type: ignore[attr-defined]
    result = cordon(state, kube_with(nodes, events), ledger, NOW, mode=Mode.FULL)

    assert result["performed"] is True and nodes.nodes["gpu-a"].unschedulable
    assert events.told == [] and events.lost_why == ["KeyError: 'admission'"]


def test_a_port_that_raises_never_fails_the_step() -> None:
    class Raising(RecordingEvents):
        def record(self, events: Sequence[ObjectEvent]) -> None:
            raise OSError("socket closed")

    nodes, ledger, _ = setup()
    events = Raising()
    state = admitted_state(nodes, ledger)

    result = mutations.cordon(state, kube_with(nodes, events), ledger, NOW, mode=Mode.FULL)

    assert result["performed"] is True and events.lost_why == ["OSError: socket closed"]


def test_told_needs_the_steps_state_kube_and_now() -> None:
    def step(state: object, ledger: object) -> dict[str, Any]:
        return {}

    with pytest.raises(TypeError, match="no parameter kube, now"):
        step_events.told("cordon")(step)


@dataclass
class Outcome:
    pod: str
    message: str = ""
    retryable: bool = False


@dataclass
class Report:
    evicted: list[Outcome] = field(default_factory=list)
    blocked: list[Outcome] = field(default_factory=list)
    gone: list[Outcome] = field(default_factory=list)
    failed: list[Outcome] = field(default_factory=list)
    not_reached: list[Outcome] = field(default_factory=list)


def _pod(name: str) -> PodView:
    return PodView(namespace="training", name=name, uid=f"uid-{name}", phase="Running", owner_kinds=("Job",))


def test_a_round_tells_the_node_its_counts_and_each_evicted_pod_its_eviction() -> None:
    nodes, ledger, _ = setup()
    state = admitted_state(nodes, ledger)
    pods = [_pod("trainer-0"), _pod("trainer-1")]
    result = {"rounds": 1, "summary": "drain of gpu-a: 1 pods evicted, 1 still on the node", "done": False}

    told = step_events.drain_round(state, result, pods, Report(evicted=[Outcome("training/trainer-0")]), NOW)

    assert [(e.reason, e.regarding.kind, e.regarding.name) for e in told] == [
        ("Draining", "Node", "gpu-a"),
        ("Evicted", "Pod", "trainer-0"),
    ]
    assert told[0].note.startswith("Eviction round 1: drain of gpu-a: 1 pods evicted")
    evicted = event_body(told[1])
    assert evicted["metadata"]["namespace"] == "training"
    assert evicted["related"]["name"] == "gpu-a" and evicted["regarding"]["uid"] == "uid-trainer-0"
    assert "being replaced for GPUProblem=True (Xid 79)" in evicted["note"]


def test_a_round_that_changed_nothing_is_not_told_but_the_end_of_the_drain_is() -> None:
    nodes, ledger, _ = setup()
    state = admitted_state(nodes, ledger)
    blocked = Report(blocked=[Outcome("training/trainer-0")])

    quiet = step_events.drain_round(state, {"rounds": 4, "summary": "", "done": False}, [], blocked, NOW)
    timed_out = step_events.drain_round(
        state, {"rounds": 90, "summary": "s", "timedOut": True}, [], blocked, NOW
    )
    done = step_events.drain_round(state, {"rounds": 5, "evicted": 2, "done": True}, [], Report(), NOW)

    assert quiet == []
    assert [(e.reason, e.type) for e in timed_out] == [("DrainTimedOut", EventType.WARNING)]
    assert "pods left are deleted next, with a 30s grace period" in timed_out[0].note
    assert [e.note for e in done] == [
        "Drained after 5 eviction round(s): 2 pod(s) evicted, none left that must move"
    ]


def test_an_aborted_drain_says_the_node_stays_cordoned() -> None:
    nodes, ledger, _ = setup()
    settings = RemediationSettings.from_json(
        {
            **RemediationSettings().to_json(),
            "drain": {**RemediationSettings().drain.to_json(), "onTimeout": "abort"},
        }
    )
    state = admitted_state(nodes, ledger, settings=settings)

    (aborted,) = step_events.drain_round(
        state, {"rounds": 90, "summary": "s", "timedOut": True}, [], Report(), NOW
    )

    assert (aborted.reason, aborted.type) == ("DrainAborted", EventType.WARNING)
    assert "stays cordoned for a person" in aborted.note


def test_the_instance_and_recovery_steps_tell_their_result() -> None:
    nodes, ledger, _ = setup()
    state = admitted_state(nodes, ledger)

    def told(build: step_events.ResultStory, result: dict[str, Any]) -> list[tuple[str, str]]:
        return [(e.reason, e.note) for e in build(state, result, NOW)]

    assert told(step_events.rebooting, {"performed": True, "instanceId": INSTANCE})[0][0] == "Rebooting"
    assert told(step_events.rebooting, {"performed": False, "escalateTo": "replace", "skipped": "worse"}) == [
        ("EscalatedToReplace", "Not rebooting: worse")
    ]
    assert (
        told(step_events.rebooting, {"performed": False, "skipped": "instance-gone"})[0][0]
        == "RemediationSkipped"
    )
    assert told(step_events.recovery_checked, {"status": "pending"}) == []
    assert (
        told(step_events.recovery_checked, {"status": "recovered", "detail": "boot ID changed"})[0][0]
        == "Recovered"
    )
    assert told(step_events.recovery_checked, {"status": "failed", "detail": "x"})[0][0] == "RecoveryFailed"
    assert told(step_events.uncordoned, {"performed": False}) == []
    (uncordoned,) = told(step_events.uncordoned, {"performed": True})
    assert (
        uncordoned[0] == "Uncordoned"
        and "GPUProblem cleared (drain.onConditionCleared=uncordon)" in uncordoned[1]
    )
    (terminating,) = told(step_events.terminating, {"instanceId": INSTANCE, "previousState": "running"})
    assert terminating[0] == "Terminating"
    assert f"Terminating EC2 instance {INSTANCE} for GPUProblem=True (Xid 79);" in terminating[1]
    admission = state.raw["admission"]
    after_reboot = workflow_state(
        nodes.nodes["gpu-a"], extra={"admission": admission, "recovery": {"status": "failed"}}
    )
    (escalated,) = step_events.terminating(after_reboot, {"instanceId": INSTANCE, "escalation": True}, NOW)
    assert "for the reboot did not heal the node (escalation)" in escalated.note
    worsened = workflow_state(
        nodes.nodes["gpu-a"], extra={"admission": admission, "instance": {"escalateTo": "replace"}}
    )
    (instead,) = step_events.terminating(worsened, {"instanceId": INSTANCE, "escalation": True}, NOW)
    assert "which now calls for new hardware rather than a reboot (escalation)" in instead.note
    (gone,) = told(
        step_events.terminating, {"instanceId": INSTANCE, "previousState": "not-found", "alreadyGone": True}
    )
    assert "was already gone (not-found)" in gone[1]
