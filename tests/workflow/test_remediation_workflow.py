"""End-to-end behaviour of the deployed workflow: one test per row of the issue's scenario list."""

from __future__ import annotations

import pytest

from nodeheal.kube_views import ANNOTATION_EXECUTION, UNHEALTHY_TAINT_KEY
from nodeheal.sim.apiserver.objects import rfc3339
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import CLUSTER, XID_13, XID_48, XID_79, Pipeline, wait_until


def taint_keys(node: dict) -> set[str]:
    return {t["key"] for t in node.get("spec", {}).get("taints") or []}


def workload_pods(pipeline: Pipeline, name: str) -> list[dict]:
    return [p for p in pipeline.pods_on(name) if p["metadata"]["namespace"] == "training"]


def test_xid_79_replaces_the_instance(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    pipeline.add_gpu_node("gpu-b")
    detail = pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79)

    execution = pipeline.run(detail)

    assert execution["status"] == "SUCCEEDED"
    assert execution["name"].startswith(f"{CLUSTER}-gpu-a-GPUProblem-")
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert UNHEALTHY_TAINT_KEY in taint_keys(node)
    assert node["metadata"]["annotations"][ANNOTATION_EXECUTION] == execution["name"]
    assert workload_pods(pipeline, "gpu-a") == []  # evicted
    assert [p["metadata"]["name"] for p in pipeline.pods_on("gpu-a")] == ["nvidia-device-plugin-gpu-a"]
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    assert pipeline.aws.instance_state(pipeline.instances["gpu-b"]) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.REPLACED
    assert record.xid == 79 and record.action.value == "replace"
    assert record.pods_evicted == 2
    assert {"admitted", "cordoned", "drained", "instanceAction", "faultToCordon"} <= set(record.stage_seconds)
    assert pipeline.lock_holder("gpu-a") is None
    states = pipeline.aws.state_names(execution["executionArn"])
    assert states[:3] == ["Load settings", "Admit", "Admitted?"]
    assert "Terminate instance" in states and "Reboot instance" not in states
    messages = pipeline.aws.notifications()
    assert len(messages) == 1
    assert "replaced" in messages[0]["subject"] and "Xid 79" in messages[0]["subject"]
    assert "fallen off the bus" in messages[0]["message"].lower()
    assert messages[0]["attributes"]["severity"] == "info"


