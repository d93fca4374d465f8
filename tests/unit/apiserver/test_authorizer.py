"""The fake API server's authorizer: kube-apiserver's request attributes, RBAC matching, 401/403."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodeheal.grants import Permission, PolicyRule
from nodeheal.kube.client import StaticClientProvider, request_json
from nodeheal.sim.apiserver.authorizer import (
    RbacAuthorizer,
    RoleBinding,
    UserInfo,
    request_attributes,
    service_account,
)
from nodeheal.sim.apiserver.objects import make_node
from nodeheal.sim.apiserver.server import FakeKubeApiServer

USER = UserInfo("alice", ("readers",))


@pytest.mark.parametrize(
    ("method", "path", "params", "expected"),
    [
        ("GET", "/api/v1/nodes", {}, ("list", "", "nodes", "", "", "")),
        ("GET", "/api/v1/nodes", {"watch": "true"}, ("watch", "", "nodes", "", "", "")),
        ("GET", "/api/v1/watch/nodes", {}, ("watch", "", "nodes", "", "", "")),
        ("GET", "/api/v1/nodes/n1", {}, ("get", "", "nodes", "", "n1", "")),
        ("GET", "/api/v1/nodes", {"fieldSelector": "metadata.name=n1"}, ("list", "", "nodes", "", "n1", "")),
        ("PATCH", "/api/v1/nodes/n1", {}, ("patch", "", "nodes", "", "n1", "")),
        ("DELETE", "/api/v1/nodes/n1", {}, ("delete", "", "nodes", "", "n1", "")),
        ("DELETE", "/api/v1/namespaces/t/pods", {}, ("deletecollection", "", "pods", "", "", "t")),
        ("GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"}, ("list", "", "pods", "", "", "")),
        (
            "POST",
            "/api/v1/namespaces/t/pods/p/eviction",
            {},
            ("create", "", "pods", "eviction", "p", "t"),
        ),
        ("PUT", "/api/v1/nodes/n1/status", {}, ("update", "", "nodes", "status", "n1", "")),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/nodeheal/leases/l",
            {},
            ("update", "coordination.k8s.io", "leases", "", "l", "nodeheal"),
        ),
        (
            "POST",
            "/apis/events.k8s.io/v1/namespaces/d/events",
            {},
            ("create", "events.k8s.io", "events", "", "", "d"),
        ),
        ("GET", "/api/v1/namespaces/d", {}, ("get", "", "namespaces", "", "d", "d")),
    ],
)
def test_request_attributes_follow_request_info(
    method: str, path: str, params: dict[str, str], expected: tuple[str, ...]
) -> None:
    attrs = request_attributes(USER, method, path, params)
    assert attrs.resource_request
    assert (
        attrs.verb,
        attrs.api_group,
        attrs.resource,
        attrs.subresource,
        attrs.name,
        attrs.namespace,
    ) == expected


def test_non_resource_paths() -> None:
    assert not request_attributes(USER, "GET", "/healthz", {}).resource_request
    assert not request_attributes(USER, "GET", "/apis/policy/v1", {}).resource_request


READ_NODES = PolicyRule(("",), ("nodes",), ("get", "list"), "read")
LEASE = PolicyRule(("coordination.k8s.io",), ("leases",), ("get",), "lease", resource_names=("mine",))


@pytest.fixture
def served() -> Iterator[tuple[FakeKubeApiServer, RbacAuthorizer]]:
    sa = service_account("nodeheal", "exporter")
    authorizer = RbacAuthorizer(
        [
            RoleBinding("readers", (READ_NODES,), groups=("readers",)),
            RoleBinding("lease", (LEASE,), users=(sa.name,), namespace="nodeheal"),
        ]
    )
    with FakeKubeApiServer(authorizer=authorizer) as server:
        server.store.add(make_node("n1", instance_id="i-0123456789abcdef0"))
        yield server, authorizer


def call(server: FakeKubeApiServer, token: str | None, method: str, path: str) -> tuple[int, dict]:
    transport = StaticClientProvider(server.url, token=token).transport("c")
    response = request_json(transport, method, path, action="test")
    return response.status, response.body


def test_allowed_requests_are_recorded_and_the_rest_reported_unused(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    token = authorizer.token_for(USER)
    assert call(server, token, "GET", "/api/v1/nodes/n1")[0] == 200
    assert authorizer.used() == {("readers", Permission("get", "", "nodes"))}
    assert ("readers", Permission("list", "", "nodes")) in authorizer.unused()
    assert authorizer.denied == []


def test_forbidden_has_the_real_status_shape(served: tuple[FakeKubeApiServer, RbacAuthorizer]) -> None:
    server, authorizer = served
    status, body = call(server, authorizer.token_for(USER), "PATCH", "/api/v1/nodes/n1")
    assert status == 403
    assert body["reason"] == "Forbidden" and body["code"] == 403
    assert body["message"] == (
        'nodes "n1" is forbidden: User "alice" cannot patch resource "nodes" in API group "" at the cluster scope'
    )
    assert body["details"] == {"name": "n1", "kind": "nodes"}
    assert [str(denied) for denied in authorizer.denied] == ["patch nodes 'n1'"]


def test_role_binding_is_namespaced_and_resource_names_restrict(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    token = authorizer.token_for(service_account("nodeheal", "exporter"))
    path = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"
    assert call(server, token, "GET", path.format(ns="nodeheal", name="mine"))[0] == 404  # allowed, absent
    status, body = call(server, token, "GET", path.format(ns="nodeheal", name="other"))
    assert status == 403
    status, body = call(server, token, "GET", path.format(ns="default", name="mine"))
    assert status == 403
    assert body["message"] == (
        'leases.coordination.k8s.io "mine" is forbidden: User "system:serviceaccount:nodeheal:exporter" '
        'cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "default"'
    )
    assert body["details"] == {"name": "mine", "group": "coordination.k8s.io", "kind": "leases"}


def test_anonymous_is_forbidden_and_a_bad_token_unauthorized(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    assert call(server, None, "GET", "/api/v1/nodes")[0] == 403
    status, body = call(server, "not-a-token", "GET", "/api/v1/nodes")
    assert (status, body["reason"]) == (401, "Unauthorized")
    assert call(server, None, "GET", "/healthz")[0] == 200
    assert call(server, authorizer.admin_token(), "DELETE", "/api/v1/nodes/n1")[0] == 200
