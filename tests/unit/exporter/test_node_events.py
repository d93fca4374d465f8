"""Events about Nodes, recorded through either Events API, shipped once per occurrence.

The exporter lists and watches core/v1 Events. A recurring Event is one object updated in place:
client-go's core recorder (``tools/record``, used by NPD and the kubelet) raises ``count`` and
``lastTimestamp``; its events.k8s.io recorder (``tools/events``) patches ``series`` alone, so in
core/v1 ``series.count`` rises while ``count`` stays unset (``Convert_v1_Event_To_core_Event`` in
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/events/v1/conversion.go, and
``recordToSink``/``createPatchBytesForSeries`` in k8s.io/client-go tools/events/event_broadcaster.go).
The integration tests write Events with the real ``kubernetes`` client through each API to the
fake API server, which serves both views of one store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from nodeheal.exporter.app import Exporter
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.node_events import NODE_EVENTS_PATH, NodeEventShipper
from nodeheal.exporter.queue import QueuedEvent
from nodeheal.kube.client import StaticClientProvider
from nodeheal.kube.event_writer import EventOperations
from nodeheal.kube_event_body import EventType, ObjectEvent, ObjectRef
from nodeheal.sim.apiserver import FakeKubeApiServer, make_event
from tests.unit.exporter.conftest import RecordingEvents, wait_for
from tests.unit.exporter.helpers import node

Start = Callable[..., tuple[Exporter, RecordingEvents]]
EVENTS = f"^{NODE_EVENTS_PATH}$"
DETAIL_TYPE = "Node Event Observed"
FIRST_SEEN = "2026-11-21T10:00:00.123456Z"


def observed(minutes: int) -> str:
    """A series' lastObservedTime (a MicroTime: six fractional digits)."""
    return f"2026-11-21T10:{minutes:02d}:00.123456Z"


def shipped(events: RecordingEvents, count: int) -> list[dict[str, Any]]:
    wait_for(lambda: len(events.details(DETAIL_TYPE)) >= count, what=f"{count} node events")
    return [d["event"] for d in events.details(DETAIL_TYPE)]


def start_watching(server: FakeKubeApiServer, running: Start) -> tuple[Exporter, RecordingEvents]:
    server.store.add(node("gpu-a", instance="i-0aaa1234567890aaa"))
    exporter, events = running(ship_node_events=True)
    server.faults.wait_for_watch(EVENTS)
    return exporter, events


def test_core_v1_recurrences_raise_count_and_each_is_shipped_once(
    server: FakeKubeApiServer, running: Start
) -> None:
    """The core recorder's recurrence is a patch of ``count`` and ``lastTimestamp``
    (``EventCorrelator`` and ``recordToSink`` in k8s.io/client-go tools/record): each new count is
    one occurrence, and a watch replay after a dropped connection ships nothing twice."""
    exporter, events = start_watching(server, running)
    core = client.CoreV1Api(server.api_client())
    gpu_a = server.store.get("nodes", "gpu-a")
    core.create_namespaced_event(
        "default", make_event("gpu-a.xid", "default", involved=gpu_a, reason="XidError", message="Xid 79")
    )
    for count, minute in ((2, 5), (3, 9)):
        core.patch_namespaced_event(
            "gpu-a.xid", "default", {"count": count, "lastTimestamp": f"2026-11-21T10:{minute:02d}:00Z"}
        )
    assert [e["count"] for e in shipped(events, 3)] == [1, 2, 3]
    opened = server.faults.watches_started(EVENTS)
    assert server.faults.drop_watches(path=EVENTS) == 1
    server.faults.wait_for_watch(EVENTS, started_after=opened)
    core.patch_namespaced_event("gpu-a.xid", "default", {"count": 4, "lastTimestamp": "2026-11-21T10:12:00Z"})
    final = shipped(events, 4)
    assert [(e["count"], e["lastTimestamp"]) for e in final] == [
        (1, final[0]["firstTimestamp"]),
        (2, "2026-11-21T10:05:00Z"),
        (3, "2026-11-21T10:09:00Z"),
        (4, "2026-11-21T10:12:00Z"),
    ]
    assert exporter.metrics.value("node_events_seen_total", outcome="shipped") == 4


def test_events_v1_recurrences_raise_the_series_and_each_is_shipped_once(
    server: FakeKubeApiServer, running: Start
) -> None:
    """Recorded through events.k8s.io/v1, the Event is created without ``count`` and each
    recurrence patches ``series`` only; the core/v1 watch sees MODIFIED with ``series.count``
    rising and ``count`` unchanged. Each rise is one occurrence. The recorder's periodic series
    heartbeat (``refreshExistingEventSeries``) rewrites ``lastObservedTime`` without a new count:
    no occurrence, so nothing is shipped; the next real one is."""
    exporter, events = start_watching(server, running)
    api = client.EventsV1Api(server.api_client())
    gpu_a = server.store.get("nodes", "gpu-a")
    api.create_namespaced_event(
        "default",
        client.EventsV1Event(
            metadata=client.V1ObjectMeta(name="gpu-a.xid", namespace="default"),
            event_time=datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC),
            reporting_controller="nodeheal.io/gpu-checker",
            reporting_instance="gpu-checker-gpu-a",
            action="CheckGPU",
            reason="GPUApplicationXid",
            regarding=client.V1ObjectReference(
                kind="Node", name="gpu-a", uid=gpu_a["metadata"]["uid"], api_version="v1"
            ),
            note="NVRM: Xid 13",
            type="Warning",
        ),
    )
    api.patch_namespaced_event(
        "gpu-a.xid", "default", {"series": {"count": 2, "lastObservedTime": observed(5)}}
    )
    api.patch_namespaced_event(
        "gpu-a.xid", "default", {"series": {"count": 3, "lastObservedTime": observed(9)}}
    )
    assert [e["count"] for e in shipped(events, 3)] == [1, 2, 3]
    # A heartbeat, then a fourth occurrence: the watch delivers them in order, so once the fourth
    # is shipped a shipped heartbeat would already be in the list.
    api.patch_namespaced_event(
        "gpu-a.xid", "default", {"series": {"count": 3, "lastObservedTime": observed(30)}}
    )
    api.patch_namespaced_event(
        "gpu-a.xid", "default", {"series": {"count": 4, "lastObservedTime": observed(33)}}
    )
    final = shipped(events, 4)
    assert [(e["count"], e["lastTimestamp"]) for e in final] == [
        (1, FIRST_SEEN),
        (2, observed(5)),
        (3, observed(9)),
        (4, observed(33)),
    ]
    assert {(e["message"], e["source"], e["firstTimestamp"]) for e in final} == {
        ("NVRM: Xid 13", "nodeheal.io/gpu-checker", FIRST_SEEN)
    }
    assert exporter.metrics.value("node_events_seen_total", outcome="duplicate") == 1


