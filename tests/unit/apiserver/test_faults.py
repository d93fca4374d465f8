"""Fault injection as the real client experiences it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import urllib3
from kubernetes import client

from nodeheal.sim.apiserver import FakeKubeApiServer, make_node
from nodeheal.sim.apiserver.messages import APF_TOO_MANY_REQUESTS, INTERNAL_ERROR


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as srv:
        srv.store.add(make_node("gpu-a", instance_id="i-0a"))
        yield srv


def test_next_requests_fail_with_internal_error(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    server.faults.fail_next(2, method="PATCH", path=r"^/api/v1/nodes/")
    core.read_node("gpu-a")
    for _ in range(2):
        with pytest.raises(client.ApiException) as err:
            core.patch_node("gpu-a", {"spec": {"unschedulable": True}})
        assert err.value.status == 500
        body = json.loads(err.value.body)
        assert (body["reason"], body["message"]) == (
            "InternalError",
            INTERNAL_ERROR.format("injected fault"),
        )
    assert core.patch_node("gpu-a", {"spec": {"unschedulable": True}}).spec.unschedulable is True
    assert server.faults.counts[("PATCH", "/api/v1/nodes/{name}")] == 3
    assert server.faults.count("GET", r"/nodes/gpu-a$") == 1


def test_outage_window_returns_503_then_recovers(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    server.faults.fail_for(0.3)
    with pytest.raises(client.ApiException) as err:
        core.list_node()
    assert err.value.status == 503
    assert json.loads(err.value.body)["reason"] == "ServiceUnavailable"
    time.sleep(0.35)
    assert len(core.list_node().items) == 1


def test_timeout_holds_then_closes_without_answer(server: FakeKubeApiServer) -> None:
    server.faults.timeout_next(1, hold_seconds=0.3, path="/nodes")
    http = urllib3.PoolManager(retries=False)
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        http.request("GET", f"{server.url}/api/v1/nodes")
    assert time.monotonic() - started >= 0.3
    assert http.request("GET", f"{server.url}/api/v1/nodes").status == 200


def test_held_get_is_retried_by_the_client(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    # urllib3 retries an idempotent GET after a read timeout; the held request still counts.
    server.faults.timeout_next(1, hold_seconds=1.0, method="GET")
    started = time.monotonic()
    assert core.read_node("gpu-a", _request_timeout=0.2).metadata.name == "gpu-a"
    assert time.monotonic() - started < 1.0
    assert server.faults.count("GET", "/api/v1/nodes/gpu-a") == 2


def test_latency_is_added(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    server.faults.add_latency(0.2, count=1)
    started = time.monotonic()
    core.read_node("gpu-a")
    assert time.monotonic() - started >= 0.2
    started = time.monotonic()
    core.read_node("gpu-a")
    assert time.monotonic() - started < 0.2


def test_clear_removes_rules(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    server.faults.fail_next(5, status=503)
    server.faults.clear()
    assert core.read_node("gpu-a").metadata.name == "gpu-a"


def test_priority_and_fairness_rejection_is_plain_text_with_retry_after(server: FakeKubeApiServer) -> None:
    """API Priority and Fairness rejects with ``http.Error``: 429, text/plain, Retry-After, no
    Status body (``tooManyRequests`` in k8s.io/apiserver pkg/server/filters/priority-and-fairness.go)."""
    server.faults.throttle_next(1, retry_after=4, method="GET", path="^/api/v1/nodes$")
    http = urllib3.PoolManager(retries=False)
    rejected = http.request("GET", f"{server.url}/api/v1/nodes")
    assert rejected.status == 429
    assert rejected.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert rejected.headers["Retry-After"] == "4"
    assert rejected.data.decode() == APF_TOO_MANY_REQUESTS + "\n"
    assert http.request("GET", f"{server.url}/api/v1/nodes").status == 200


def test_call_before_runs_between_two_matching_requests(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """A test can act at an exact point of a client's sequence, here between two reads."""
    server.faults.call_before(
        lambda: server.store.heartbeat("gpu-a"), skip=1, method="GET", path="^/api/v1/nodes/gpu-a$"
    )
    first = core.read_node("gpu-a").metadata.resource_version
    second = core.read_node("gpu-a").metadata.resource_version
    third = core.read_node("gpu-a").metadata.resource_version
    assert int(second) == int(first) + 1
    assert third == second


def test_answered_requests_are_reported_and_can_be_waited_for(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """What a test waits on: requests answered (lists apart from watches) and watches opened."""
    core.list_node()
    server.faults.wait_for(lambda: server.faults.served("GET", "^/api/v1/nodes$") == 1, what="the list")
    assert server.faults.served("GET", "^/api/v1/nodes$", watch=True) == 0
    core.list_node(watch=True, timeout_seconds=1, _preload_content=False).read()
    server.faults.wait_for(
        lambda: server.faults.served("GET", "^/api/v1/nodes$", watch=True) == 1, what="the watch to end"
    )
    assert server.faults.watches_started("^/api/v1/nodes$") == 1
    assert server.faults.watching() == 0
