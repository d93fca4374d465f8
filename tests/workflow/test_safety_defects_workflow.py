"""The safety defects, end to end: the synthesized state machine in moto, the real handlers, the
fake API server (see tests/workflow/conftest.py). Each test is named after its defect."""

from __future__ import annotations

from typing import Any

import pytest

from nodeheal.sim.apiserver.objects import make_node, make_pod
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import CLUSTER, Pipeline

#: Draining outlasts each test, so the tests decide what happens mid-drain.
LONG_DRAIN = {"drain": {"timeoutSeconds": 600}}


def pods_named(pipeline: Pipeline, node: str) -> set[str]:
    return {
        p["metadata"]["name"] for p in pipeline.pods_on(node) if not p["metadata"].get("deletionTimestamp")
    }


@pytest.mark.nodeheal_config(LONG_DRAIN)
def test_defect_1_a_new_node_taking_the_name_mid_drain_is_never_drained_or_terminated(
    pipeline: Pipeline,
) -> None:
    old_instance, arn = pipeline.start_blocked_drain()
    # Spot reclaim: the instance goes away, its Node and pods with it, and a new healthy node
    # joins under the same private-IP name with a job of its own (and the same PDB selector).
    for pod in pipeline.pods_on("gpu-a"):
        pipeline.store.remove("pods", pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
    pipeline.store.remove("nodes", "gpu-a")
    new_instance = pipeline.aws.run_instance(cluster=CLUSTER, node_pool="gpu", owned=True)
    pipeline.store.add(make_node("gpu-a", instance_id=new_instance, node_pool="gpu", cluster=CLUSTER))
    for index in range(2):
        pipeline.store.add(
            make_pod(
                f"new-job-{index}", "training", "gpu-a", owner_kind="Job", gpus=4, labels={"node": "gpu-a"}
            )
        )

    execution = pipeline.aws.wait_for_execution(arn, timeout=90)

    assert execution["status"] == "SUCCEEDED"
    assert pods_named(pipeline, "gpu-a") == {"new-job-0", "new-job-1"}, "the new node's pods were touched"
    assert pipeline.aws.instance_state(new_instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.SKIPPED and record.summary.startswith(("node replaced", "node gone"))
    node = pipeline.node("gpu-a")
    assert node is not None and not node["spec"].get("unschedulable"), "the new node was cordoned"
    assert pipeline.lock_holder("gpu-a") is None
    assert old_instance != new_instance


@pytest.mark.nodeheal_config({"drain": {"timeoutSeconds": 2, "onTimeout": "force"}})
def test_defect_2_a_node_that_recovers_mid_drain_is_never_forced_past_its_pdb(pipeline: Pipeline) -> None:
    instance, arn = pipeline.start_blocked_drain()
    protected = pods_named(pipeline, "gpu-a")
    pipeline.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "ok")

    execution = pipeline.aws.wait_for_execution(arn, timeout=90)

    assert execution["status"] == "SUCCEEDED"
    assert "Force-delete remaining pods" not in pipeline.aws.state_names(arn)
    assert pods_named(pipeline, "gpu-a") == protected
    assert pipeline.aws.instance_state(instance) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.SKIPPED and record.summary.startswith("condition cleared")
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True, "keep-cordoned is the default"


@pytest.mark.nodeheal_config({"drain": {"timeoutSeconds": 600, "onConditionCleared": "uncordon"}})
def test_defect_2_with_uncordon_policy_nodeheal_removes_its_own_cordon(pipeline: Pipeline) -> None:
    _, arn = pipeline.start_blocked_drain()
    pipeline.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "ok")

    execution = pipeline.aws.wait_for_execution(arn, timeout=90)

    assert execution["status"] == "SUCCEEDED"
    assert "Uncordon (condition cleared)" in pipeline.aws.state_names(arn)
    node = pipeline.node("gpu-a")
    assert node is not None and not node["spec"].get("unschedulable")
    assert not any(t["key"] == "nodeheal.io/unhealthy" for t in node["spec"].get("taints") or [])
    assert pipeline.only_record("gpu-a").outcome is Outcome.SKIPPED


@pytest.mark.nodeheal_config(LONG_DRAIN)
def test_defect_8_pause_stops_a_drain_in_flight(pipeline: Pipeline) -> None:
    instance, arn = pipeline.start_blocked_drain()
    ledger: Any = pipeline.aws.runtime_for(pipeline.aws.function_logical_id("lambdas.record.handler")).ledger
    from dataclasses import replace

    with pipeline.aws.between_invocations():
        current = ledger.read_admission_state(CLUSTER)
        ledger.write_admission_state(replace(current, paused=True, paused_reason="driver rollout"))

    execution = pipeline.aws.wait_for_execution(arn, timeout=90)

    assert execution["status"] == "SUCCEEDED"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.PAUSED and "driver rollout" in record.summary
    assert pipeline.aws.instance_state(instance) == "running"
    assert pipeline.lock_holder("gpu-a") is None
    assert instance not in ledger.read_admission_state(CLUSTER).in_flight