def test_xid_13_touches_nothing(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    detail = pipeline.fault("gpu-a", "GPUProblem", "True", "GPUApplicationError", XID_13)

    execution = pipeline.run(detail)

    assert execution["status"] == "SUCCEEDED"
    node = pipeline.node("gpu-a")
    assert node is not None and not node["spec"].get("unschedulable")
    assert UNHEALTHY_TAINT_KEY not in taint_keys(node)
    assert len(workload_pods(pipeline, "gpu-a")) == 2
    assert pipeline.aws.instance_state(instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.RECORDED and record.xid == 13
    assert pipeline.aws.notifications() == []


def test_dcgm_error_alerts_only(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    detail = pipeline.fault(
        "gpu-a", "AcceleratedHardwareReady", "False", "DCGMError", "DCGM could not connect to the host engine"
    )

    execution = pipeline.run(detail)

    assert execution["status"] == "SUCCEEDED"
    node = pipeline.node("gpu-a")
    assert node is not None and not node["spec"].get("unschedulable")
    assert pipeline.aws.instance_state(instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.ALERTED and record.action.value == "alert"
    messages = pipeline.aws.notifications()
    assert len(messages) == 1 and messages[0]["attributes"]["severity"] == "action-required"


def _heal_on_reboot(pipeline: Pipeline, name: str) -> None:
    """The simulated node: an EC2 reboot gives it a new boot ID and a detector that starts clean."""

    def rebooted(instance_ids: list[str]) -> None:
        if pipeline.instances[name] in instance_ids:
            pipeline.store.reboot_node(name)
            pipeline.store.set_node_condition(name, "GPUProblem", "False", "GPUHealthy", "GPUs healthy")

    pipeline.aws.on_instances_rebooted.append(rebooted)


def test_xid_48_reboots_recovers_and_uncordons(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    _heal_on_reboot(pipeline, "gpu-a")
    boot_before = pipeline.node("gpu-a")["status"]["nodeInfo"]["bootID"]  # type: ignore[index]
    detail = pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_48)

    execution = pipeline.run(detail)

    assert execution["status"] == "SUCCEEDED"
    node = pipeline.node("gpu-a")
    assert node is not None
    assert node["status"]["nodeInfo"]["bootID"] != boot_before
    assert not node["spec"].get("unschedulable")
    assert UNHEALTHY_TAINT_KEY not in taint_keys(node)
    assert ANNOTATION_EXECUTION not in node["metadata"].get("annotations", {})
    assert pipeline.aws.instance_state(instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.REBOOTED and record.action.value == "reboot"
    states = pipeline.aws.state_names(execution["executionArn"])
    assert "Reboot instance" in states and "Uncordon" in states and "Terminate instance" not in states


def test_fault_again_after_reboot_escalates_to_replace(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    _heal_on_reboot(pipeline, "gpu-a")
    first = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_48))
    assert first["status"] == "SUCCEEDED"
    pipeline.aws.on_instances_rebooted.clear()
    # Condition timestamps have one-second resolution: a new transition needs a second later than
    # the condition's last one, the recovery's (the run itself usually took longer than that).
    node = pipeline.node("gpu-a")
    assert node is not None
    last = next(c for c in node["status"]["conditions"] if c["type"] == "GPUProblem")["lastTransitionTime"]
    wait_until(lambda: rfc3339() > last, what="a second past the condition's last transition")

    second = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_48))

    assert second["status"] == "SUCCEEDED"
    assert second["name"] != first["name"]
    outcomes = sorted(r.outcome.value for r in pipeline.records("gpu-a"))
    assert outcomes == ["rebooted", "replaced"]
    replaced = next(r for r in pipeline.records("gpu-a") if r.outcome is Outcome.REPLACED)
    assert replaced.escalated and replaced.planned_action.value == "reboot"
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")


def test_reboot_that_does_not_recover_is_replaced(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")  # the node never comes back with a new boot ID
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_48))

    assert execution["status"] == "SUCCEEDED"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.REPLACED and record.escalated
    assert "did not come back" in record.summary
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")


def test_pdb_blocks_drain_then_force(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    pipeline.block_with_pdb("gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.REPLACED
    assert record.pdb_blocked >= 2 and record.pods_forced == 2 and record.pods_evicted == 0
    assert "Force-delete remaining pods" in pipeline.aws.state_names(execution["executionArn"])
    wait_until(lambda: workload_pods(pipeline, "gpu-a") == [])
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")


@pytest.mark.nodeheal_config({"drain": {"onTimeout": "abort"}})
def test_pdb_blocks_drain_then_abort(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    pipeline.block_with_pdb("gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "FAILED"
    assert execution.get("error") == "RemediationFailed"
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True  # stays cordoned
    assert len(workload_pods(pipeline, "gpu-a")) == 2
    assert pipeline.aws.instance_state(instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.DRAIN_ABORTED and record.error == "DrainAbortedError"
    assert pipeline.lock_holder("gpu-a") is None
    messages = pipeline.aws.notifications()
    assert messages and messages[0]["attributes"]["severity"] == "action-required"
    assert "drain-aborted" in messages[0]["subject"]


def test_condition_cleared_before_terminate_terminates_nothing(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    detail = pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79)
    pipeline.store.on(
        "pod_evicted",
        lambda pod: pipeline.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "ok"),
    )

    execution = pipeline.run(detail)

    assert execution["status"] == "SUCCEEDED"
    assert pipeline.aws.instance_state(instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.SKIPPED and "condition cleared" in record.summary
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True  # left for a person


def test_node_deleted_mid_flow(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    detail = pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79)
    deleted: list[bool] = []

    def delete_node(pod: dict) -> None:
        if not deleted:
            deleted.append(True)
            pipeline.store.remove("nodes", "gpu-a")

    pipeline.store.on("pod_evicted", delete_node)

    execution = pipeline.run(detail)

    assert execution["status"] == "SUCCEEDED"
    assert pipeline.aws.instance_state(instance) == "running"  # never terminate what we cannot verify
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.SKIPPED and "deleted" in record.summary
    assert pipeline.lock_holder("gpu-a") is None


def test_instance_already_terminated_is_success(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    pipeline.aws.client("ec2").terminate_instances(InstanceIds=[instance])

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.REPLACED
    assert "already gone" in record.summary


def test_instance_without_ownership_tag_is_refused(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a", owned=False)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "FAILED"
    assert pipeline.aws.instance_state(instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.FAILED and record.error == "OwnershipVerificationError"
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert pipeline.lock_holder("gpu-a") is None


def test_duplicate_events_make_one_remediation(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    detail = pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79)

    first = pipeline.deliver(detail)
    duplicates = [pipeline.deliver(detail) for _ in range(4)]

    assert first["status"] == "started"
    assert {d["status"] for d in duplicates} == {"duplicate"}
    assert {d["execution"] for d in duplicates} == {first["execution"]}
    execution = pipeline.aws.wait_for_execution(first["executionArn"])
    assert execution["status"] == "SUCCEEDED"
    assert len(pipeline.aws.executions()) == 1
    assert pipeline.only_record("gpu-a").outcome is Outcome.REPLACED
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")


@pytest.mark.nodeheal_config({"budgets": {"maxPerHour": 1, "breakerTripRefusals": 5}})
def test_budget_exhausted_alerts_only(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    second_instance = pipeline.add_gpu_node("gpu-b")
    pipeline.add_gpu_node("gpu-c")
    pipeline.add_gpu_node("gpu-d")
    pipeline.add_gpu_node("gpu-e")
    first = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    assert first["status"] == "SUCCEEDED"
    pipeline.aws.notifications()

    second = pipeline.run(pipeline.fault("gpu-b", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert second["status"] == "SUCCEEDED"
    assert pipeline.aws.instance_state(second_instance) == "running"
    node = pipeline.node("gpu-b")
    assert node is not None and not node["spec"].get("unschedulable")
    record = pipeline.only_record("gpu-b")
    assert record.outcome is Outcome.REFUSED and record.action.value == "alert"
    assert record.planned_action.value == "replace"
    assert "maxPerHour" in record.reason
    messages = pipeline.aws.notifications()
    assert len(messages) == 1 and messages[0]["attributes"]["severity"] == "action-required"


@pytest.mark.nodeheal_config({"mode": "dry-run"})
def test_dry_run_mutates_nothing(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    before = pipeline.node("gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    after = pipeline.node("gpu-a")
    assert after is not None and before is not None
    assert after["spec"] == before["spec"]
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert len(workload_pods(pipeline, "gpu-a")) == 2
    assert pipeline.aws.instance_state(instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.DRY_RUN and record.planned_action.value == "replace"
    assert "would have done replace" in record.summary
    assert pipeline.lock_holder("gpu-a") is None


@pytest.mark.nodeheal_config({"mode": "cordon-only"})
def test_cordon_only_cordons_and_stops(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert len(workload_pods(pipeline, "gpu-a")) == 2  # not drained
    assert pipeline.aws.instance_state(instance) == "running"
    assert pipeline.only_record("gpu-a").outcome is Outcome.CORDONED


def test_forged_event_for_a_healthy_node_is_refused_by_the_live_check(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    pipeline.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "ok")
    forged = pipeline.event_for("gpu-a", "GPUProblem")
    forged["condition"].update({"status": "True", "reason": "GPUHardwareError", "message": XID_79})

    execution = pipeline.run(forged)

    assert execution["status"] == "SUCCEEDED"
    assert pipeline.aws.instance_state(instance) == "running"
    node = pipeline.node("gpu-a")
    assert node is not None and not node["spec"].get("unschedulable")
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.SKIPPED and "no longer bad" in record.summary
