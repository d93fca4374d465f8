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
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from nodeheal.exporter.app import Exporter
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.node_events import NODE_EVENTS_PATH, NodeEventShipper, attributed_node
from nodeheal.exporter.queue import QueuedEvent
from nodeheal.exporter.transitions import CachedNode
from nodeheal.kube.client import StaticClientProvider
from nodeheal.kube.event_writer import EventOperations
from nodeheal.kube_event_body import EventType, ObjectEvent, ObjectRef
from nodeheal.sim.apiserver import FakeKubeApiServer, make_event
from nodeheal.timestamps import format_timestamp, parse_timestamp
from tests.unit.exporter.conftest import RecordingEvents, wait_for
from tests.unit.exporter.helpers import node

Start = Callable[..., tuple[Exporter, RecordingEvents]]
EVENTS = f"^{NODE_EVENTS_PATH}$"
DETAIL_TYPE = "Node Event Observed"
FIRST_SEEN = "2026-11-21T10:00:00.123456Z"


def no_nodes(name: str) -> CachedNode | None:
    """A Node cache that knows no Node: every Event ships without an instance."""
    return None


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
    shipper = NodeEventShipper("training-on-eks", shipped_items.extend, Metrics(), no_nodes)
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
    shipper = NodeEventShipper("training-on-eks", shipped_items.extend, metrics, no_nodes)
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


# -- which instance an Event counts for (D10) -------------------------------------------------

NODE_UID = "5f0c1f3e-8a51-4a8e-9d59-3f6a0e1e2b7c"
CACHED = CachedNode(
    name="gpu-a",
    uid=NODE_UID,
    created=datetime(2026, 11, 21, 9, 0, tzinfo=UTC),
    instance_id="i-0aaa1234567890aaa",
    boot_id="b-1",
)


def about(uid: str | None, *, first: str | None = None, event_time: str | None = None) -> dict[str, Any]:
    involved: dict[str, Any] = {"kind": "Node", "name": "gpu-a", "apiVersion": "v1"}
    if uid is not None:
        involved["uid"] = uid
    event: dict[str, Any] = {"involvedObject": involved}
    if first is not None:
        event["firstTimestamp"] = first
    if event_time is not None:
        event["eventTime"] = event_time
    return event


ATTRIBUTION = [
    # NPD master (c1d461ff): the real uid. It decides, whatever the timestamps say.
    ("the cached Node's uid", about(NODE_UID, first="2026-11-21T08:00:00Z"), True),
    (
        "another Node's uid",
        about("0d7c0000-0000-0000-0000-000000000000", first="2026-11-21T10:00:00Z"),
        False,
    ),
    # NPD v1.35 to v1.37.0-alpha.1: no uid; the Event must be newer than the Node object.
    ("no uid, newer than the Node", about(None, first="2026-11-21T10:00:00Z"), True),
    # Both are whole seconds: an Event of the old Node in the second the new one was created
    # would count on the new instance (seed 723 of the seeded simulation), so it counts for none.
    ("no uid, same second as the Node", about("", first="2026-11-21T09:00:00Z"), False),
    ("no uid, a second after the Node", about("", first="2026-11-21T09:00:01Z"), True),
    ("no uid, older than the Node", about("", first="2026-11-21T08:59:59Z"), False),
    # NPD v1.34 and older: the node's name as uid, which is no uid.
    ("the name as uid, newer", about("gpu-a", first="2026-11-21T10:00:00Z"), True),
    ("the name as uid, older", about("gpu-a", first="2026-11-21T08:00:00Z"), False),
    # events.k8s.io writes eventTime (a MicroTime) and no firstTimestamp.
    ("no uid, eventTime newer", about(None, event_time="2026-11-21T09:00:00.000001Z"), True),
    ("no uid, eventTime older", about(None, event_time="2026-11-21T08:59:59.999999Z"), False),
    ("no uid and no time", about(None), False),
    ("no uid, unreadable time", about(None, first="yesterday"), False),
]


@pytest.mark.parametrize(
    ("event", "attributed"), [(e, a) for _, e, a in ATTRIBUTION], ids=[i for i, _, _ in ATTRIBUTION]
)
def test_an_event_counts_for_the_cached_node_only_when_it_is_about_that_node_object(
    event: dict[str, Any], attributed: bool
) -> None:
    assert attributed_node(event, CACHED) == (CACHED if attributed else None)


def test_no_cached_node_or_no_creation_time_attributes_nothing() -> None:
    newer = about(None, first="2026-11-21T10:00:00Z")
    assert attributed_node(newer, None) is None
    assert attributed_node(newer, CachedNode("gpu-a", NODE_UID, None, "i-0aaa1234567890aaa", "b-1")) is None
    # A usable uid needs no creation time.
    matching = about(NODE_UID)
    assert attributed_node(matching, CachedNode("gpu-a", NODE_UID, None, "i-0aaa1234567890aaa", "b-1"))


