"""The exporter against the fake API server: scripted cluster changes and watch faults, asserting
the exact events that reach EventBridge.

A fault aimed at the exporter's watch is injected only once the fake reports that watch open
(``faults.wait_for_watch``): the first event is published right after the list, before the
watch may be open, so waiting for the event alone would race the watch's start.
"""

from __future__ import annotations

import json
import logging
import signal
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from nodeheal.exporter.app import Exporter
from nodeheal.exporter.node_events import NODE_EVENTS_PATH
from nodeheal.rbac import EXPORTER_ROLES
from nodeheal.sim.apiserver import FakeKubeApiServer, make_event
from nodeheal.sim.apiserver.authorizer import RoleBinding, exporter_user, nodeheal_authorizer
from tests.unit.exporter.conftest import RecordingEvents, brief, exporter_settings, wait_for
from tests.unit.exporter.helpers import node, with_condition

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731, name=python3, GPU has fallen off the bus."
Start = Callable[..., tuple[Exporter, RecordingEvents]]
NODES = "^/api/v1/nodes$"
EVENTS = f"^{NODE_EVENTS_PATH}$"


def seed(server: FakeKubeApiServer) -> None:
    server.store.add(
        node("gpu-a", instance="i-0aaa1234567890aaa"),
        with_condition(
            node("gpu-b", instance="i-0bbb1234567890bbb"), "GPUProblem", "True", "GPUHardwareError", XID79
        ),
        node("gpu-c", instance="i-0ccc1234567890ccc"),
    )


def published(events: RecordingEvents, count: int) -> list[tuple[Any, ...]]:
    wait_for(lambda: len(events.details()) >= count, what=f"{count} published events")
    return [brief(d) for d in events.details()]


def test_list_watch_emits_exactly_the_transitions(server: FakeKubeApiServer, running: Start) -> None:
    seed(server)
    exporter, events = running()
    assert published(events, 1) == [
        ("gpu-b", "GPUProblem", "True", "GPUHardwareError", None, True),
    ]
    store = server.store
    store.heartbeat("gpu-a")  # MODIFIED with only lastHeartbeatTime: nothing
    store.set_node_condition(
        "gpu-a", "GPUProblem", "True", "NVLinkError", "NVRM: Xid (PCI:0000:3b:00): 74, NVLink"
    )
    store.add(node("gpu-d", instance="i-0ddd1234567890ddd"))  # ADDED healthy: nothing
    store.set_node_condition("gpu-b", "MemoryPressure", "True", "KubeletHasInsufficientMemory")  # not watched
    store.remove("nodes", "gpu-b")  # DELETED while bad: nothing
    store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "all GPUs are healthy")
    assert published(events, 3) == [
        ("gpu-b", "GPUProblem", "True", "GPUHardwareError", None, True),
        ("gpu-a", "GPUProblem", "True", "NVLinkError", ("False", "GPUHealthy"), False),
        ("gpu-a", "GPUProblem", "False", "GPUHealthy", ("True", "NVLinkError"), False),
    ]
    first = events.details()[0]
    assert first["cluster"] == "training-on-eks"
    assert first["condition"]["message"] == XID79
    assert (first["node"]["instanceID"], first["node"]["nodePool"], first["node"]["instanceType"]) == (
        "i-0bbb1234567890bbb",
        "gpu",
        "p5.48xlarge",
    )
    assert (
        events.entries[0]["Source"] == "nodeheal.exporter.training-on-eks"
        and events.entries[0]["EventBusName"] == "nodeheal"
    )
    assert exporter.metrics.total("relists_total") == 1
    assert exporter.metrics.value("node_updates_total", watcher="nodes") >= 3 + 6


def test_bookmarks_advance_the_version_and_a_dropped_connection_resumes(
    server: FakeKubeApiServer, running: Start
) -> None:
    seed(server)
    exporter, events = running()
    published(events, 1)
    store = server.store
    store.set_node_condition("gpu-c", "ReadonlyFilesystem", "True", "FilesystemIsReadOnly")
    published(events, 2)
    # Unrelated churn the Node watch does not carry (a Lease) moves the store's version; only a
    # BOOKMARK tells the watcher about it.
    from nodeheal.sim.apiserver import make_lease

    store.add(make_lease("other", "kube-system", holder="someone"))
    target = str(store.resource_version)
    wait_for(lambda: exporter.node_watcher.resource_version == target, what="a bookmark")
    server.faults.wait_for_watch(NODES)
    assert server.faults.drop_watches(path=NODES) == 1
    store.set_node_condition("gpu-c", "ReadonlyFilesystem", "False", "FilesystemIsNotReadOnly")
    assert published(events, 3)[1:] == [
        (
            "gpu-c",
            "ReadonlyFilesystem",
            "True",
            "FilesystemIsReadOnly",
            ("False", "FilesystemIsNotReadOnly"),
            False,
        ),
        (
            "gpu-c",
            "ReadonlyFilesystem",
            "False",
            "FilesystemIsNotReadOnly",
            ("True", "FilesystemIsReadOnly"),
            False,
        ),
    ]
    assert exporter.metrics.value("watch_restarts_total", watcher="nodes", reason="connection") >= 1
    assert exporter.metrics.total("relists_total") == 1  # resumed, not relisted


