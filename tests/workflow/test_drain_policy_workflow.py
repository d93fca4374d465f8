"""Issue 12 section 2: the drain policy through the deployed workflow (the synthesized state
machine, the real handlers, the fake API server): data-loss classes, eviction modes, the
dead-kubelet bound and adaptive polling."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from nodeheal.sim.apiserver.objects import make_pod
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import XID_79, Pipeline, wait_until

EVICT_STATE = "Evict pods"
FORCE_STATE = "Force-delete remaining pods"


def drain_results(pipeline: Pipeline, arn: str) -> list[dict[str, Any]]:
    """Each eviction round's result, in order, as the execution history shows it."""
    return [
        json.loads(event["stateExitedEventDetails"]["output"])["drain"]
        for event in pipeline.aws.history(arn)
        if event.get("stateExitedEventDetails", {}).get("name") == EVICT_STATE
    ]


def add_pod(
    pipeline: Pipeline,
    name: str,
    namespace: str = "training",
    *,
    node: str = "gpu-a",
    owner_kind: str | None = "ReplicaSet",
    empty_dir: bool = False,
    labels: dict[str, str] | None = None,
    grace_seconds: int = 30,
) -> None:
    pod = make_pod(name, namespace, node, owner_kind=owner_kind, labels=labels, grace_seconds=grace_seconds)
    if empty_dir:
        pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    pipeline.store.add(pod)


def pod_names(pipeline: Pipeline, node: str = "gpu-a") -> set[str]:
    return {p["metadata"]["name"] for p in pipeline.pods_on(node)}


def finish(pipeline: Pipeline, name: str, namespace: str) -> None:
    """The pod's work ends on its own, as the kubelet reports a Job pod that completed."""

    def succeeded(pod: dict[str, Any]) -> None:
        pod["status"]["phase"] = "Succeeded"

    pipeline.store.mutate("pods", name, succeeded, namespace)


