"""Kubernetes failures -> domain errors, through the real client against a scripted server."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import kubernetes.client
import pytest

from nodeheal.errors import KubernetesApiError, KubernetesApiUnavailableError, NodeGoneError
from nodeheal.kube.api_errors import error_for_exception, status_from_body
from nodeheal.kube.client import StaticClientProvider
from nodeheal.kube.nodes import NodeOperations
from nodeheal.kube.pods import PodOperations, PodOutcome
from nodeheal.kube.transport import GeneratedClientTransport
from nodeheal.kube_views import PodView
from nodeheal.sim.apiserver.messages import INTERNAL_ERROR
from tests.unit.adapters.scripted_server import Reply, Script, scripted_server, status


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    with scripted_server() as running:
        yield running


def _nodes(host: str, timeout: float | tuple[float, float] = (2.0, 5.0)) -> NodeOperations:
    return NodeOperations(StaticClientProvider(host).transport("c"), timeout=timeout)


@pytest.mark.parametrize(
    ("code", "reason"),
    [(500, "InternalError"), (503, "ServiceUnavailable"), (504, "Timeout"), (429, "TooManyRequests")],
)
def test_server_errors_and_throttling_are_unavailable(
    server: tuple[str, Script], code: int, reason: str
) -> None:
    host, script = server
    script.add(Reply(code, status(code, reason, "etcdserver: request timed out")))
    with pytest.raises(KubernetesApiUnavailableError) as caught:
        _nodes(host).get("n1")
    text = str(caught.value)
    assert f"HTTP {code}" in text
    assert reason in text
    assert "etcdserver: request timed out" in text
    assert "get node n1" in text


@pytest.mark.parametrize(
    ("code", "reason", "message"),
    [
        (401, "Unauthorized", "Unauthorized"),
        (403, "Forbidden", 'nodes "n1" is forbidden: User "nodeheal" cannot get resource "nodes"'),
        (422, "Invalid", 'Node "n1" is invalid: spec.taints[0].effect: Unsupported value'),
        (400, "BadRequest", "the server rejected our request"),
    ],
)
def test_refusals_are_api_errors_with_status_reason_and_message(
    server: tuple[str, Script], code: int, reason: str, message: str
) -> None:
    host, script = server
    script.add(Reply(code, status(code, reason, message)))
    with pytest.raises(KubernetesApiError) as caught:
        _nodes(host).list()
    assert not isinstance(caught.value, KubernetesApiUnavailableError)
    assert str(caught.value) == f"list nodes: HTTP {code} {reason}: {message}"


def test_a_proxy_error_page_is_still_explained(server: tuple[str, Script]) -> None:
    host, script = server
    script.add(Reply(502, "<html><body>502 Bad Gateway</body></html>", content_type="text/html"))
    with pytest.raises(KubernetesApiUnavailableError, match="502 Bad Gateway"):
        _nodes(host).get("n1")


def test_read_timeout_is_unavailable(server: tuple[str, Script]) -> None:
    host, script = server
    script.add(Reply(200, {"kind": "Node"}, delay=1.5))
    with pytest.raises(KubernetesApiUnavailableError, match="unreachable"):
        _nodes(host, timeout=(1.0, 0.3)).get("n1")


def test_connection_refused_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port any more: every connect is refused.
    with pytest.raises(KubernetesApiUnavailableError, match="unreachable"):
        _nodes(f"http://127.0.0.1:{port}").get("n1")


def test_404_on_get_is_none_but_on_cordon_is_node_gone(server: tuple[str, Script]) -> None:
    host, script = server
    missing = Reply(404, status(404, "NotFound", 'nodes "n1" not found'))
    script.add(missing, missing)
    nodes = _nodes(host)
    assert nodes.get("n1") is None
    with pytest.raises(NodeGoneError, match="n1"):
        nodes.uncordon("n1")


def test_eviction_server_error_fails_that_pod_only(server: tuple[str, Script]) -> None:
    host, script = server
    script.add(
        Reply(500, status(500, "InternalError", INTERNAL_ERROR.format("too many retries"))),
    )
    pod = PodView(namespace="ml", name="p0", uid="u0", phase="Running", owner_kinds=("ReplicaSet",))
    report = PodOperations(StaticClientProvider(host).transport("c")).evict([pod], parallelism=1)
    (result,) = report.results
    assert result.outcome is PodOutcome.FAILED
    assert result.status == 500
    assert result.retryable
    assert "too many retries" in result.message


def test_eviction_without_an_answer_is_a_retryable_failure() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pod = PodView(namespace="ml", name="p0", uid="u0", phase="Running", owner_kinds=())
    report = PodOperations(StaticClientProvider(f"http://127.0.0.1:{port}").transport("c")).evict(
        [pod], parallelism=4
    )
    (result,) = report.failed
    assert result.status is None
    assert result.retryable
    assert "unreachable" in result.message


def test_status_body_parsing() -> None:
    parsed = status_from_body(409, b'{"kind":"Status","reason":"Conflict","message":"changed"}')
    assert (parsed.code, parsed.reason, parsed.message) == (409, "Conflict", "changed")
    assert status_from_body(500, "", "Internal Server Error").describe() == "HTTP 500 Internal Server Error"
    assert status_from_body(502, "bad gateway\n").message == "bad gateway"


def test_tls_handshake_failure_is_unavailable(server: tuple[str, Script]) -> None:
    # https:// to a plain-HTTP listener: the handshake itself fails, no HTTP answer comes back.
    host, _ = server
    with pytest.raises(KubernetesApiUnavailableError, match="get node n: API server unreachable"):
        _nodes(host.replace("http://", "https://")).get("n")


@pytest.mark.parametrize(
    ("retries", "message"),
    [
        # The kubeconfig default: urllib3 retries, then wraps the SSLError in MaxRetryError.
        (None, "get node n: API server unreachable (MaxRetryError"),
        # No urllib3 retries: the client's REST layer raises ApiException(status=0) itself.
        (False, "get node n: could not talk to the API server: SSLError"),
    ],
)
def test_generated_client_tls_failure_is_unavailable(
    server: tuple[str, Script], retries: bool | None, message: str
) -> None:
    host, _ = server
    configuration = kubernetes.client.Configuration(host=host.replace("http://", "https://"))
    configuration.retries = retries
    nodes = NodeOperations(GeneratedClientTransport(kubernetes.client.ApiClient(configuration)))
    with pytest.raises(KubernetesApiUnavailableError, match=re.escape(message)):
        nodes.get("n")


def test_programming_errors_are_not_translated() -> None:
    with pytest.raises(TypeError):
        error_for_exception(KeyError("k"), action="x")


# -- exact requests on the wire -------------------------------------------------------------------


def _node_json(resource_version: str, *, taints: list[dict[str, str]]) -> dict[str, object]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": "n1", "uid": "uid-1", "resourceVersion": resource_version, "annotations": {}},
        "spec": {"providerID": "aws:///us-west-2b/i-0abc1234567890def", "taints": taints},
        "status": {},
    }


def test_cordon_sends_one_merge_patch_with_preconditions_and_the_full_taint_list(
    server: tuple[str, Script],
) -> None:
    """The resourceVersion is the precondition; a uid in a merge patch is none (the real server
    checks the resourceVersion, then refuses a uid change as an immutable field: store.go
    ``Update``, apimachinery objectmeta.go ``ValidateObjectMetaAccessorUpdate``), so none is sent."""
    host, script = server
    other = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    script.add(
        Reply(200, _node_json("41", taints=[other])),
        Reply(
            200, _node_json("42", taints=[other, {"key": "nodeheal.io/unhealthy", "effect": "NoSchedule"}])
        ),
    )
    result = _nodes(host).cordon(
        "n1", execution="exec-1", reason="Xid 79", now=datetime(2026, 1, 2, tzinfo=UTC)
    )

    assert result.changed
    get, patch = script.requests
    assert (get.method, get.path) == ("GET", "/api/v1/nodes/n1")
    assert (patch.method, patch.path) == ("PATCH", "/api/v1/nodes/n1")
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert patch.headers["user-agent"].startswith("nodeheal")
    assert patch.body == {
        "metadata": {
            "resourceVersion": "41",
            "annotations": {
                "nodeheal.io/execution": "exec-1",
                "nodeheal.io/reason": "Xid 79",
                "nodeheal.io/cordoned-at": "2026-01-02T00:00:00Z",
                "nodeheal.io/cordoned-by-nodeheal": "true",
            },
        },
        "spec": {
            "unschedulable": True,
            "taints": [other, {"key": "nodeheal.io/unhealthy", "effect": "NoSchedule"}],
        },
    }


def test_eviction_and_deletion_bodies_carry_the_pod_uid(server: tuple[str, Script]) -> None:
    host, script = server
    script.add(Reply(201, {"kind": "Status", "status": "Success", "code": 201}), Reply(200, {"kind": "Pod"}))
    pod = PodView(
        namespace="ml", name="trainer-0", uid="pod-uid", phase="Running", owner_kinds=("StatefulSet",)
    )
    ops = PodOperations(StaticClientProvider(host).transport("c"))

    assert ops.evict([pod], parallelism=1).results[0].outcome is PodOutcome.EVICTED
    assert ops.delete([pod], grace_seconds=20, parallelism=1).results[0].outcome is PodOutcome.DELETED

    eviction, deletion = script.requests
    assert (eviction.method, eviction.path) == ("POST", "/api/v1/namespaces/ml/pods/trainer-0/eviction")
    assert eviction.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "trainer-0", "namespace": "ml"},
        "deleteOptions": {"preconditions": {"uid": "pod-uid"}},
    }
    assert (deletion.method, deletion.path) == ("DELETE", "/api/v1/namespaces/ml/pods/trainer-0")
    assert deletion.body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 20,
        "preconditions": {"uid": "pod-uid"},
    }


def test_list_on_node_uses_a_field_selector(server: tuple[str, Script]) -> None:
    host, script = server
    script.add(Reply(200, {"kind": "PodList", "metadata": {}, "items": []}))
    assert PodOperations(StaticClientProvider(host).transport("c")).list_on_node("ip-10-0-1-2") == []
    (listing,) = script.requests
    assert listing.path == "/api/v1/pods"
    assert listing.query["fieldSelector"] == "spec.nodeName=ip-10-0-1-2"


def test_listing_follows_continue_tokens(server: tuple[str, Script]) -> None:
    host, script = server
    script.add(
        Reply(
            200,
            {"kind": "NodeList", "metadata": {"continue": "page-2"}, "items": [_node_json("1", taints=[])]},
        ),
        Reply(200, {"kind": "NodeList", "metadata": {}, "items": [_node_json("2", taints=[])]}),
    )
    assert len(_nodes(host).list("karpenter.sh/nodepool=gpu")) == 2
    first, second = script.requests
    assert "continue" not in first.query
    assert second.query["continue"] == "page-2"
    assert second.query["labelSelector"] == "karpenter.sh/nodepool=gpu"