def test_error_410_mid_stream_relists_and_resyncs(server: FakeKubeApiServer, running: Start) -> None:
    seed(server)
    exporter, events = running()
    published(events, 1)
    server.faults.wait_for_watch(NODES)
    assert server.faults.expire_watches(path=NODES) == 1
    # The relist re-emits what is still bad, with the earlier view as previous.
    assert published(events, 2) == [
        ("gpu-b", "GPUProblem", "True", "GPUHardwareError", None, True),
        ("gpu-b", "GPUProblem", "True", "GPUHardwareError", ("True", "GPUHardwareError"), True),
    ]
    assert exporter.metrics.total("relists_total") == 2
    assert exporter.metrics.value("watch_restarts_total", watcher="nodes", reason="gone") == 1


def test_history_gone_while_disconnected_relists_without_losing_changes(
    server: FakeKubeApiServer, running: Start
) -> None:
    """An apiserver restart: the connection drops, requests fail for a while, and the restarted
    watch cache starts at the current revision (``watchCache.Replace``), so the exporter's
    resourceVersion is 410 when it reconnects and it must relist."""
    seed(server)
    exporter, events = running()
    published(events, 1)
    store = server.store
    server.faults.wait_for_watch(NODES)
    server.faults.fail_for(0.5, status=503, path="/api/v1/nodes")
    server.faults.drop_watches()
    # While the exporter cannot reach the server: gpu-a breaks, gpu-b recovers, gpu-c is deleted,
    # and the restarted server no longer holds the old resourceVersion.
    store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUsAreDown", "nvidia-smi failed")
    store.set_node_condition("gpu-b", "GPUProblem", "False", "GPUHealthy")
    store.remove("nodes", "gpu-c")
    store.restart_watch_caches()
    assert sorted(published(events, 3)[1:]) == [
        ("gpu-a", "GPUProblem", "True", "GPUsAreDown", ("False", "GPUHealthy"), True),
        ("gpu-b", "GPUProblem", "False", "GPUHealthy", ("True", "GPUHardwareError"), False),
    ]
    assert exporter.metrics.total("relists_total") == 2
    # The relist forgets gpu-c when it ends (end_relist), after it has published what changed.
    wait_for(lambda: len(exporter.tracker) == 2, what="the deleted node forgotten by the relist")


@pytest.mark.slow  # waits on a real timeout: `make test` runs it, `make check` does not
def test_server_timeout_ends_streams_and_the_watch_resumes(server: FakeKubeApiServer, running: Start) -> None:
    seed(server)
    exporter, events = running(watch_timeout_seconds=1)
    published(events, 1)
    wait_for(
        lambda: exporter.metrics.value("watch_restarts_total", watcher="nodes", reason="stream-ended") >= 2,
        what="two server-side timeouts",
    )
    server.store.set_node_condition("gpu-a", "KernelDeadlock", "True", "DockerHung")
    assert published(events, 2)[1] == (
        "gpu-a",
        "KernelDeadlock",
        "True",
        "DockerHung",
        ("False", "KernelHasNoDeadlock"),
        False,
    )
    assert exporter.metrics.total("relists_total") == 1


def test_list_errors_back_off_and_readiness_waits_for_the_first_list(
    server: FakeKubeApiServer, running: Start
) -> None:
    seed(server)
    server.faults.fail_next(3, status=500, method="GET", path="^/api/v1/nodes$")
    exporter, events = running(serve_http=True)
    assert exporter.http is not None
    base = f"http://127.0.0.1:{exporter.http.port}"
    published(events, 1)
    assert exporter.metrics.value("watch_restarts_total", watcher="nodes", reason="http-500") == 3
    with urllib.request.urlopen(f"{base}/readyz") as response:
        assert json.loads(response.read())["ok"] is True
    with urllib.request.urlopen(f"{base}/healthz") as response:
        assert json.loads(response.read()) == {"ok": True, "detail": "ok"}
    with urllib.request.urlopen(f"{base}/metrics") as response:
        text = response.read().decode()
    assert 'nodeheal_exporter_events_published_total{detail_type="Node Condition Changed"} 1' in text
    assert "nodeheal_exporter_last_api_contact_timestamp_seconds " in text