def test_the_detail_names_the_instance_and_boot_only_when_attributed() -> None:
    items: list[QueuedEvent] = []
    nodes = {"gpu-a": CACHED}
    shipper = NodeEventShipper("training-on-eks", items.extend, Metrics(), nodes.get)
    shipper.begin_list()
    shipper.end_list()
    base = {"type": "Warning", "reason": "GPUInformationalXid", "message": "NVRM: Xid (PCI:0000:53:00): 92"}
    shipper.on_event("ADDED", {**about(NODE_UID), **base, "metadata": {"uid": "e-1"}})
    shipper.on_event(
        "ADDED", {**about("0d7c0000-0000-0000-0000-000000000000"), **base, "metadata": {"uid": "e-2"}}
    )
    shipper.on_event(
        "ADDED", {**about(None, first="2026-11-21T08:00:00Z"), **base, "metadata": {"uid": "e-3"}}
    )
    details = [json.loads(item.detail) for item in items]
    assert [d["node"] for d in details] == [
        {"name": "gpu-a", "uid": NODE_UID, "instanceID": "i-0aaa1234567890aaa", "bootID": "b-1"},
        {"name": "gpu-a", "uid": "0d7c0000-0000-0000-0000-000000000000", "instanceID": "", "bootID": ""},
        {"name": "gpu-a", "uid": "", "instanceID": "", "bootID": ""},
    ]
    assert [(item.node_event, item.healthy_direction) for item in items] == [(True, False)] * 3


def test_an_event_about_an_earlier_node_of_the_same_name_counts_for_no_instance(
    server: FakeKubeApiServer, running: Start
) -> None:
    """Through the real path: the Node gpu-a is replaced by another instance under the same name
    (EC2 reuses private IPs). An Event carrying the old Node's uid (NPD resolves the uid once, so
    one that kept running sends it until restarted) gets no instance; one with no uid, written
    after the new Node was created, gets the new instance and its boot; a reboot's new bootID is
    seen although no condition changed."""
    exporter, events = start_watching(server, running)
    core = client.CoreV1Api(server.api_client())
    old = server.store.get("nodes", "gpu-a")
    core.create_namespaced_event(
        "default", make_event("gpu-a.1", "default", involved=old, reason="GPUInformationalXid", message="92")
    )
    (first,) = [d["node"] for d in (shipped_details(events, 1))]
    assert first == {
        "name": "gpu-a",
        "uid": old["metadata"]["uid"],
        "instanceID": "i-0aaa1234567890aaa",
        "bootID": old["status"]["nodeInfo"]["bootID"],
    }

    server.store.delete("nodes", "gpu-a")
    new = server.store.add(node("gpu-a", instance="i-0bbb1234567890bbb"))[0]
    wait_for(
        lambda: (exporter.pipeline.cached_node("gpu-a") or CACHED).uid == new["metadata"]["uid"],
        what="the new Node cached",
    )
    core.create_namespaced_event(
        "default", make_event("gpu-a.2", "default", involved=old, reason="GPUInformationalXid", message="92")
    )
    no_uid = {"kind": "Node", "name": "gpu-a", "apiVersion": "v1"}
    earlier = make_event("gpu-a.3", "default", involved=no_uid, reason="GPUInformationalXid", message="92")
    earlier["firstTimestamp"] = "2020-01-01T00:00:00Z"
    core.create_namespaced_event("default", earlier)
    server.store.reboot_node("gpu-a")
    rebooted = server.store.get("nodes", "gpu-a")["status"]["nodeInfo"]["bootID"]
    wait_for(
        lambda: (exporter.pipeline.cached_node("gpu-a") or CACHED).boot_id == rebooted, what="the reboot seen"
    )
    # Written a second after the new Node's creation (both whole seconds: the same second proves
    # nothing, D10).
    later_event = make_event(
        "gpu-a.4", "default", involved=no_uid, reason="GPUInformationalXid", message="92"
    )
    created = parse_timestamp(new["metadata"]["creationTimestamp"], "creationTimestamp")
    later_event["firstTimestamp"] = format_timestamp(created + timedelta(seconds=1))
    core.create_namespaced_event("default", later_event)
    later = [d["node"] for d in shipped_details(events, 4)[1:]]
    assert later == [
        {"name": "gpu-a", "uid": old["metadata"]["uid"], "instanceID": "", "bootID": ""},
        {"name": "gpu-a", "uid": "", "instanceID": "", "bootID": ""},
        # Attributed: the detail names the Node it proved, uid included (the Event carried none).
        {
            "name": "gpu-a",
            "uid": server.store.get("nodes", "gpu-a")["metadata"]["uid"],
            "instanceID": "i-0bbb1234567890bbb",
            "bootID": rebooted,
        },
    ]
    assert exporter.metrics.value("node_events_unattributed_total") == 2


def shipped_details(events: RecordingEvents, count: int) -> list[dict[str, Any]]:
    wait_for(lambda: len(events.details(DETAIL_TYPE)) >= count, what=f"{count} node events")
    return events.details(DETAIL_TYPE)
