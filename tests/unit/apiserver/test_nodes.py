"""Nodes through the real `kubernetes` client: reads, selectors, the three patch types, status."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import urllib3
from kubernetes import client

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, messages
from nodeheal.sim.apiserver.selectors import parse_label_selector


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(
        make_node("gpu-a", instance_id="i-0a", extra_labels={"tier": "train"}),
        make_node(
            "gpu-b", instance_id="i-0b", zone="us-west-2c", node_pool="infer", extra_labels={"tier": "serve"}
        ),
        make_node("cpu-c", instance_id="i-0c", instance_type="m7i.4xlarge", gpus=0, node_pool="system"),
    )
    with FakeKubeApiServer(store) as srv:
        yield srv


def names(node_list: client.V1NodeList) -> list[str]:
    return [n.metadata.name for n in node_list.items]


def test_get_returns_complete_node(core: client.CoreV1Api) -> None:
    node = core.read_node("gpu-a")
    assert node.spec.provider_id == "aws:///us-west-2b/i-0a"
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    assert node.status.node_info.kubelet_version.startswith("v1.")
    assert node.metadata.labels["kubernetes.io/hostname"] == "gpu-a"
    assert {c.type for c in node.status.conditions} >= {"Ready", "GPUProblem", "MemoryPressure"}


def test_list_reports_kind_and_store_version(server: FakeKubeApiServer) -> None:
    http = urllib3.PoolManager()
    resp = http.request("GET", f"{server.url}/api/v1/nodes")
    body = json.loads(resp.data)
    assert body["kind"] == "NodeList"
    assert body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == str(server.store.resource_version)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("karpenter.sh/nodepool=gpu", ["gpu-a"]),
        ("karpenter.sh/nodepool==infer", ["gpu-b"]),
        ("karpenter.sh/nodepool!=gpu", ["cpu-c", "gpu-b"]),
        ("karpenter.sh/nodepool in (gpu, infer)", ["gpu-a", "gpu-b"]),
        ("karpenter.sh/nodepool notin (gpu,infer)", ["cpu-c"]),
        ("tier", ["gpu-a", "gpu-b"]),
        ("!tier", ["cpu-c"]),
        ("tier!=serve", ["cpu-c", "gpu-a"]),
        ("nvidia.com/gpu.present=true,topology.kubernetes.io/zone=us-west-2c", ["gpu-b"]),
    ],
)
def test_label_selectors(core: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    assert names(core.list_node(label_selector=selector)) == expected


def test_field_selector_by_name_and_unsupported_field(core: client.CoreV1Api) -> None:
    assert names(core.list_node(field_selector="metadata.name=gpu-b")) == ["gpu-b"]
    with pytest.raises(client.ApiException) as err:
        core.list_node(field_selector="status.phase=Running")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == messages.FIELD_LABEL_NOT_SUPPORTED.format(
        label="status.phase"
    )


def test_bad_label_selector_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as err:
        core.list_node(label_selector="tier in serve")
    assert err.value.status == 400
    assert json.loads(err.value.body)["reason"] == "BadRequest"


def test_selector_parser_semantics() -> None:
    sel = parse_label_selector("a in (1,2),b,!c,d!=x")
    assert sel.matches({"a": "1", "b": ""})
    assert not sel.matches({"a": "3", "b": ""})
    assert not sel.matches({"a": "1"})
    assert not sel.matches({"a": "1", "b": "", "c": "y"})
    assert not sel.matches({"a": "2", "b": "", "d": "x"})
    assert parse_label_selector("n>3").matches({"n": "4"})


def test_cordon_patch_replaces_taints_and_merges_annotations(core: client.CoreV1Api) -> None:
    core.patch_node("gpu-a", {"spec": {"taints": [{"key": "old", "effect": "NoExecute"}]}})
    before = core.read_node("gpu-a")
    patched = core.patch_node(
        "gpu-a",
        {
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "nodeheal.io/unhealthy", "value": "GPUProblem", "effect": "NoSchedule"}],
            },
            "metadata": {"annotations": {"nodeheal.io/execution": "exec-1"}},
        },
    )
    assert patched.spec.unschedulable is True
    # NodeSpec.taints has no patch strategy, so the patch's list replaces the old one.
    assert [(t.key, t.effect) for t in patched.spec.taints] == [("nodeheal.io/unhealthy", "NoSchedule")]
    assert patched.metadata.annotations["nodeheal.io/execution"] == "exec-1"
    assert "node.alpha.kubernetes.io/ttl" in patched.metadata.annotations
    assert int(patched.metadata.resource_version) > int(before.metadata.resource_version)


def test_merge_patch_null_deletes(core: client.CoreV1Api) -> None:
    core.patch_node("gpu-a", {"metadata": {"labels": {"x": "1"}}})
    node = core.patch_node(
        "gpu-a",
        {"metadata": {"labels": {"x": None, "y": "2"}}, "spec": {"unschedulable": True}},
        _content_type="application/merge-patch+json",
    )
    assert "x" not in node.metadata.labels
    assert node.metadata.labels["y"] == "2"
    assert node.spec.unschedulable is True


def test_json_patch_with_test_operation(core: client.CoreV1Api) -> None:
    node = core.read_node("gpu-a")
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version},
        {"op": "add", "path": "/metadata/labels/nodeheal.io~1state", "value": "cordoned"},
        {"op": "add", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoSchedule"}]},
    ]
    patched = core.patch_node("gpu-a", ops)
    assert patched.metadata.labels["nodeheal.io/state"] == "cordoned"
    with pytest.raises(client.ApiException) as err:
        core.patch_node("gpu-a", ops)
    assert err.value.status == 422
    assert json.loads(err.value.body)["reason"] == "Invalid"


def test_strategic_patch_conditions_merge_by_type_on_status(core: client.CoreV1Api) -> None:
    patch = {
        "status": {
            "conditions": [
                {"type": "GPUProblem", "status": "True", "reason": "GPUHardwareError", "message": "Xid 79"}
            ]
        },
        "spec": {"unschedulable": True},
    }
    node = core.patch_node_status("gpu-a", patch)
    by_type = {c.type: c for c in node.status.conditions}
    assert by_type["GPUProblem"].status == "True"
    assert by_type["Ready"].status == "True"
    assert len(node.status.conditions) == 7
    # /status ignores spec changes.
    assert not node.spec.unschedulable


def test_main_resource_patch_ignores_status(core: client.CoreV1Api) -> None:
    node = core.patch_node(
        "gpu-a",
        {
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
            "metadata": {"labels": {"a": "b"}},
        },
    )
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert node.metadata.labels["a"] == "b"


def test_patch_delete_directive_removes_condition(core: client.CoreV1Api) -> None:
    node = core.patch_node_status(
        "gpu-a", {"status": {"conditions": [{"type": "GPUProblem", "$patch": "delete"}]}}
    )
    assert "GPUProblem" not in {c.type for c in node.status.conditions}


def test_invalid_taint_effect_is_422(core: client.CoreV1Api) -> None:
    """validateNodeTaints reports on the path ValidateNode and ValidateNodeUpdate hand it,
    ``metadata.taints``, not ``spec.taints``
    (https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/validation.go)."""
    with pytest.raises(client.ApiException) as err:
        core.patch_node("gpu-a", {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})
    body = json.loads(err.value.body)
    assert err.value.status == 422
    assert body["details"]["causes"][0]["field"] == "metadata.taints[0].effect"


def test_put_with_stale_resource_version_conflicts(core: client.CoreV1Api) -> None:
    node = core.read_node("gpu-b")
    node.spec.unschedulable = True
    updated = core.replace_node("gpu-b", node)
    assert updated.spec.unschedulable is True
    node.spec.unschedulable = False
    with pytest.raises(client.ApiException) as err:
        core.replace_node("gpu-b", node)
    body = json.loads(err.value.body)
    assert err.value.status == 409
    assert body["reason"] == "Conflict"
    assert body["message"] == messages.CONFLICT.format(
        resource="nodes", name="gpu-b", why=messages.OBJECT_MODIFIED
    )


def test_noop_patch_keeps_resource_version(core: client.CoreV1Api) -> None:
    first = core.patch_node("gpu-a", {"metadata": {"labels": {"z": "1"}}})
    second = core.patch_node("gpu-a", {"metadata": {"labels": {"z": "1"}}})
    assert first.metadata.resource_version == second.metadata.resource_version


def test_delete_with_uid_precondition(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    """A stale uid precondition fails rest.BeforeDelete's early check: a Conflict on the Kind.

    k8s.io/apiserver pkg/registry/rest/delete.go BeforeDelete, errors.NewConflict with
    GroupResource{Resource: gvk.Kind}:
    https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/rest/delete.go#L83-L91
    """
    deleted: list[str] = []
    server.store.on("node_deleted", lambda node: deleted.append(node["metadata"]["name"]))
    uid = core.read_node("gpu-a").metadata.uid
    with pytest.raises(client.ApiException) as err:
        core.delete_node(
            "gpu-a", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="nope"))
        )
    assert err.value.status == 409
    body = json.loads(err.value.body)
    why = messages.PRECONDITION_UID_MISMATCH.format(precondition="nope", record=uid)
    assert body["message"] == messages.CONFLICT.format(resource="Node", name="gpu-a", why=why)
    assert (body["reason"], body["details"]) == ("Conflict", {"name": "gpu-a", "kind": "Node"})
    result = core.delete_node(
        "gpu-a", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
    )
    assert result["status"] == "Success"
    assert result["details"] == {"name": "gpu-a", "kind": "nodes", "uid": uid}
    assert deleted == ["gpu-a"]
    with pytest.raises(client.ApiException) as missing:
        core.read_node("gpu-a")
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == 'nodes "gpu-a" not found'


def test_create_then_duplicate_is_409(core: client.CoreV1Api) -> None:
    body = make_node("gpu-new", instance_id="i-0d")
    created = core.create_node(body)
    assert created.metadata.uid
    with pytest.raises(client.ApiException) as err:
        core.create_node(body)
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "AlreadyExists"


def test_unsupported_path_and_verb(server: FakeKubeApiServer) -> None:
    http = urllib3.PoolManager()
    resp = http.request("GET", f"{server.url}/api/v1/configmaps")
    assert resp.status == 404
    assert json.loads(resp.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }
    resp = http.request("POST", f"{server.url}/api/v1/nodes/gpu-a", body=b"{}")
    assert resp.status == 405
    assert json.loads(resp.data)["reason"] == "MethodNotAllowed"
    resp = http.request("GET", f"{server.url}/api/v1/nodes/gpu-a/proxy")
    assert resp.status == 404
    resp = http.request(
        "PATCH",
        f"{server.url}/api/v1/nodes/gpu-a",
        body=b"{}",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert resp.status == 415


def test_version_and_health(server: FakeKubeApiServer) -> None:
    version = client.VersionApi(server.api_client()).get_code()
    assert version.major == "1"
    http = urllib3.PoolManager()
    for path in ("/healthz", "/readyz", "/livez"):
        resp = http.request("GET", f"{server.url}{path}")
        assert (resp.status, resp.data) == (200, b"ok")


def test_store_helpers_move_transition_time_only_on_change(server: FakeKubeApiServer) -> None:
    store = server.store
    first = store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUHardwareError", "Xid 79")
    cond = next(c for c in first["status"]["conditions"] if c["type"] == "GPUProblem")
    again = store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUHardwareError", "Xid 79 again")
    cond2 = next(c for c in again["status"]["conditions"] if c["type"] == "GPUProblem")
    assert cond2["lastTransitionTime"] == cond["lastTransitionTime"]
    beat = store.heartbeat("gpu-a")
    assert int(beat["metadata"]["resourceVersion"]) > int(again["metadata"]["resourceVersion"])
    boot = beat["status"]["nodeInfo"]["bootID"]
    assert store.reboot_node("gpu-a")["status"]["nodeInfo"]["bootID"] != boot