def test_process_exits_non_zero_when_the_watcher_dies(server: FakeKubeApiServer) -> None:
    from tests.unit.exporter.conftest import exporter_settings

    seed(server)
    exporter = Exporter(exporter_settings(), server.api_client(), RecordingEvents())

    def broken(items: Any) -> None:
        raise RuntimeError("a bug in the handler")

    exporter.pipeline.list_page = broken  # type: ignore[method-assign]
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    assert exporter.run_forever() == 1
    assert exporter.failed
    # The process's own handlers are back: a later SIGINT is not swallowed by a stopped exporter.
    assert {signum: signal.getsignal(signum) for signum in before} == before


def test_node_events_are_shipped_once_per_occurrence(server: FakeKubeApiServer, running: Start) -> None:
    seed(server)
    gpu_a = server.store.get("nodes", "gpu-a")
    server.store.add(
        make_event("old.1", "default", involved=gpu_a, reason="GPUApplicationXid", message="history")
    )
    exporter, events = running(ship_node_events=True)
    published(events, 1)
    wait_for(
        lambda: exporter.metrics.value("node_events_seen_total", outcome="history") == 1, what="event list"
    )
    event = server.store.add(
        make_event("xid.1", "default", involved=gpu_a, reason="GPUApplicationXid", message="NVRM: Xid 13")
    )[0]
    server.store.add(
        make_event("pod.1", "default", involved=gpu_a, reason="Started", message="x", event_type="Normal")
    )

    def bump(obj: dict[str, Any]) -> None:
        obj["count"] = 2

    server.store.mutate("events", "xid.1", bump, namespace="default")
    server.faults.wait_for_watch(EVENTS)
    server.faults.drop_watches()  # a replay after reconnect must not duplicate
    wait_for(lambda: len(events.details("Node Event Observed")) >= 2, what="node events")
    shipped = events.details("Node Event Observed")
    assert [(d["node"]["name"], d["event"]["reason"], d["event"]["count"]) for d in shipped] == [
        ("gpu-a", "GPUApplicationXid", 1),
        ("gpu-a", "GPUApplicationXid", 2),
    ]
    assert shipped[0]["event"]["uid"] == event["metadata"]["uid"]


def test_list_snapshot_expired_mid_list_starts_over_and_announces_once(
    server: FakeKubeApiServer, running: Start
) -> None:
    """The pages of a list after the first are read at its first page's revision; etcd compacts
    that revision after 5 to 10 minutes and the next page is then 410 with a fresh token
    (``handleCompactedErrorForPaging`` in k8s.io/apiserver pkg/storage/etcd3/errors.go). The
    exporter lists again from the start rather than mix two moments, and what the first attempt
    already announced is not announced twice."""
    seed(server)
    store = server.store

    def break_then_compact() -> None:
        store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUsAreDown", "nvidia-smi failed")
        store.compact()

    # Page 1 (gpu-a, healthy) is served; before page 2, gpu-a breaks and etcd compacts.
    server.faults.call_before(break_then_compact, skip=1, method="GET", path=NODES)
    exporter, events = running(list_page_size=1)
    assert published(events, 2) == [
        ("gpu-a", "GPUProblem", "True", "GPUsAreDown", ("False", "GPUHealthy"), False),
        ("gpu-b", "GPUProblem", "True", "GPUHardwareError", None, True),
    ]
    server.faults.wait_for_watch(NODES)
    # Page 1, the expired page 2, then pages 1 to 3 again; the watch starts at the new list's version.
    assert server.faults.served("GET", NODES) == 5
    assert exporter.node_watcher.resource_version == str(store.resource_version)
    assert exporter.metrics.total("relists_total") == 2
    store.set_node_condition("gpu-c", "KernelDeadlock", "True", "DockerHung")
    assert published(events, 3)[2] == (
        "gpu-c",
        "KernelDeadlock",
        "True",
        "DockerHung",
        ("False", "KernelHasNoDeadlock"),
        False,
    )
    assert len(events.details()) == 3


