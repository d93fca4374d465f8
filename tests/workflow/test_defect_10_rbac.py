"""Defect 10, least privilege: each function runs under its own ClusterRole (docs/architecture.md, D8).

The fake API server authorizes every request of every function against the rules of
``nodeheal/rbac.py`` (the same rules ``deploy/rbac/remediator.yaml`` is rendered from), with the
groups the synthesized stack's EKS access entries give the function's role. A verb the code needs
but its role lacks fails a scenario with a 403; a verb granted that no scenario uses fails here.
"""

from __future__ import annotations

import pytest

from nodeheal.errors import KubernetesApiError
from nodeheal.grants import Permission
from nodeheal.kube.client import StaticClientProvider, request_json
from nodeheal.kube.nodes import NodeOperations
from nodeheal.kube.transport import KubeTransport
from nodeheal.sim.apiserver.authorizer import UserInfo, function_user, nodeheal_authorizer
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import CLUSTER, XID_48, XID_79, Pipeline, open_pipeline
from tests.workflow.test_remediation_workflow import _heal_on_reboot
from tests.workflow.test_replace_by_nodeclaim import add_karpenter_node

#: D8 lets every function create Events in both groups; NodeHeal writes them through
#: events.k8s.io/v1 (nodeheal.kube.event_writer), so the core group's grant goes unused. Every other
#: grant, events.k8s.io's included, must be needed by some scenario.
EVENT_GRANTS = frozenset({Permission("create", "", "events")})


def run_reboot(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-b")  # the pool has a healthy node: admit lists it for the budget
    pipeline.add_gpu_node("gpu-a")
    _heal_on_reboot(pipeline, "gpu-a")
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_48))
    assert execution["status"] == "SUCCEEDED"
    assert pipeline.only_record("gpu-a").outcome is Outcome.REBOOTED


def run_replace(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    assert execution["status"] == "SUCCEEDED"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.REPLACED and record.pods_evicted == 2


def run_force_drain(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    pipeline.block_with_pdb("gpu-a")
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    assert execution["status"] == "SUCCEEDED"
    assert pipeline.only_record("gpu-a").pods_forced == 2


#: drain.evictionModes delete-after-timeout: the drain function itself deletes the pods a
#: PodDisruptionBudget kept after drain.deleteAfterSeconds.
DELETE_AFTER_TIMEOUT = {
    "drain": {
        "timeoutSeconds": 60,
        "deleteAfterSeconds": 1,
        "evictionModes": [{"mode": "delete-after-timeout", "namespaces": ["training"]}],
    }
}


def run_delete_after_timeout(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    pipeline.block_with_pdb("gpu-a")
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    assert execution["status"] == "SUCCEEDED"
    assert pipeline.only_record("gpu-a").pods_forced == 0


def run_replace_deleting_the_node(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    assert execution["status"] == "SUCCEEDED"
    assert pipeline.node("gpu-a") is None


def run_replace_by_nodeclaim(pipeline: Pipeline) -> None:
    claim = add_karpenter_node(pipeline, "gpu-a")
    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    assert execution["status"] == "SUCCEEDED"
    assert pipeline.store.get("nodeclaims", claim)["metadata"]["deletionTimestamp"]


def test_defect_10_each_role_is_exactly_what_its_function_needs() -> None:
    authorizer = nodeheal_authorizer()
    scenarios = [
        ({}, run_reboot),
        ({}, run_replace),
        ({}, run_force_drain),
        (DELETE_AFTER_TIMEOUT, run_delete_after_timeout),
        ({"deleteNodeAfterTerminate": True}, run_replace_deleting_the_node),
        ({"replace": {"method": "delete-nodeclaim"}}, run_replace_by_nodeclaim),
    ]
    for overrides, scenario in scenarios:
        for pipeline in open_pipeline(overrides, authorizer=authorizer):
            scenario(pipeline)

    assert [str(request) for request in authorizer.denied] == []
    # The exporter does not run here (tests/e2e holds it to its roles).
    unused = [
        f"{role}: {permission}"
        for role, permission in authorizer.unused()
        if permission not in EVENT_GRANTS and not role.startswith("nodeheal-exporter")
    ]
    assert unused == [], "granted but used by no scenario; drop them from nodeheal/rbac.py"


def user_of(pipeline: Pipeline, handler: str) -> UserInfo:
    function = pipeline.aws.app.functions()[pipeline.aws.function_logical_id(handler)]
    return function_user(function, CLUSTER)


def transport_of(pipeline: Pipeline, handler: str) -> KubeTransport:
    """What the function's runtime gets in the pipeline: its own bearer token."""
    token = pipeline.authorizer.token_for(user_of(pipeline, handler))
    return StaticClientProvider(pipeline.server.url, token=token).transport(CLUSTER)


def test_defect_10_admit_cannot_patch_nodes(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    admit = transport_of(pipeline, "lambdas.admit.handler")
    assert NodeOperations(admit).get("gpu-a") is not None  # it may read

    response = request_json(
        admit,
        "PATCH",
        "/api/v1/nodes/gpu-a",
        action="cordon",
        body={"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
    )

    assert response.status == 403
    user = user_of(pipeline, "lambdas.admit.handler")
    assert response.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'nodes "gpu-a" is forbidden: User "{user.name}" cannot patch resource "nodes" '
        'in API group "" at the cluster scope',
        "reason": "Forbidden",
        "details": {"name": "gpu-a", "kind": "nodes"},
        "code": 403,
    }
    assert not (pipeline.node("gpu-a") or {})["spec"].get("unschedulable")


def test_defect_10_drain_cannot_delete_nodes(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a")
    drain = transport_of(pipeline, "lambdas.drain.handler")
    uid = (pipeline.node("gpu-a") or {})["metadata"]["uid"]

    response = request_json(drain, "DELETE", "/api/v1/nodes/gpu-a", action="delete node")

    assert response.status == 403 and response.body["reason"] == "Forbidden"
    assert 'cannot delete resource "nodes"' in response.body["message"]
    assert pipeline.node("gpu-a") is not None
    # Nor can terminate while deleteNodeAfterTerminate is off (the default).
    terminate = NodeOperations(transport_of(pipeline, "lambdas.terminate.handler"))
    with pytest.raises(KubernetesApiError, match="forbidden"):
        terminate.delete("gpu-a", uid)
    assert pipeline.node("gpu-a") is not None
