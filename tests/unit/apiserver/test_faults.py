"""Fault injection as the real client experiences it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import urllib3
from kubernetes import client

from nodeheal.sim.apiserver import FakeKubeApiServer, make_node


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as srv:
        srv.store.add(make_node("gpu-a", instance_id="i-0a"))
        yield srv


@pytest.fixture
def core(server: FakeKubeApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(server.api_client())


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
            "Internal error occurred: injected fault",
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