@pytest.mark.parametrize("status", [500, 429, 403])
def test_error_event_other_than_410_resumes_the_watch_without_relisting(
    server: FakeKubeApiServer, running: Start, status: int
) -> None:
    """An etcd failure under a watch arrives as an ERROR event with a 500 InternalError Status
    (``transformErrorToEvent`` in k8s.io/apiserver pkg/storage/etcd3/watcher.go); whatever Status
    an ERROR event carries other than 410 Expired, only that stream ended. The version the
    exporter holds is still good: it resumes from it, and nothing in between is lost."""
    seed(server)
    exporter, events = running()
    published(events, 1)
    server.faults.wait_for_watch(NODES)
    started = server.faults.watches_started(NODES)
    assert server.faults.error_watches(status, path=NODES) == 1
    server.store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUsAreDown", "nvidia-smi failed")
    assert published(events, 2)[1] == (
        "gpu-a",
        "GPUProblem",
        "True",
        "GPUsAreDown",
        ("False", "GPUHealthy"),
        False,
    )
    server.faults.wait_for_watch(NODES, started_after=started)
    assert exporter.metrics.value("watch_restarts_total", watcher="nodes", reason="error-event") == 1
    assert exporter.metrics.total("relists_total") == 1


def test_throttled_reconnect_waits_as_long_as_retry_after_says(
    server: FakeKubeApiServer, running: Start
) -> None:
    """API Priority and Fairness rejects with 429 and Retry-After (``tooManyRequests`` in
    k8s.io/apiserver pkg/server/filters/priority-and-fairness.go). The exporter's client (the
    ``kubernetes`` package's urllib3 pool, ``Retry.respect_retry_after_header``) waits as asked
    and sends the watch again; the exporter's own backoff (50 to 200 ms here) is not what paces
    it, and the watch resumes without a relist."""
    seed(server)
    exporter, events = running()
    published(events, 1)
    server.faults.wait_for_watch(NODES)
    started = server.faults.watches_started(NODES)
    arrivals: list[float] = []
    server.faults.throttle_next(1, retry_after=1, method="GET", path=NODES)
    server.faults.call_before(lambda: arrivals.append(time.monotonic()), count=2, method="GET", path=NODES)
    server.faults.drop_watches(path=NODES)
    server.faults.wait_for_watch(NODES, started_after=started)
    assert len(arrivals) == 2 and arrivals[1] - arrivals[0] >= 1.0
    server.store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUsAreDown", "nvidia-smi failed")
    assert published(events, 2)[1][:4] == ("gpu-a", "GPUProblem", "True", "GPUsAreDown")
    assert exporter.metrics.value("watch_restarts_total", watcher="nodes", reason="connection") == 1
    assert exporter.metrics.total("relists_total") == 1


def test_watch_refused_after_an_rbac_change_retries_then_resumes(caplog: pytest.LogCaptureFixture) -> None:
    """RBAC is checked per request (``WithAuthorization`` in k8s.io/apiserver
    pkg/endpoints/filters/authorization.go): after the exporter's ClusterRoleBinding is deleted,
    its reconnect is 403. It keeps retrying, logs an error a person can act on, and once the
    binding is back resumes from the version it held, losing nothing that happened meanwhile."""
    authorizer = nodeheal_authorizer()
    user = exporter_user()
    with FakeKubeApiServer(authorizer=authorizer, bookmark_interval=0.2) as server:
        seed(server)
        events = RecordingEvents()
        exporter = Exporter(exporter_settings(), server.api_client(authorizer.token_for(user)), events)
        exporter.start(serve_http=False)
        try:
            published(events, 1)
            server.faults.wait_for_watch(NODES)
            (role,) = [r for r in EXPORTER_ROLES if r.name == "nodeheal-exporter"]
            assert authorizer.unbind(role.name) == 1
            server.faults.drop_watches(path=NODES)
            wait_for(
                lambda: exporter.metrics.value("watch_restarts_total", watcher="nodes", reason="http-403")
                >= 2,
                what="refused reconnects",
            )
            server.store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUsAreDown", "nvidia-smi failed")
            authorizer.bind(RoleBinding(role.name, role.rules, users=(user.name,)))
            assert published(events, 2)[1] == (
                "gpu-a",
                "GPUProblem",
                "True",
                "GPUsAreDown",
                ("False", "GPUHealthy"),
                False,
            )
            assert exporter.metrics.total("relists_total") == 1
            refused = [r for r in caplog.records if "check the exporter's RBAC" in r.getMessage()]
            assert refused and all(r.levelno == logging.ERROR for r in refused)
        finally:
            exporter.stop()
