"""The terminate step with replace.method delete-nodeclaim, over the in-memory ports: the same
guards as ec2-terminate before anything is touched, and no fallback to EC2 when the NodeClaim
path cannot be taken."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeheal.actions import Mode
from nodeheal.config import RemediationSettings, ReplaceSettings
from nodeheal.errors import ConfigurationError, OwnershipVerificationError, RemediationPausedError
from nodeheal.instances import InstanceView, ownership_tags
from nodeheal.workflow import mutations
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.ports import KubeAccess
from tests.unit.workflow.fakes import CLUSTER, NOW, FakeNodes, gpu_problem, live_node
from tests.unit.workflow.test_safety_defects import (
    OLD_INSTANCE,
    RecordingPods,
    admitted_state,
    cordoned,
    held_ledger,
)

BY_NODECLAIM = RemediationSettings(replace=ReplaceSettings(method="delete-nodeclaim"))


@dataclass
class OwnedInstance:
    """EC2 that knows the admitted instance (owned by the cluster) and must never terminate it."""

    described: list[str] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)
    state: str = "running"

    def describe(self, instance_id: str) -> InstanceView:
        self.described.append(instance_id)
        return InstanceView(instance_id, self.state, tags=ownership_tags(CLUSTER))

    def terminate(self, instance_id: str) -> Any:
        raise AssertionError("delete-nodeclaim must never call TerminateInstances")

    def reboot(self, instance_id: str) -> None:
        raise AssertionError("nothing may be rebooted")

    def report_impaired(self, instance_id: str, start_time: Any) -> None:
        self.reported.append(instance_id)


@dataclass
class Claim:
    name: str
    uid: str
    deletion_requested: bool = False


@dataclass
class Deletion:
    already_gone: bool
    finalizing: bool


@dataclass
class FakeNodeClaims:
    by_provider_id: dict[str, Claim]
    looked_up: list[str] = field(default_factory=list)
    deleted: list[Claim] = field(default_factory=list)

    def bound_to(self, provider_id: str) -> Claim | None:
        self.looked_up.append(provider_id)
        return self.by_provider_id.get(provider_id)

    def delete(self, claim: Claim) -> Deletion:
        self.deleted.append(claim)
        return Deletion(already_gone=False, finalizing=True)


def run_terminate(
    node: Any, nodeclaims: FakeNodeClaims | None, ec2: Any, ledger: Any = None
) -> dict[str, Any]:
    return mutations.terminate(
        admitted_state(node, settings=BY_NODECLAIM),
        KubeAccess(FakeNodes({"gpu-a": node}), RecordingPods({}), nodeclaims=nodeclaims),
        ec2,
        ledger if ledger is not None else held_ledger(),
        NOW,
        mode=Mode.FULL,
    )


def test_the_nodeclaim_bound_to_the_admitted_instance_is_deleted_and_ec2_only_described() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    claim = Claim("gpu-a9q4m", "uid-of-the-claim")
    nodeclaims = FakeNodeClaims({node.provider_id: claim})
    ec2 = OwnedInstance()

    result = run_terminate(node, nodeclaims, ec2)

    assert ec2.described == [OLD_INSTANCE]
    assert nodeclaims.looked_up == [node.provider_id] and nodeclaims.deleted == [claim]
    assert result["method"] == "delete-nodeclaim"
    assert (result["nodeClaim"], result["nodeClaimUid"]) == ("gpu-a9q4m", "uid-of-the-claim")
    assert result["alreadyGone"] is False and result["nodeClaimFinalizing"] is True
    assert result["instanceId"] == OLD_INSTANCE and result["nodeDeleted"] is False


def test_no_bound_nodeclaim_fails_without_falling_back_to_ec2() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    nodeclaims = FakeNodeClaims({"aws:///us-west-2b/i-0someoneelse0000": Claim("gpu-other", "uid-other")})

    with pytest.raises(OwnershipVerificationError, match="no Karpenter NodeClaim has providerID"):
        run_terminate(node, nodeclaims, OwnedInstance())
    assert nodeclaims.deleted == []


def test_delete_nodeclaim_without_nodeclaim_access_is_a_configuration_error() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    with pytest.raises(ConfigurationError, match="no NodeClaim access"):
        run_terminate(node, None, OwnedInstance())


def test_pause_stops_a_nodeclaim_delete_before_anything_is_asked() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    ledger = held_ledger()
    ledger.states[CLUSTER] = ClusterAdmissionState(
        CLUSTER, version=1, paused=True, paused_reason="maintenance"
    )
    nodeclaims = FakeNodeClaims({node.provider_id: Claim("gpu-a9q4m", "uid-of-the-claim")})
    ec2 = OwnedInstance()

    with pytest.raises(RemediationPausedError, match="maintenance"):
        run_terminate(node, nodeclaims, ec2, ledger)
    assert ec2.described == [] and nodeclaims.looked_up == [] and nodeclaims.deleted == []


def test_a_retried_step_after_karpenter_terminated_the_instance_is_already_done() -> None:
    # The first attempt's delete went through and its answer was lost; Karpenter's finalizer has
    # terminated the instance and removed the NodeClaim before Step Functions retried the step.
    node = cordoned(live_node(condition=gpu_problem()))
    nodeclaims = FakeNodeClaims({})
    ec2 = OwnedInstance(state="shutting-down")

    result = run_terminate(node, nodeclaims, ec2)

    assert result["alreadyGone"] is True and result["previousState"] == "shutting-down"
    assert result["method"] == "delete-nodeclaim"
    assert nodeclaims.looked_up == [] and nodeclaims.deleted == []
