"""The story a remediation leaves on the Node and its pods, through the deployed state machine.

Each execution runs the synthesized workflow in moto with every function calling the fake API
server as itself (its own RBAC role, D8 in docs/architecture.md). The Events are read back as
``kubectl describe node`` and ``kubectl get events`` read them; each one names the execution. An
Events endpoint that fails or hangs changes nothing about the remediation.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from nodeheal.grants import Permission
from nodeheal.kube_event_body import REPORTING_CONTROLLER
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import XID_48, XID_79, Pipeline
from tests.workflow.test_remediation_workflow import _heal_on_reboot, workload_pods

EVENTS_PATH = r"^/apis/events\.k8s\.io/v1/namespaces/[^/]+/events$"
EVENTS_CREATE = Permission("create", "events.k8s.io", "events")


def events(pipeline: Pipeline) -> list[dict[str, Any]]:
    """Every Event stored (core/v1 view), in the order they happened."""
    items, _ = pipeline.store.list_objects("events")
    return sorted(items, key=lambda e: (e["eventTime"], int(e["metadata"]["resourceVersion"])))


def about(pipeline: Pipeline, kind: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events(pipeline)
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
    ]


def reasons(told: list[dict[str, Any]]) -> list[str]:
    return [e["reason"] for e in told]


def assert_told_by(told: list[dict[str, Any]], execution: str) -> None:
    for event in told:
        assert event["reportingComponent"] == REPORTING_CONTROLLER, event
        assert event["message"].endswith(f"(execution {execution})"), event["message"]
        assert event["metadata"]["annotations"]["nodeheal.io/execution"] == execution
        assert len(event["eventTime"].rsplit(".", 1)[1]) == len("000000Z")


def test_a_replacement_tells_each_step_on_the_node_and_each_eviction_on_its_pod(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    pipeline.add_gpu_node("gpu-b")
    node_uid = (pipeline.node("gpu-a") or {})["metadata"]["uid"]

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    on_node = about(pipeline, "Node", "gpu-a")
    assert [(e["reason"], e["type"], e["reportingInstance"]) for e in on_node] == [
        ("RemediationDecided", "Warning", "nodeheal-admit"),
        ("Cordoned", "Normal", "nodeheal-cordon"),
        ("Draining", "Normal", "nodeheal-drain"),
        ("Drained", "Normal", "nodeheal-drain"),
        ("Terminating", "Normal", "nodeheal-terminate"),
    ]
    assert {e["metadata"]["namespace"] for e in on_node} == {"default"}
    assert {e["involvedObject"]["uid"] for e in on_node} == {node_uid}
    assert on_node[0]["message"].startswith("Decided replace for GPUProblem=True (Xid 79): ")
    assert "Eviction round 1: drain of gpu-a: 2 pods evicted" in on_node[2]["message"]
    assert f"Terminating EC2 instance {pipeline.instances['gpu-a']}" in on_node[4]["message"]
    for pod in ("trainer-gpu-a-0", "trainer-gpu-a-1"):
        (evicted,) = about(pipeline, "Pod", pod)
        assert (evicted["reason"], evicted["metadata"]["namespace"]) == ("Evicted", "training")
        assert evicted["related"]["name"] == "gpu-a"
        assert "Evicted by NodeHeal from node gpu-a, which is being replaced" in evicted["message"]
    assert_told_by(events(pipeline), execution["name"])
    # Nothing about the healthy node, nor about the DaemonSet pod the drain skips.
    assert (
        about(pipeline, "Node", "gpu-b") == [] and about(pipeline, "Pod", "nvidia-device-plugin-gpu-a") == []
    )
    # Each function told its part under its own role.
    used = pipeline.authorizer.used()
    for function in ("admit", "cordon", "drain", "terminate"):
        assert (f"nodeheal-{function}", EVENTS_CREATE) in used
    assert pipeline.authorizer.denied == []


def test_kubectl_describe_node_shows_the_story(pipeline: Pipeline) -> None:
    """The query ``kubectl describe node`` sends (k8s.io/kubectl pkg/describe/describe.go,
    NodeDescriber): core/v1 Events of every namespace about the Node by name, kind and uid."""
    pipeline.add_gpu_node("gpu-a")
    uid = (pipeline.node("gpu-a") or {})["metadata"]["uid"]
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    core = client.CoreV1Api(pipeline.server.api_client(token=pipeline.authorizer.admin_token()))

    described = core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.name=gpu-a,involvedObject.namespace=,involvedObject.kind=Node,involvedObject.uid={uid}"
    )

    assert sorted(e.reason for e in described.items) == sorted(reasons(about(pipeline, "Node", "gpu-a")))
    assert all(execution["name"] in e.message for e in described.items)


def test_a_reboot_tells_the_reboot_the_recovery_and_the_uncordon(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    _heal_on_reboot(pipeline, "gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_48))

    assert execution["status"] == "SUCCEEDED"
    on_node = about(pipeline, "Node", "gpu-a")
    assert reasons(on_node) == [
        "RemediationDecided",
        "Cordoned",
        "Draining",
        "Drained",
        "Rebooting",
        "Recovered",
        "Uncordoned",
    ]
    assert "drain, then reboot the instance" in on_node[1]["message"]
    assert "the node recovered after the reboot" in on_node[-1]["message"]
    assert [e["reportingInstance"] for e in on_node[-3:]] == [
        "nodeheal-reboot",
        "nodeheal-check-recovery",
        "nodeheal-uncordon",
    ]
    assert_told_by(events(pipeline), execution["name"])


def test_a_forced_drain_tells_the_timeout_and_each_pod_deleted_past_its_budget(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    pipeline.block_with_pdb("gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    on_node = about(pipeline, "Node", "gpu-a")
    assert reasons(on_node) == [
        "RemediationDecided",
        "Cordoned",
        "Draining",
        "DrainTimedOut",
        "DrainForced",
        "Terminating",
    ]
    assert (
        "0 pods evicted" in on_node[2]["message"]
        and "2 blocked by a PodDisruptionBudget" in on_node[2]["message"]
    )
    assert [e["type"] for e in on_node[3:5]] == ["Warning", "Warning"]
    for pod in ("trainer-gpu-a-0", "trainer-gpu-a-1"):
        (deleted,) = about(pipeline, "Pod", pod)
        assert (deleted["reason"], deleted["type"], deleted["reportingInstance"]) == (
            "ForceDeleted",
            "Warning",
            "nodeheal-force-drain",
        )
        assert "past its PodDisruptionBudget" in deleted["message"]
    assert_told_by(events(pipeline), execution["name"])


@pytest.mark.nodeheal_config({"drain": {"onTimeout": "abort"}})
def test_an_aborted_drain_is_told_before_the_failure_is_recorded(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    pipeline.block_with_pdb("gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "FAILED"
    on_node = about(pipeline, "Node", "gpu-a")
    assert reasons(on_node) == ["RemediationDecided", "Cordoned", "Draining", "DrainAborted"]
    assert "stays cordoned for a person" in on_node[-1]["message"]
    assert about(pipeline, "Pod", "trainer-gpu-a-0") == []


def test_a_stopped_step_tells_why(pipeline: Pipeline) -> None:
    """The condition clears while the drain runs: the next step stops, and says so on the node."""
    pipeline.add_gpu_node("gpu-a")
    pipeline.store.on(
        "pod_evicted",
        lambda pod: pipeline.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "ok"),
    )

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    skipped = about(pipeline, "Node", "gpu-a")[-1]
    assert (skipped["reason"], skipped["action"]) == ("RemediationSkipped", "Stop")
    assert skipped["message"].startswith(
        "Stopped (ConditionCleared): GPUProblem is no longer bad on node gpu-a"
    )
    assert pipeline.only_record("gpu-a").outcome is Outcome.SKIPPED


def test_an_event_for_a_healthy_node_is_told_as_skipped_by_admit(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    detail = pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79)
    pipeline.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "ok")

    execution = pipeline.run(detail)

    (skipped,) = about(pipeline, "Node", "gpu-a")
    assert (skipped["reason"], skipped["reportingInstance"]) == ("RemediationSkipped", "nodeheal-admit")
    assert "condition GPUProblem is no longer bad on the live node (False/GPUHealthy)" in skipped["message"]
    assert_told_by([skipped], execution["name"])


def test_a_failing_events_endpoint_changes_nothing_about_the_remediation(
    pipeline: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    pipeline.server.faults.fail_for(600, status=503, method="POST", path=EVENTS_PATH)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    assert pipeline.only_record("gpu-a").outcome is Outcome.REPLACED
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    assert workload_pods(pipeline, "gpu-a") == []
    assert events(pipeline) == []
    # One refused write per function, the rest of each invocation's Events not sent, all counted.
    output = capsys.readouterr().out
    assert '"KubernetesEventsFailed":[1.0]' in output and '"KubernetesEventsSkipped"' in output


def test_a_hanging_events_endpoint_costs_one_short_timeout_and_nothing_else(pipeline: Pipeline) -> None:
    """The admit step's Event gets no answer: the write gives up at its read timeout, admit
    finishes, and the later steps tell theirs."""
    pipeline.add_gpu_node("gpu-a")
    pipeline.server.faults.timeout_next(1, hold_seconds=60.0, method="POST", path=EVENTS_PATH)
    started = time.monotonic()

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    assert time.monotonic() - started < 30
    assert reasons(about(pipeline, "Node", "gpu-a")) == ["Cordoned", "Draining", "Drained", "Terminating"]
    assert pipeline.only_record("gpu-a").outcome is Outcome.REPLACED
