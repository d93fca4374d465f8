"""The exporter against the fake API server: scripted cluster changes and watch faults, asserting
the exact events that reach EventBridge."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

from nodeheal.exporter.app import Exporter
from nodeheal.sim.apiserver import FakeKubeApiServer, make_event
from tests.unit.exporter.conftest import RecordingEvents, brief, wait_for
from tests.unit.exporter.helpers import node, with_condition

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731, name=python3, GPU has fallen off the bus."
Start = Callable[..., tuple[Exporter, RecordingEvents]]


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
    # The first event is published right after the list, before the watch may be open.
    wait_for(lambda: server.faults.open_watches >= 1, what="the exporter's watch to open")
    assert server.faults.drop_watches() >= 1
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
    # The first event is published right after the list, before the watch may be open.
    wait_for(lambda: server.faults.open_watches >= 1, what="the exporter's watch to open")
    assert server.faults.expire_watches() >= 1
    # The relist re-emits what is still bad, with the earlier view as previous.
    assert published(events, 2) == [
        ("gpu-b", "GPUProblem", "True", "GPUHardwareError", None, True),
        ("gpu-b", "GPUProblem", "True", "GPUHardwareError", ("True", "GPUHardwareError"), True),
    ]
    assert exporter.metrics.total("relists_total") == 2
    assert exporter.metrics.value("watch_restarts_total", watcher="nodes", reason="gone") == 1


def test_compacted_history_while_disconnected_relists_without_losing_changes(
    server: FakeKubeApiServer, running: Start
) -> None:
    seed(server)
    exporter, events = running()
    published(events, 1)
    store = server.store
    server.faults.fail_for(0.5, status=503, path="/api/v1/nodes")
    # The first event is published right after the list, before the watch may be open.
    wait_for(lambda: server.faults.open_watches >= 1, what="the exporter's watch to open")
    server.faults.drop_watches()
    # While the exporter cannot reach the server: gpu-a breaks, gpu-b recovers, gpu-c is deleted,
    # and the history is compacted so the old resourceVersion is gone.
    store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUsAreDown", "nvidia-smi failed")
    store.set_node_condition("gpu-b", "GPUProblem", "False", "GPUHealthy")
    store.remove("nodes", "gpu-c")
    store.compact()
    assert sorted(published(events, 3)[1:]) == [
        ("gpu-a", "GPUProblem", "True", "GPUsAreDown", ("False", "GPUHealthy"), True),
        ("gpu-b", "GPUProblem", "False", "GPUHealthy", ("True", "GPUHardwareError"), False),
    ]
    assert exporter.metrics.total("relists_total") == 2
    assert len(exporter.tracker) == 2


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
    assert exporter.run_forever() == 1
    assert exporter.failed


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
    # The first event is published right after the list, before the watch may be open.
    wait_for(lambda: server.faults.open_watches >= 1, what="the exporter's watch to open")
    server.faults.drop_watches()  # a replay after reconnect must not duplicate
    wait_for(lambda: len(events.details("Node Event Observed")) >= 2, what="node events")
    shipped = events.details("Node Event Observed")
    assert [(d["node"]["name"], d["event"]["reason"], d["event"]["count"]) for d in shipped] == [
        ("gpu-a", "GPUApplicationXid", 1),
        ("gpu-a", "GPUApplicationXid", 2),
    ]
    assert shipped[0]["event"]["uid"] == event["metadata"]["uid"]
