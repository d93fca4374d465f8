"""replace.method delete-nodeclaim through the deployed workflow: the terminate function, under its
own RBAC role, deletes the Karpenter NodeClaim bound to the admitted instance instead of calling
EC2 TerminateInstances, and NodeHeal records the node replaced once the delete is accepted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeheal.sim.apiserver.objects import KARPENTER_TERMINATION_FINALIZER, make_nodeclaim
from nodeheal.sim.apiserver.status import ApiError
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import XID_79, Pipeline

BY_NODECLAIM = {"replace": {"method": "delete-nodeclaim"}}


def add_karpenter_node(pipeline: Pipeline, name: str, *, claim_provider_id: str | None = None) -> str:
    """A GPU node and the NodeClaim Karpenter launched it for; the claim names the node's own
    instance unless ``claim_provider_id`` says otherwise. Returns the claim's name."""
    pipeline.add_gpu_node(name)
    node = pipeline.node(name)
    assert node is not None
    claim = f"{name}-nc"
    provider_id = node["spec"]["providerID"] if claim_provider_id is None else claim_provider_id
    pipeline.store.add(make_nodeclaim(claim, provider_id=provider_id, node_name=name))
    return claim


def nodeclaim(pipeline: Pipeline, name: str) -> dict[str, Any] | None:
    try:
        return pipeline.store.get("nodeclaims", name)
    except ApiError as missing:
        assert missing.code == 404
        return None


def karpenter_finishes_termination(pipeline: Pipeline, claim: str, node: str) -> None:
    """What Karpenter's termination controller does with a deleted NodeClaim once its own drain is
    done: terminate the instance, delete the Node, then release the claim's finalizer."""
    instance = pipeline.instances[node]
    pipeline.aws.client("ec2").terminate_instances(InstanceIds=[instance])
    pipeline.store.delete("nodes", node)

    def release(obj: dict[str, Any]) -> None:
        obj["metadata"]["finalizers"] = [
            f for f in obj["metadata"].get("finalizers", []) if f != KARPENTER_TERMINATION_FINALIZER
        ]

    pipeline.store.mutate("nodeclaims", claim, release)


@pytest.mark.nodeheal_config(BY_NODECLAIM)
def test_xid_79_deletes_the_nodeclaim_and_karpenter_terminates_the_instance(pipeline: Pipeline) -> None:
    claim = add_karpenter_node(pipeline, "gpu-a")
    other_claim = add_karpenter_node(pipeline, "gpu-b")
    terminate_calls: list[list[str]] = []
    pipeline.aws.on_instances_terminated.append(terminate_calls.append)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    deleted = nodeclaim(pipeline, claim)
    assert deleted is not None, "Karpenter's finalizer keeps the claim until it has terminated the instance"
    assert deleted["metadata"]["deletionTimestamp"]
    assert deleted["metadata"]["finalizers"] == [KARPENTER_TERMINATION_FINALIZER]
    untouched = nodeclaim(pipeline, other_claim)
    assert untouched is not None and "deletionTimestamp" not in untouched["metadata"]
    # No EC2 TerminateInstances from NodeHeal: the instance is Karpenter's to terminate.
    assert terminate_calls == []
    assert pipeline.aws.instance_state(pipeline.instances["gpu-a"]) == "running"
    assert [p["metadata"]["name"] for p in pipeline.pods_on("gpu-a")] == ["nvidia-device-plugin-gpu-a"]
    instance_step = json.loads(execution["output"])["instance"]
    assert instance_step["method"] == "delete-nodeclaim"
    assert instance_step["nodeClaim"] == claim
    assert instance_step["nodeClaimUid"] == deleted["metadata"]["uid"]
    assert instance_step["nodeClaimFinalizing"] is True
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.REPLACED
    assert f"NodeClaim {claim} deleted" in record.summary
    # Lock and in-flight slot go with the accepted delete, not with Karpenter's termination.
    assert pipeline.lock_holder("gpu-a") is None

    karpenter_finishes_termination(pipeline, claim, "gpu-a")
    assert nodeclaim(pipeline, claim) is None
    assert pipeline.node("gpu-a") is None
    assert pipeline.aws.instance_state(pipeline.instances["gpu-a"]) in ("shutting-down", "terminated")


@pytest.mark.nodeheal_config(BY_NODECLAIM)
def test_a_nodeclaim_bound_to_another_instance_is_never_deleted(pipeline: Pipeline) -> None:
    # The claim under the node's name names an older instance (EC2 reuses private IPs, so node names).
    claim = add_karpenter_node(pipeline, "gpu-a", claim_provider_id="aws:///us-west-2b/i-0123456789abcdef0")
    terminate_calls: list[list[str]] = []
    pipeline.aws.on_instances_terminated.append(terminate_calls.append)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "FAILED"
    kept = nodeclaim(pipeline, claim)
    assert kept is not None and "deletionTimestamp" not in kept["metadata"]
    assert terminate_calls == []
    assert pipeline.aws.instance_state(pipeline.instances["gpu-a"]) == "running"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.FAILED and record.error == "OwnershipVerificationError"
    assert "no Karpenter NodeClaim has providerID" in record.summary
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert pipeline.lock_holder("gpu-a") is None