def start(pipeline: Pipeline) -> str:
    started = pipeline.deliver(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    assert started["status"] == "started", started
    return str(started["executionArn"])


# -- data-loss classes -------------------------------------------------------------------------


@pytest.mark.nodeheal_config({"drain": {"unmanagedPods": "refuse"}})
def test_a_refused_class_aborts_the_drain_before_anything_is_evicted(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    add_pod(pipeline, "debug-shell", owner_kind=None)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "FAILED"
    states = pipeline.aws.state_names(execution["executionArn"])
    assert "Drain aborted" in states and FORCE_STATE not in states and "Terminate instance" not in states
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True  # stays cordoned for a person
    assert {"trainer-gpu-a-0", "trainer-gpu-a-1", "debug-shell"} <= pod_names(pipeline)  # nothing evicted
    assert pipeline.aws.instance_state(instance) == "running"
    [result] = drain_results(pipeline, execution["executionArn"])
    assert result["refused"] is True and result["done"] is False
    assert result["classes"]["unmanaged"] == {"count": 1, "pods": ["training/debug-shell"]}
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.DRAIN_ABORTED and record.error == "DrainAbortedError"
    assert "training/debug-shell (drain.unmanagedPods is refuse)" in record.summary
    assert pipeline.lock_holder("gpu-a") is None


@pytest.mark.nodeheal_config(
    {"drain": {"emptyDir": "refuse", "doNotDisruptWaitSeconds": 2, "timeoutSeconds": 60}}
)
def test_a_refused_pod_under_a_hold_stops_the_drain_before_the_other_pods_are_evicted(
    pipeline: Pipeline,
) -> None:
    # Issue 24 point 3: the do-not-disrupt hold must not evict the node's other pods first.
    instance = pipeline.add_gpu_node("gpu-a")
    pod = make_pod(
        "ckpt-0", "training", "gpu-a", owner_kind="Job", annotations={"karpenter.sh/do-not-disrupt": "true"}
    )
    pod["spec"]["volumes"] = [{"name": "checkpoint", "emptyDir": {}}]
    pipeline.store.add(pod)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "FAILED"
    assert "Drain aborted" in pipeline.aws.state_names(execution["executionArn"])
    assert {"trainer-gpu-a-0", "trainer-gpu-a-1", "ckpt-0"} <= pod_names(pipeline)  # nothing evicted
    assert pipeline.aws.instance_state(instance) == "running"
    [result] = drain_results(pipeline, execution["executionArn"])  # refused in the first round
    assert result["refused"] is True and "evicted" not in result
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.DRAIN_ABORTED and record.pods_evicted == 0
    assert "training/ckpt-0 (drain.emptyDir is refuse)" in record.summary


def test_by_default_empty_dir_and_unmanaged_pods_are_evicted_and_recorded(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    add_pod(pipeline, "notebook", owner_kind=None)
    add_pod(pipeline, "cache-0", empty_dir=True)
    add_pod(pipeline, "coredns-x", "kube-system")  # never drained: kube-system is the default

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    assert pod_names(pipeline) == {"nvidia-device-plugin-gpu-a", "coredns-x"}
    first = drain_results(pipeline, execution["executionArn"])[0]
    assert first["classes"]["unmanaged"] == {"count": 1, "pods": ["training/notebook"]}
    assert first["classes"]["emptyDir"] == {"count": 1, "pods": ["training/cache-0"]}
    assert first["classes"]["neverDrainedNamespace"] == {"count": 1, "pods": ["kube-system/coredns-x"]}
    assert first["classes"]["daemonSet"] == {"count": 1}
    record = pipeline.only_record("gpu-a")
    assert record.pods_evicted == 4
    # The ledger keeps which pods fell in each class over the whole drain, after they are gone.
    assert record.drain_classes["emptyDir"] == {"count": 1, "pods": ["training/cache-0"]}
    assert record.drain_classes["unmanaged"] == {"count": 1, "pods": ["training/notebook"]}


@pytest.mark.nodeheal_config({"drain": {"emptyDir": "wait", "timeoutSeconds": 60}})
def test_a_waited_for_class_is_left_to_finish_on_its_own(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    add_pod(pipeline, "etl-0", owner_kind="Job", empty_dir=True)
    arn = start(pipeline)
    wait_until(
        lambda: any(
            r.get("waitingToFinish") == 1 and r["remaining"] == 1 for r in drain_results(pipeline, arn)
        ),
        timeout=60,
        what="the drain waiting for the emptyDir pod alone",
    )
    assert "etl-0" in pod_names(pipeline) and instance  # not evicted

    finish(pipeline, "etl-0", "training")
    execution = pipeline.aws.wait_for_execution(arn, timeout=90)

    assert execution["status"] == "SUCCEEDED"
    assert FORCE_STATE not in pipeline.aws.state_names(arn)
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    assert drain_results(pipeline, arn)[-1]["done"] is True


# -- eviction modes ----------------------------------------------------------------------------


@pytest.mark.nodeheal_config(
    {
        "drain": {
            "timeoutSeconds": 60,
            "evictionModes": [{"mode": "allow-completion", "namespaces": ["batch-*"]}],
        }
    }
)
def test_an_allow_completion_namespace_is_waited_for_not_evicted(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    add_pod(pipeline, "nightly-0", "batch-nightly", owner_kind="Job")
    arn = start(pipeline)
    wait_until(
        lambda: any(
            r["classes"].get("allowCompletion") and r["remaining"] == 1 for r in drain_results(pipeline, arn)
        )
        and not {"trainer-gpu-a-0", "trainer-gpu-a-1"} & pod_names(pipeline),
        timeout=60,
        what="the trainers evicted and the batch pod left to finish",
    )
    assert "nightly-0" in pod_names(pipeline)
    assert pipeline.aws.instance_state(instance) == "running"

    finish(pipeline, "nightly-0", "batch-nightly")
    execution = pipeline.aws.wait_for_execution(arn, timeout=90)

    assert execution["status"] == "SUCCEEDED"
    assert FORCE_STATE not in pipeline.aws.state_names(arn)
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    assert pipeline.only_record("gpu-a").pods_forced == 0


@pytest.mark.nodeheal_config(
    {"drain": {"timeoutSeconds": 4, "evictionModes": [{"mode": "allow-completion", "namespaces": ["batch"]}]}}
)
def test_an_allow_completion_wait_is_bounded_by_the_drain_timeout(pipeline: Pipeline) -> None:
    # D5: a pod that never finishes does not hold the node beyond drain.timeoutSeconds.
    pipeline.add_gpu_node("gpu-a", workload_pods=0)
    add_pod(pipeline, "forever-0", "batch", owner_kind="Job")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    assert FORCE_STATE in pipeline.aws.state_names(execution["executionArn"])
    assert pipeline.only_record("gpu-a").pods_forced == 1


@pytest.mark.nodeheal_config(
    {
        "drain": {
            "timeoutSeconds": 60,
            "deleteAfterSeconds": 2,
            "evictionModes": [{"mode": "delete-after-timeout", "podLabels": {"app": "trainer"}}],
        }
    }
)
def test_delete_after_timeout_deletes_past_the_pdb_without_waiting_for_the_drain_timeout(
    pipeline: Pipeline,
) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    pipeline.block_with_pdb("gpu-a")  # every eviction of the trainers is refused
    began = time.monotonic()

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    assert time.monotonic() - began < 45  # well inside the 60 s drain timeout
    assert FORCE_STATE not in pipeline.aws.state_names(execution["executionArn"])
    results = drain_results(pipeline, execution["executionArn"])
    assert results[0]["pdbBlocked"] == 2 and results[0]["classes"]["deleteAfterTimeout"]["count"] == 2
    assert results[-1]["deleted"] == 2 and results[-1]["done"] is True
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.REPLACED and record.pods_forced == 0


# -- the dead kubelet --------------------------------------------------------------------------


@pytest.mark.nodeheal_config({"drain": {"timeoutSeconds": 120, "skipWaitForDeleteTimeoutSeconds": 1}})
def test_pods_stuck_terminating_on_a_dead_kubelet_are_not_waited_for_the_whole_timeout(
    pipeline: Pipeline,
) -> None:
    instance = pipeline.add_gpu_node("gpu-a", workload_pods=0)
    for index in range(2):
        add_pod(pipeline, f"trainer-{index}", owner_kind="Job", grace_seconds=1)
    # The GPU took the kernel down: the kubelet is dead and the node controller marks it Unknown.
    pipeline.store.set_kubelet_alive("gpu-a", False)
    pipeline.store.set_node_condition(
        "gpu-a", "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
    )
    began = time.monotonic()

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    assert time.monotonic() - began < 60  # half the drain timeout, which it never reached
    states = pipeline.aws.state_names(execution["executionArn"])
    assert FORCE_STATE not in states and "Terminate instance" in states
    last = drain_results(pipeline, execution["executionArn"])[-1]
    assert last["done"] is True and last["timedOut"] is False
    assert last["classes"]["stuckTerminating"]["count"] == 2 and last["stuckTerminating"] == 2
    # Nothing forced them: they are still Terminating, owed the dead kubelet's final delete.
    assert pipeline.store.stuck_terminating("gpu-a") == ["training/trainer-0", "training/trainer-1"]
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    assert pipeline.only_record("gpu-a").pods_forced == 0


# -- adaptive polling --------------------------------------------------------------------------


@pytest.mark.nodeheal_config({"drain": {"pollSeconds": 10, "timeoutSeconds": 120}})
def test_the_waits_between_rounds_start_at_one_second(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    results = drain_results(pipeline, execution["executionArn"])
    assert [r["waitSeconds"] for r in results] == [min(10, 2**i) for i in range(len(results))]
    waits = [
        event
        for event in pipeline.aws.history(execution["executionArn"])
        if event.get("stateEnteredEventDetails", {}).get("name") == "Wait between eviction rounds"
    ]
    entered = [json.loads(e["stateEnteredEventDetails"]["input"])["drain"]["waitSeconds"] for e in waits]
    assert entered[:1] == [1]  # the pods stop at once: the first wait is 1 s, not the 10 s poll
