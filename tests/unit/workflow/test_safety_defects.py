"""Regression tests for the safety defects a review found (issue: never touch a healthy node, never
drop a fault, account for every execution). Each test is named after its defect and failed before
the fix; the steps run over the in-memory ports (tests/unit/workflow/fakes.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest

from nodeheal.actions import Action, Mode
from nodeheal.config import DrainSettings, RemediationSettings
from nodeheal.errors import (
    ConditionClearedError,
    NodeReplacedError,
    RemediationPausedError,
    SupersededError,
)
from nodeheal.kube_views import LiveNode, PodView
from nodeheal.workflow import mutations
from nodeheal.workflow.admission import PROCEED, STOP, WAIT, admit
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.locks import LockClaim
from nodeheal.workflow.ports import KubeAccess
from nodeheal.workflow.recording import record
from nodeheal.workflow.records import Outcome, RemediationRecord
from nodeheal.workflow.state import WorkflowState
from tests.unit.workflow.fakes import (
    CLUSTER,
    NOW,
    FakeLedger,
    FakeNodes,
    gpu_problem,
    live_node,
    workflow_state,
)

OLD_INSTANCE = "i-0abc1234def567890"
NEW_INSTANCE = "i-0fff0000aaa111222"
XID_48 = "NVRM: Xid (PCI:0000:53:00): 48, pid=2411, name=python3, DBE (double bit error)"
KERNEL_DEADLOCK = {
    "type": "KernelDeadlock",
    "status": "True",
    "reason": "DockerHung",
    "message": "task docker:7 blocked for more than 120 seconds.",
    "lastTransitionTime": "2026-11-21T10:04:00Z",
    "lastHeartbeatTime": "2026-11-21T10:04:00Z",
}


@dataclass
class Outcomes:
    evicted: list[Any] = field(default_factory=list)
    blocked: list[Any] = field(default_factory=list)
    gone: list[Any] = field(default_factory=list)
    failed: list[Any] = field(default_factory=list)
    deleted: list[Any] = field(default_factory=list)


@dataclass
class PodResult:
    pod: str
    message: str = ""
    retryable: bool = True


@dataclass
class RecordingPods:
    """Pods by node name, as the API server's fieldSelector lists them, recording every mutation."""

    by_node: dict[str, list[PodView]]
    evictions: list[str] = field(default_factory=list)
    deletions: list[str] = field(default_factory=list)

    def list_on_node(self, node_name: str) -> list[PodView]:
        return list(self.by_node.get(node_name, []))

    def evict(self, pods: Sequence[PodView], *, parallelism: int) -> Outcomes:
        self.evictions += [pod.key for pod in pods]
        return Outcomes(blocked=[PodResult(pod.key, "PDB") for pod in pods])

    def delete(self, pods: Sequence[PodView], *, grace_seconds: int, parallelism: int) -> Outcomes:
        self.deletions += [pod.key for pod in pods]
        return Outcomes(deleted=[PodResult(pod.key) for pod in pods])


def trainer(name: str) -> PodView:
    return PodView(namespace="training", name=name, uid=f"uid-{name}", phase="Running", owner_kinds=("Job",))


def cordoned(node: LiveNode) -> LiveNode:
    nodes = FakeNodes({node.name: node})
    nodes.taint(node.name)
    return nodes.nodes[node.name]


