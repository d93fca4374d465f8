"""Watch streams through `kubernetes.watch.Watch`, plus leases and events."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch

from nodeheal.sim.apiserver import (
    ClusterStore,
    FakeKubeApiServer,
    make_event,
    make_lease,
    make_node,
    make_pod,
)


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore(history_size=50)
    store.add(
        make_node("gpu-a", instance_id="i-0a"), make_node("gpu-b", instance_id="i-0b", node_pool="other")
    )
    with FakeKubeApiServer(store, bookmark_interval=0.2) as srv:
        yield srv


@pytest.fixture
def core(server: FakeKubeApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(server.api_client())


def background(fn: Callable[[], None]) -> tuple[threading.Thread, queue.Queue[BaseException]]:
    errors: queue.Queue[BaseException] = queue.Queue()

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test thread
            errors.put(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def wait_for_watch(server: FakeKubeApiServer) -> None:
    deadline = time.monotonic() + 5
    while server.faults.open_watches == 0:
        assert time.monotonic() < deadline, "watch never opened"
        time.sleep(0.01)


def test_initial_state_then_live_events(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    seen: list[tuple[str, str]] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(core.list_node, timeout_seconds=3):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                w.stop()

    thread, errors = background(consume)
    wait_for_watch(server)
    server.store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUHardwareError", "Xid 79")
    server.store.remove("nodes", "gpu-b")
    thread.join(5)
    assert errors.empty()
    assert seen == [("ADDED", "gpu-a"), ("ADDED", "gpu-b"), ("MODIFIED", "gpu-a"), ("DELETED", "gpu-b")]


def test_resume_from_resource_version_replays_history(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    listed = core.list_node()
    server.store.heartbeat("gpu-a")
    server.store.add(make_node("gpu-c", instance_id="i-0c"))
    events = list(
        watch.Watch().stream(
            core.list_node, resource_version=listed.metadata.resource_version, timeout_seconds=1
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("MODIFIED", "gpu-a"),
        ("ADDED", "gpu-c"),
    ]


def test_label_selector_turns_leaving_into_deleted(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    rv = core.list_node().metadata.resource_version
    core.patch_node("gpu-a", {"metadata": {"labels": {"karpenter.sh/nodepool": "moved"}}})
    core.patch_node("gpu-b", {"metadata": {"labels": {"karpenter.sh/nodepool": "gpu"}}})
    events = list(
        watch.Watch().stream(
            core.list_node, label_selector="karpenter.sh/nodepool=gpu", resource_version=rv, timeout_seconds=1
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("DELETED", "gpu-a"),
        ("ADDED", "gpu-b"),
    ]


def test_bookmarks_and_server_timeout(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    started = time.monotonic()
    resp = core.list_node(
        watch=True,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        resource_version=str(server.store.resource_version),
        _preload_content=False,
    )
    lines = [json.loads(line) for line in resp.read().decode().splitlines() if line]
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 3
    bookmarks = [e for e in lines if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 3
    assert bookmarks[-1]["object"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(server.store.resource_version), "creationTimestamp": None},
    }


def test_expired_resource_version_raises_410(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    old = core.list_node().metadata.resource_version
    server.store.heartbeat("gpu-a")
    server.store.compact()
    resp = core.list_node(watch=True, resource_version=old, timeout_seconds=1, _preload_content=False)
    first = json.loads(resp.read().decode().splitlines()[0])
    assert first["type"] == "ERROR"
    assert first["object"]["code"] == 410
    assert first["object"]["reason"] == "Expired"
    assert (
        first["object"]["message"]
        == f"too old resource version: {old} ({server.store.oldest_resource_version})"
    )
    # The client retries once on its own without a timeout, then gives up with 410.
    with pytest.raises(client.ApiException) as err:
        list(watch.Watch().stream(core.list_node, resource_version=old))
    assert err.value.status == 410


def test_history_is_bounded(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    old = core.list_node().metadata.resource_version
    for _ in range(60):
        server.store.heartbeat("gpu-a")
    with pytest.raises(client.ApiException) as err:
        list(watch.Watch().stream(core.list_node, resource_version=old, timeout_seconds=1))
    assert err.value.status == 410


def test_dropped_watch_surfaces_protocol_error(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    def consume() -> None:
        for _ in watch.Watch().stream(core.list_node, timeout_seconds=10):
            pass

    thread, errors = background(consume)
    wait_for_watch(server)
    assert server.faults.drop_watches() == 1
    thread.join(5)
    assert isinstance(errors.get(timeout=1), urllib3.exceptions.ProtocolError)


def test_injected_expiry_reaches_open_watch(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    def consume() -> None:
        for _ in watch.Watch().stream(core.list_node, timeout_seconds=10):
            pass

    thread, errors = background(consume)
    wait_for_watch(server)
    server.faults.expire_watches()
    thread.join(5)
    error: Any = errors.get(timeout=1)
    assert isinstance(error, client.ApiException)
    assert error.status == 410


def test_pod_watch_sees_graceful_deletion(core: client.CoreV1Api, server: FakeKubeApiServer) -> None:
    server.store.time_scale = 0.001
    server.store.add(make_pod("p", "train", "gpu-a"))
    rv = core.list_namespaced_pod("train").metadata.resource_version
    core.delete_namespaced_pod("p", "train")
    types: list[str] = []
    for event in watch.Watch().stream(
        core.list_namespaced_pod, "train", resource_version=rv, timeout_seconds=1
    ):
        types.append(event["type"])
        if event["type"] == "DELETED":
            break
    assert types == ["MODIFIED", "DELETED"]


def test_lease_lifecycle_and_conflict(server: FakeKubeApiServer) -> None:
    coord = client.CoordinationV1Api(server.api_client())
    lease = coord.create_namespaced_lease("nodeheal", make_lease("exporter", "nodeheal", holder="pod-a"))
    assert lease.spec.holder_identity == "pod-a"
    lease.spec.holder_identity = "pod-b"
    renewed = coord.replace_namespaced_lease("exporter", "nodeheal", lease)
    assert renewed.spec.holder_identity == "pod-b"
    lease.spec.holder_identity = "pod-c"
    with pytest.raises(client.ApiException) as err:
        coord.replace_namespaced_lease("exporter", "nodeheal", lease)
    assert err.value.status == 409
    patched = coord.patch_namespaced_lease("exporter", "nodeheal", {"spec": {"leaseDurationSeconds": 30}})
    assert patched.spec.lease_duration_seconds == 30
    coord.delete_namespaced_lease("exporter", "nodeheal")
    with pytest.raises(client.ApiException) as missing:
        coord.read_namespaced_lease("exporter", "nodeheal")
    assert json.loads(missing.value.body)["message"] == 'leases.coordination.k8s.io "exporter" not found'


def test_events_create_list_and_watch(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    node = server.store.get("nodes", "gpu-a")
    rv = core.list_event_for_all_namespaces().metadata.resource_version
    core.create_namespaced_event(
        "default", make_event("gpu-a.1", "default", involved=node, reason="XidError", message="Xid 79")
    )
    listed = core.list_event_for_all_namespaces(field_selector="involvedObject.name=gpu-a,reason=XidError")
    assert [e.reason for e in listed.items] == ["XidError"]
    events = list(
        watch.Watch().stream(core.list_event_for_all_namespaces, resource_version=rv, timeout_seconds=1)
    )
    assert [(e["type"], e["object"].message) for e in events] == [("ADDED", "Xid 79")]
