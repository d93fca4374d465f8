from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from nodeheal.actions import Mode
from nodeheal.errors import LockNotHeldError, RemediationPausedError, SupersededError
from nodeheal.workflow import mutations
from nodeheal.workflow.recording import record, record_failure, stage_seconds, stage_times
from nodeheal.workflow.records import Outcome
from tests.unit.workflow.fakes import (
    CLUSTER,
    INSTANCE,
    NOW,
    FakeLedger,
    FakeNodes,
    gpu_problem,
    kube,
    live_node,
    workflow_state,
)

ADMITTED = {
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
        "uid": "",
        "instanceId": "i-0abc1234def567890",
        "providerId": "",
        "pool": "gpu",
        "instanceType": "p5.48xlarge",
        "bootId": "boot-1",
    },
    "lockHeld": True,
    "at": "2026-11-21T10:00:03.000Z",
}


def rebooted_state(node: object, rebooted_at: datetime, extra: dict | None = None) -> object:
    instance = {
        "performed": True,
        "bootIdBefore": "boot-before",
        "rebootedAt": rebooted_at.isoformat(),
        "at": rebooted_at.isoformat(),
    }
    return workflow_state(node, extra={"admission": admitted_as(node), "instance": instance, **(extra or {})})  # type: ignore[arg-type]


def test_recovery_needs_a_new_boot_id_ready_and_a_healthy_condition() -> None:
    rebooted_at = NOW
    healthy = replace(live_node(condition=gpu_problem("False", "ok")), boot_id="boot-after")
    assert (
        mutations.check_recovery(
            rebooted_state(healthy, rebooted_at),
            kube(FakeNodes({"gpu-a": healthy})),
            NOW + timedelta(seconds=30),
        )["status"]
        == "recovered"
    )
    same_boot = replace(healthy, boot_id="boot-before")
    result = mutations.check_recovery(
        rebooted_state(same_boot, rebooted_at),
        kube(FakeNodes({"gpu-a": same_boot})),
        NOW + timedelta(seconds=30),
    )
    assert result["status"] == "pending"


def test_a_condition_left_over_from_before_the_reboot_is_waited_out_not_failed() -> None:
    stale = replace(live_node(condition=gpu_problem(at="2026-11-21T09:59:00Z")), boot_id="boot-after")
    nodes = FakeNodes({"gpu-a": stale})
    assert (
        mutations.check_recovery(rebooted_state(stale, NOW), kube(nodes), NOW + timedelta(seconds=30))[
            "status"
        ]
        == "pending"
    )
    timed_out = mutations.check_recovery(
        rebooted_state(stale, NOW), kube(nodes), NOW + timedelta(seconds=900)
    )
    assert timed_out["status"] == "failed" and "still reports GPUProblem=True" in timed_out["detail"]


def test_a_new_fault_after_the_reboot_fails_recovery_at_once() -> None:
    refault = replace(live_node(condition=gpu_problem(at="2026-11-21T10:06:00Z")), boot_id="boot-after")
    result = mutations.check_recovery(
        rebooted_state(refault, NOW), kube(FakeNodes({"gpu-a": refault})), NOW + timedelta(seconds=90)
    )
    assert result["status"] == "failed" and "went bad again" in result["detail"]


def admitted_as(node: object) -> dict:
    return {**ADMITTED, "node": {**ADMITTED["node"], "uid": node.uid}}  # type: ignore[attr-defined]


def test_destructive_steps_refuse_without_the_lock() -> None:
    node = live_node(condition=gpu_problem())
    state = workflow_state(node, extra={"admission": admitted_as(node)})
    ledger = FakeLedger()
    with pytest.raises(LockNotHeldError):
        mutations.cordon(state, kube(FakeNodes({"gpu-a": node})), ledger, NOW, mode=Mode.FULL)  # type: ignore[arg-type]
    ledger.acquire_lock(CLUSTER, INSTANCE, "exec-other", timedelta(hours=1))
    with pytest.raises(SupersededError):
        mutations.cordon(state, kube(FakeNodes({"gpu-a": node})), ledger, NOW, mode=Mode.FULL)  # type: ignore[arg-type]


def test_steps_refuse_to_act_beyond_the_live_mode() -> None:
    node = live_node(condition=gpu_problem())
    state = workflow_state(node, extra={"admission": admitted_as(node)})
    with pytest.raises(RemediationPausedError, match="dry-run"):
        mutations.cordon(state, kube(FakeNodes({"gpu-a": node})), FakeLedger(), NOW, mode=Mode.DRY_RUN)  # type: ignore[arg-type]


def test_stage_seconds_measure_from_the_fault_on_the_node() -> None:
    node = live_node(condition=gpu_problem())
    state = workflow_state(
        node,
        extra={
            "admission": ADMITTED,
            "cordon": {"performed": True, "at": "2026-11-21T10:00:03.500Z"},
            "drain": {"done": True, "at": "2026-11-21T10:00:20.000Z", "evicted": 3},
            "instance": {"performed": True, "at": "2026-11-21T10:00:21.000Z"},
        },
    )
    times = stage_times(state, datetime(2026, 11, 21, 10, 0, 22, tzinfo=UTC))
    seconds = stage_seconds(times)
    assert seconds["published"] == pytest.approx(1.0)  # fault 10:00:00 -> observed 10:00:01
    assert seconds["cordoned"] == pytest.approx(0.5)
    assert seconds["drained"] == pytest.approx(16.5)
    assert seconds["faultToCordon"] == pytest.approx(3.5)
    assert seconds["faultToInstanceAction"] == pytest.approx(21.0)


def test_record_failure_keeps_the_error_and_releases_the_lock() -> None:
    node = live_node(condition=gpu_problem())
    ledger = FakeLedger()
    ledger.acquire_lock(CLUSTER, INSTANCE, "exec-1", timedelta(hours=1))
    state = workflow_state(
        node,
        extra={
            "admission": ADMITTED,
            "cordon": {"performed": True, "at": "2026-11-21T10:00:03.500Z"},
            "failure": {
                "Error": "KubernetesApiUnavailableError",
                "Cause": '{"errorMessage": "API server answered 503", "errorType": "KubernetesApiUnavailableError"}',
            },
        },
    )
    result = record_failure(state, ledger, None, NOW, region="us-west-2")  # type: ignore[arg-type]
    assert result["outcome"] == "failed"
    assert ledger.records[0].error_cause == "API server answered 503"
    assert "node left cordoned" in ledger.records[0].summary
    assert ledger.lock_holder(CLUSTER, INSTANCE) is None


def test_record_is_idempotent_under_a_retried_step() -> None:
    node = live_node(condition=gpu_problem())
    ledger = FakeLedger()
    state = workflow_state(
        node, extra={"admission": {**ADMITTED, "decision": {**ADMITTED["decision"], "action": "none"}}}
    )
    first = record(state, ledger, None, NOW, region="us-west-2")  # type: ignore[arg-type]
    second = record(state, ledger, None, NOW, region="us-west-2")  # type: ignore[arg-type]
    assert first["outcome"] == second["outcome"] == Outcome.RECORDED.value
    assert {r.sort_key for r in ledger.records} == {ledger.records[0].sort_key}