def admitted_state(
    node: LiveNode,
    *,
    settings: RemediationSettings | None = None,
    execution: str = "exec-1",
    condition: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Any:
    """The state of an execution that admitted ``node`` for replace and cordoned it."""
    admission = {
        "verdict": "proceed",
        "decision": {
            "action": "replace",
            "plannedAction": "replace",
            "reason": "Xid 79",
            "xid": 79,
            "signal": "xid:79",
            "confirmSeconds": 0,
        },
        "node": {
            "name": node.name,
            "uid": node.uid,
            "instanceId": node.instance_id,
            "providerId": node.provider_id,
            "pool": "gpu",
            "instanceType": "p5.48xlarge",
            "bootId": node.boot_id,
        },
        "lockHeld": True,
        "at": "2026-11-21T10:00:03.000Z",
    }
    steps = {"admission": admission, "cordon": {"performed": True, "at": "2026-11-21T10:00:04.000Z"}}
    return workflow_state(
        node, settings=settings, execution=execution, condition=condition, extra={**steps, **(extra or {})}
    )


def held_ledger(execution: str = "exec-1", subject: str = OLD_INSTANCE) -> FakeLedger:
    ledger = FakeLedger()
    ledger.acquire_lock(
        CLUSTER, subject, execution, timedelta(hours=2), LockClaim("gpu-a", "GPUProblem", Action.REPLACE, NOW)
    )
    return ledger


# -- defect 1: drain is tied to the admitted Node object ------------------------------------------


def replacement_of(node: LiveNode) -> LiveNode:
    """A new, healthy Node that took the old one's name (EC2 reused the private IP)."""
    fresh = live_node(node.name, condition=gpu_problem("False", "ok"), instance_id=NEW_INSTANCE)
    return replace(fresh, uid="uid-of-the-new-node")


@pytest.mark.parametrize("step", [mutations.drain_round, mutations.force_drain])
def test_defect_1_drain_never_touches_a_new_node_that_took_the_name(step: Any) -> None:
    old = cordoned(live_node(condition=gpu_problem()))
    state = admitted_state(old)
    nodes = FakeNodes({"gpu-a": replacement_of(old)})
    pods = RecordingPods({"gpu-a": [trainer("new-job-0"), trainer("new-job-1")]})
    with pytest.raises(NodeReplacedError, match="another object"):
        step(state, KubeAccess(nodes, pods), held_ledger(), NOW, mode=Mode.FULL)
    assert pods.evictions == [] and pods.deletions == []


def test_defect_1_a_node_whose_taint_was_removed_is_left_alone() -> None:
    node = live_node(condition=gpu_problem())  # same object, but a person uncordoned it
    pods = RecordingPods({"gpu-a": [trainer("job-0")]})
    with pytest.raises(NodeReplacedError, match="taint"):
        mutations.drain_round(
            admitted_state(node),
            KubeAccess(FakeNodes({"gpu-a": node}), pods),
            held_ledger(),
            NOW,
            mode=Mode.FULL,
        )
    assert pods.evictions == []


def _admitted_while_tainted(node: LiveNode, *, tainted: bool) -> Any:
    state = admitted_state(node)
    raw = dict(state.raw)
    raw["admission"] = {**raw["admission"], "node": {**raw["admission"]["node"], "hadNodeHealTaint": tainted}}
    return WorkflowState.parse(raw)


def test_a_node_admitted_under_another_cordon_and_taken_back_since_is_not_cordoned_again() -> None:
    """Soak seed 13001950: an execution admitted a node another execution had cordoned (its lock
    had run out); a person then took the node back, uncordoning it and removing the taint. The
    cordon step put it all back. A holder that lost the node cannot uncordon it (it needs the
    lock), so the taint gone since admit means a person: what began before is theirs (I16)."""
    node = live_node(condition=gpu_problem())  # uncordoned, the taint removed
    nodes = FakeNodes({"gpu-a": node})
    with pytest.raises(NodeReplacedError, match="taint"):
        mutations.cordon(
            _admitted_while_tainted(node, tainted=True),
            KubeAccess(nodes, RecordingPods({})),
            held_ledger(),
            NOW,
            mode=Mode.FULL,
        )
    assert not nodes.nodes["gpu-a"].cordoned_by_nodeheal and not nodes.nodes["gpu-a"].unschedulable
    # Admitted untainted, the cordon is this execution's own first one.
    mutations.cordon(
        _admitted_while_tainted(node, tainted=False),
        KubeAccess(nodes, RecordingPods({})),
        held_ledger(),
        NOW,
        mode=Mode.FULL,
    )
    assert nodes.nodes["gpu-a"].cordoned_by_nodeheal


def test_admit_remembers_whether_nodeheals_taint_was_on_the_node() -> None:
    for node, expected in (
        (live_node(condition=gpu_problem()), False),
        (cordoned(live_node(condition=gpu_problem())), True),
    ):
        admission = admit(
            workflow_state(node),
            KubeAccess(FakeNodes({"gpu-a": node}), RecordingPods({})),
            FakeLedger(),
            NOW,
            mode=Mode.FULL,
        )
        assert admission.node is not None and admission.node.had_nodeheal_taint is expected
        assert admission.to_json()["node"]["hadNodeHealTaint"] is expected


def test_defect_1_terminate_refuses_the_instance_behind_a_reused_name() -> None:
    old = cordoned(live_node(condition=gpu_problem()))
    new = cordoned(replace(live_node(condition=gpu_problem(), instance_id=NEW_INSTANCE), uid=old.uid))

    class NoEc2:
        def describe(self, instance_id: str) -> Any:
            raise AssertionError("EC2 must not be asked about anything")

        def terminate(self, instance_id: str) -> Any:
            raise AssertionError("nothing may be terminated")

        def reboot(self, instance_id: str) -> None:
            raise AssertionError("nothing may be rebooted")

    nodes = FakeNodes({"gpu-a": new})
    with pytest.raises(NodeReplacedError):
        mutations.terminate(
            admitted_state(old),
            KubeAccess(nodes, RecordingPods({})),
            NoEc2(),
            held_ledger(),
            NOW,
            mode=Mode.FULL,
        )


# -- defect 2: the condition clearing mid-drain --------------------------------------------------


@pytest.mark.parametrize("step", [mutations.drain_round, mutations.force_drain])
def test_defect_2_a_node_that_recovered_mid_drain_is_not_drained_further_or_forced(step: Any) -> None:
    node = cordoned(live_node(condition=gpu_problem("False", "ok")))
    pods = RecordingPods({"gpu-a": [trainer("job-0")]})
    with pytest.raises(ConditionClearedError):
        step(
            admitted_state(node),
            KubeAccess(FakeNodes({"gpu-a": node}), pods),
            held_ledger(),
            NOW,
            mode=Mode.FULL,
        )
    assert pods.evictions == [] and pods.deletions == []


@pytest.mark.parametrize(("policy", "cordon_kept"), [("keep-cordoned", True), ("uncordon", False)])
def test_defect_2_the_record_says_what_happened_to_the_cordon(policy: str, cordon_kept: bool) -> None:
    node = cordoned(live_node(condition=gpu_problem("False", "ok")))
    settings = RemediationSettings(drain=DrainSettings(on_condition_cleared=policy))
    nodes = FakeNodes({"gpu-a": node})
    ledger = held_ledger()
    stopped = {
        "Error": "ConditionClearedError",
        "Cause": '{"errorMessage": "GPUProblem is no longer bad", "errorType": "ConditionClearedError"}',
    }
    extra: dict[str, Any] = {"stopped": stopped}
    if not cordon_kept:
        state = admitted_state(node, settings=settings, extra=extra)
        extra["uncordon"] = mutations.uncordon(
            state, KubeAccess(nodes, RecordingPods({})), ledger, NOW, mode=Mode.FULL
        )
        assert not nodes.nodes["gpu-a"].cordoned_by_nodeheal
    result = record(
        admitted_state(node, settings=settings, extra=extra), ledger, None, NOW, region="us-west-2"
    )
    assert result["outcome"] == Outcome.SKIPPED.value
    assert ("LEFT CORDONED" in result["summary"]) is cordon_kept
    assert ledger.lock_holder(CLUSTER, OLD_INSTANCE) is None


# -- defect 3: a second fault behind a held lock ---------------------------------------------------


def test_defect_3_a_fault_arriving_during_anothers_confirmation_preempts_it() -> None:
    node = live_node(condition=gpu_problem())  # Xid 79 now on GPUProblem
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    # KernelDeadlock is confirming for 10 minutes and holds the lock, touching nothing yet.
    deadlock = LockClaim("gpu-a", "KernelDeadlock", Action.REPLACE, NOW + timedelta(minutes=9))
    assert ledger.acquire_lock(CLUSTER, OLD_INSTANCE, "exec-deadlock", timedelta(hours=2), deadlock).acquired

    admission = admit(workflow_state(node), KubeAccess(nodes, RecordingPods({})), ledger, NOW)
    assert admission.verdict == PROCEED and admission.preempted == "exec-deadlock"
    assert ledger.lock_holder(CLUSTER, OLD_INSTANCE) == "exec-1"
    # The superseded holder stops at its next mutation instead of acting beside the newcomer.
    with pytest.raises(SupersededError):
        ledger.claim_mutation(CLUSTER, OLD_INSTANCE, "exec-deadlock", step="cordon", busy_for=timedelta(0))


def test_defect_3_a_waiting_fault_acts_when_the_holder_ends_without_acting() -> None:
    node = live_node(condition=gpu_problem())
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    holder = LockClaim("gpu-a", "KernelDeadlock", Action.REPLACE, NOW)
    ledger.acquire_lock(CLUSTER, OLD_INSTANCE, "exec-deadlock", timedelta(hours=2), holder)
    ledger.claim_mutation(CLUSTER, OLD_INSTANCE, "exec-deadlock", step="cordon", busy_for=timedelta(0))

    first = admit(workflow_state(node), KubeAccess(nodes, RecordingPods({})), ledger, NOW)
    assert first.verdict == WAIT, "an equally severe holder that mutated is waited for, never dropped"

    ledger.release_lock(CLUSTER, OLD_INSTANCE, "exec-deadlock")  # it ended (say the deadlock cleared)
    later = NOW + timedelta(seconds=30)
    ledger.now = later
    again = admit(
        workflow_state(node, extra={"admission": first.to_json()}),
        KubeAccess(nodes, RecordingPods({})),
        ledger,
        later,
    )
    assert again.verdict == PROCEED and again.decision is not None
    assert again.decision.action is Action.REPLACE and again.lock_held


def test_defect_3_a_waiter_is_handed_to_a_person_not_dropped_after_the_lock_ttl() -> None:
    node = live_node(condition=gpu_problem())
    nodes = FakeNodes({"gpu-a": node})
    settings = RemediationSettings(mode=Mode.FULL)
    ledger = held_ledger("exec-stuck")
    ledger.claim_mutation(CLUSTER, OLD_INSTANCE, "exec-stuck", step="drain", busy_for=timedelta(0))
    first = admit(workflow_state(node, settings=settings), KubeAccess(nodes, RecordingPods({})), ledger, NOW)
    assert first.verdict == WAIT
    later = NOW + timedelta(seconds=settings.lock_ttl_seconds)
    ledger.now = later
    renewal = LockClaim("gpu-a", "GPUProblem", Action.REPLACE, NOW)
    ledger.acquire_lock(CLUSTER, OLD_INSTANCE, "exec-stuck", timedelta(hours=2), renewal)  # it re-admitted
    handed = admit(
        workflow_state(node, settings=settings, extra={"admission": first.to_json()}),
        KubeAccess(nodes, RecordingPods({})),
        ledger,
        later,
    )
    assert handed.verdict == PROCEED and handed.refused
    assert handed.decision is not None and handed.decision.action is Action.ALERT
    assert "a person must look" in handed.decision.reason


def test_defect_3_a_more_severe_fault_waits_for_the_holders_running_step_then_preempts() -> None:
    node = live_node(condition=gpu_problem())  # Xid 79: replace
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    reboot = LockClaim("gpu-a", "GPUProblem", Action.REBOOT, NOW)
    ledger.acquire_lock(CLUSTER, OLD_INSTANCE, "exec-reboot", timedelta(hours=2), reboot)
    ledger.claim_mutation(CLUSTER, OLD_INSTANCE, "exec-reboot", step="drain", busy_for=timedelta(seconds=60))
    busy = admit(workflow_state(node), KubeAccess(nodes, RecordingPods({})), ledger, NOW)
    assert busy.verdict == WAIT, "never mutate beside a step that may still be running"
    later = NOW + timedelta(seconds=61)
    ledger.now = later
    taken = admit(
        workflow_state(node, extra={"admission": busy.to_json()}),
        KubeAccess(nodes, RecordingPods({})),
        ledger,
        later,
    )
    assert taken.verdict == PROCEED and taken.preempted == "exec-reboot"


def test_defect_3_severity_only_rises_when_a_lesser_message_overwrites_the_condition() -> None:
    no_xid = "nvidia-smi failed: Unable to determine the device handle for GPU 0000:53:00.0"
    confirming = live_node(condition=gpu_problem(message=no_xid, at="2026-11-21T10:04:30Z"))
    nodes = FakeNodes({"gpu-a": confirming})
    ledger = FakeLedger()
    first = admit(workflow_state(confirming), KubeAccess(nodes, RecordingPods({})), ledger, NOW)
    assert first.decision is not None and first.decision.action is Action.REPLACE
    xid13 = "NVRM: Xid (PCI:0000:53:00): 13, pid=1, name=python3, Graphics SM Warp Exception"
    overwritten = live_node(condition=gpu_problem(message=xid13, at="2026-11-21T10:04:30Z"))
    nodes.nodes["gpu-a"] = replace(overwritten, uid=confirming.uid, boot_id=confirming.boot_id)
    later = NOW + timedelta(seconds=first.wait_seconds)
    ledger.now = later
    again = admit(
        workflow_state(confirming, extra={"admission": first.to_json()}),
        KubeAccess(nodes, RecordingPods({})),
        ledger,
        later,
    )
    assert again.decision is not None and again.decision.action is Action.REPLACE
    assert "severity only rises" in again.decision.reason


def test_defect_3_a_replaced_node_seen_after_a_wait_is_not_admitted() -> None:
    node = live_node(condition=gpu_problem())
    nodes = FakeNodes({"gpu-a": node})
    ledger = held_ledger("exec-other")
    ledger.claim_mutation(CLUSTER, OLD_INSTANCE, "exec-other", step="drain", busy_for=timedelta(0))
    first = admit(workflow_state(node), KubeAccess(nodes, RecordingPods({})), ledger, NOW)
    assert first.verdict == WAIT
    nodes.nodes["gpu-a"] = replace(live_node(condition=gpu_problem(), instance_id=NEW_INSTANCE), uid=node.uid)
    again = admit(
        workflow_state(node, extra={"admission": first.to_json()}),
        KubeAccess(nodes, RecordingPods({})),
        ledger,
        NOW,
    )
    assert again.verdict == STOP and "replaced while this execution waited" in again.note
    assert ledger.lock_holder(CLUSTER, NEW_INSTANCE) is None


# -- defect 8: pause and mode are read live ------------------------------------------------------


@pytest.mark.parametrize("step", [mutations.drain_round, mutations.force_drain])
def test_defect_8_a_redeploy_in_dry_run_stops_a_drain_in_flight(step: Any) -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    pods = RecordingPods({"gpu-a": [trainer("job-0")]})
    with pytest.raises(RemediationPausedError, match="dry-run"):
        step(
            admitted_state(node),
            KubeAccess(FakeNodes({"gpu-a": node}), pods),
            held_ledger(),
            NOW,
            mode=Mode.DRY_RUN,
        )
    assert pods.evictions == [] and pods.deletions == []


def test_defect_8_pause_stops_a_terminate_in_flight() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    ledger = held_ledger()
    ledger.states[CLUSTER] = ClusterAdmissionState(
        CLUSTER, version=1, paused=True, paused_reason="maintenance"
    )

    class NoEc2:
        def describe(self, instance_id: str) -> Any:
            raise AssertionError("paused: EC2 must not be touched")

        terminate = reboot = describe

    with pytest.raises(RemediationPausedError, match="maintenance"):
        mutations.terminate(
            admitted_state(node),
            KubeAccess(FakeNodes({"gpu-a": node}), RecordingPods({})),
            NoEc2(),
            ledger,
            NOW,
            mode=Mode.FULL,
        )
    stopped = {"Error": "RemediationPausedError", "Cause": "NodeHeal was paused (maintenance)"}
    result = record(admitted_state(node, extra={"stopped": stopped}), ledger, None, NOW, region="us-west-2")
    assert result["outcome"] == Outcome.PAUSED.value and "LEFT CORDONED" in result["summary"]
    assert ledger.lock_holder(CLUSTER, OLD_INSTANCE) is None


def test_defect_8_cordon_only_mode_allows_cordon_but_stops_the_drain() -> None:
    node = live_node(condition=gpu_problem())
    nodes = FakeNodes({"gpu-a": node})
    ledger = held_ledger()
    state = admitted_state(node)
    mutations.cordon(state, KubeAccess(nodes, RecordingPods({})), ledger, NOW, mode=Mode.CORDON_ONLY)
    with pytest.raises(RemediationPausedError, match="cordon-only"):
        mutations.drain_round(state, KubeAccess(nodes, RecordingPods({})), ledger, NOW, mode=Mode.CORDON_ONLY)


# -- defect 11: history and locks follow the instance ---------------------------------------------


def past_record(instance: str, outcome: Outcome, hours_ago: float, execution: str) -> RemediationRecord:
    at = NOW - timedelta(hours=hours_ago)
    return RemediationRecord(
        cluster=CLUSTER,
        node="gpu-a",
        execution=execution,
        started_at=at,
        finished_at=at,
        outcome=outcome,
        action=Action.REBOOT,
        planned_action=Action.REBOOT,
        reason="Xid 48",
        summary="",
        instance_id=instance,
    )


def test_defect_11_a_new_instance_under_a_reused_name_inherits_no_history() -> None:
    ledger = FakeLedger()
    for index in range(3):  # the old instance reached its attempt cap, and was rebooted an hour ago
        ledger.put_record(past_record(OLD_INSTANCE, Outcome.REBOOTED, 1 + index, f"old-{index}"))
    old_holder = LockClaim("gpu-a", "GPUProblem", Action.REBOOT, NOW)
    ledger.acquire_lock(CLUSTER, OLD_INSTANCE, "old-running", timedelta(hours=2), old_holder)

    new = live_node(condition=gpu_problem(message=XID_48), instance_id=NEW_INSTANCE)
    nodes = FakeNodes({"gpu-a": new})
    admission = admit(
        workflow_state(new, condition=gpu_problem(message=XID_48)),
        KubeAccess(nodes, RecordingPods({})),
        ledger,
        NOW,
    )
    assert admission.verdict == PROCEED
    assert admission.decision is not None
    assert admission.decision.action is Action.REBOOT and not admission.decision.escalated
    assert ledger.lock_holder(CLUSTER, NEW_INSTANCE) == "exec-1"
    assert NEW_INSTANCE in ledger.read_admission_state(CLUSTER).in_flight


def test_defect_11_the_same_instance_still_escalates() -> None:
    ledger = FakeLedger()
    ledger.put_record(past_record(OLD_INSTANCE, Outcome.REBOOTED, 1, "old-0"))
    node = live_node(condition=gpu_problem(message=XID_48), instance_id=OLD_INSTANCE)
    admission = admit(
        workflow_state(node, condition=gpu_problem(message=XID_48)),
        KubeAccess(FakeNodes({"gpu-a": node}), RecordingPods({})),
        ledger,
        NOW,
    )
    assert admission.decision is not None and admission.decision.escalated
    assert admission.decision.action is Action.REPLACE


def test_defect_3_a_claimed_mutation_outlasts_every_mutating_task() -> None:
    """A preempting execution waits MUTATION_BUSY after the holder's last claim, which must cover
    the longest a mutating step can still be running (its Lambda timeout)."""
    from nodeheal.workflow.guard import MUTATION_BUSY
    from nodeheal.worst_case import TASK_TIMEOUT_SECONDS

    mutating = ("cordon", "drain", "force-drain", "terminate", "reboot", "uncordon")
    assert max(TASK_TIMEOUT_SECONDS[name] for name in mutating) < MUTATION_BUSY.total_seconds()