def test_either_counter_rising_is_a_new_occurrence() -> None:
    """The shipper's rule on its own: an Event is shipped when it is new or when its core
    ``count`` or its ``series.count`` rose past what was seen; the same counters again (a replay,
    a heartbeat) are not shipped, and a counter that falls back does not hide the other's rise."""
    shipped_items: list[QueuedEvent] = []
    shipper = NodeEventShipper("training-on-eks", shipped_items.extend, Metrics())
    shipper.begin_list()
    shipper.end_list()

    def event(count: int | None, series: int | None) -> Mapping[str, Any]:
        obj: dict[str, Any] = {
            "metadata": {"uid": "u-1", "name": "gpu-a.xid", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "gpu-a"},
            "type": "Warning",
            "reason": "XidError",
        }
        if count is not None:
            obj["count"] = count
        if series is not None:
            obj["series"] = {"count": series, "lastObservedTime": observed(series)}
        return obj

    steps = [
        (event(None, None), True),  # new, through events.k8s.io
        (event(None, None), False),  # replay
        (event(None, 2), True),  # series recurrence
        (event(None, 2), False),  # heartbeat
        (event(1, 3), True),  # series again
        (event(2, 3), True),  # a core-path recurrence of the same object
        (event(2, 2), False),  # neither counter above what was seen
    ]
    outcomes = []
    for obj, _ in steps:
        before = len(shipped_items)
        shipper.on_event("MODIFIED", obj)
        outcomes.append(len(shipped_items) > before)
    assert outcomes == [fresh for _, fresh in steps]


def _node_event(uid: str, controller: str) -> dict[str, Any]:
    """A core/v1 Event about a Node as an events.k8s.io/v1 write shows there."""
    return {
        "metadata": {"uid": uid, "name": f"gpu-a.{uid}", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "gpu-a"},
        "type": "Warning",
        "reason": "RemediationDecided",
        "reportingComponent": controller,
    }


def test_nodeheals_own_events_are_never_shipped_other_controllers_are() -> None:
    """D10: NodeHeal's story of a remediation is no degradation signal. Only its remediation's
    controller is dropped, not every controller under the nodeheal.io prefix."""
    shipped_items: list[QueuedEvent] = []
    metrics = Metrics()
    shipper = NodeEventShipper("training-on-eks", shipped_items.extend, metrics)
    shipper.begin_list()
    shipper.end_list()

    shipper.on_event("ADDED", _node_event("u-1", "nodeheal.io/remediation"))
    shipper.on_event("ADDED", _node_event("u-2", "nodeheal.io/gpu-checker"))

    assert [json.loads(item.detail)["event"]["uid"] for item in shipped_items] == ["u-2"]
    assert metrics.value("node_events_seen_total", outcome="nodeheal") == 1


def test_the_events_a_remediation_writes_are_watched_and_dropped(
    server: FakeKubeApiServer, running: Start
) -> None:
    """Through the real path: the workflow's adapter writes through events.k8s.io/v1, the exporter's
    core/v1 watch sees each write, drops NodeHeal's and ships the detector's that follows it."""
    exporter, events = start_watching(server, running)
    gpu_a = server.store.get("nodes", "gpu-a")
    node = ObjectRef.node("gpu-a", str(gpu_a["metadata"]["uid"]))
    at = datetime(2026, 11, 21, 10, 0, 1, tzinfo=UTC)
    adapter = EventOperations(StaticClientProvider(server.url).transport("sim"))
    adapter.record(
        [
            ObjectEvent(
                node, EventType.WARNING, "RemediationDecided", "Decide", "replace", "exec-1", "admit", at
            ),
            ObjectEvent(
                node, EventType.WARNING, "DrainTimedOut", "Drain", "timed out", "exec-1", "drain", at
            ),
        ]
    )
    assert adapter.tally.written == 2
    core = client.CoreV1Api(server.api_client())
    core.create_namespaced_event(
        "default", make_event("gpu-a.xid", "default", involved=gpu_a, reason="XidError", message="Xid 79")
    )

    assert [e["reason"] for e in shipped(events, 1)] == ["XidError"]
    wait_for(
        lambda: exporter.metrics.value("node_events_seen_total", outcome="nodeheal") == 2,
        what="both of NodeHeal's Events seen and dropped",
    )
    assert [e["reason"] for e in shipped(events, 1)] == ["XidError"]
