from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from nodeheal.events import NodeConditionEvent, node_identity
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.exporter.transitions import TransitionTracker
from tests.unit.exporter.helpers import heartbeat, node, with_condition

NOW = datetime(2026, 11, 21, 10, 0, 1, 234000, tzinfo=UTC)
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731, GPU has fallen off the bus."


def tracker(**settings: object) -> TransitionTracker:
    config = ExporterSettings(cluster_name="training-on-eks", **settings)  # type: ignore[arg-type]
    return TransitionTracker("training-on-eks", config.watches, clock=lambda: NOW)


def keys(events: list[NodeConditionEvent]) -> list[tuple[object, ...]]:
    return [
        (
            e.node.name,
            e.condition.type,
            e.condition.status,
            e.condition.reason,
            None if e.previous is None else (e.previous.status, e.previous.reason),
            e.resync,
        )
        for e in events
    ]


def test_first_list_emits_only_bad_conditions_with_resync_and_no_previous() -> None:
    t = tracker()
    healthy = node("ip-10-0-1-1")
    broken = with_condition(node("ip-10-0-1-2"), "GPUProblem", "True", "GPUHardwareError", XID79)
    t.begin_relist()
    events = t.relist_page([healthy, broken])
    t.end_relist()
    assert keys(events) == [("ip-10-0-1-2", "GPUProblem", "True", "GPUHardwareError", None, True)]
    assert events[0].condition.message == XID79


def test_heartbeat_only_updates_emit_nothing() -> None:
    t = tracker()
    obj = node("ip-10-0-1-1")
    t.relist_page([obj])
    assert t.observe(heartbeat(obj)) == []
    relabelled = heartbeat(obj)
    relabelled["metadata"]["labels"]["team"] = "vision"
    relabelled["metadata"]["resourceVersion"] = "999"
    assert t.observe(relabelled) == []


def test_status_or_reason_change_emits_with_previous() -> None:
    t = tracker()
    obj = node("ip-10-0-1-1")
    t.relist_page([obj])
    bad = with_condition(obj, "GPUProblem", "True", "GPUHardwareError", XID79)
    assert keys(t.observe(bad)) == [
        ("ip-10-0-1-1", "GPUProblem", "True", "GPUHardwareError", ("False", "GPUHealthy"), False)
    ]
    worse = with_condition(bad, "GPUProblem", "True", "NVLinkError")
    assert keys(t.observe(worse)) == [
        ("ip-10-0-1-1", "GPUProblem", "True", "NVLinkError", ("True", "GPUHardwareError"), False)
    ]
    healed = with_condition(worse, "GPUProblem", "False", "GPUHealthy")
    assert keys(t.observe(healed)) == [
        ("ip-10-0-1-1", "GPUProblem", "False", "GPUHealthy", ("True", "NVLinkError"), False)
    ]
    assert t.observe(heartbeat(healed)) == []


def test_pressure_conditions_are_skipped_by_default_and_lists_restrict() -> None:
    t = tracker()
    obj = node("ip-10-0-1-1")
    t.relist_page([obj])
    assert t.observe(with_condition(obj, "MemoryPressure", "True", "KubeletHasInsufficientMemory")) == []
    only_gpu = tracker(condition_types=("GPUProblem",))
    only_gpu.relist_page([obj])
    assert only_gpu.observe(with_condition(obj, "Ready", "False", "KubeletNotReady")) == []
    assert len(only_gpu.observe(with_condition(obj, "GPUProblem", "True", "GPUHardwareError"))) == 1


def test_node_monitoring_agent_positive_condition_false_is_bad() -> None:
    t = tracker()
    obj = with_condition(
        node("ip-10-0-1-1"), "AcceleratedHardwareReady", "True", "NvidiaAcceleratedHardwareIsReady"
    )
    t.relist_page([obj])
    events = t.observe(with_condition(obj, "AcceleratedHardwareReady", "False", "NvidiaXID79Error"))
    assert [(e.condition.type, e.is_bad) for e in events] == [("AcceleratedHardwareReady", True)]


def test_new_node_emits_only_if_bad_and_new_condition_type_only_if_bad() -> None:
    t = tracker()
    t.relist_page([])
    assert t.observe(node("ip-10-0-1-3")) == []
    joined_broken = with_condition(node("ip-10-0-1-4"), "GPUProblem", "True", "GPUsAreDown")
    assert keys(t.observe(joined_broken)) == [
        ("ip-10-0-1-4", "GPUProblem", "True", "GPUsAreDown", None, False)
    ]
    obj = node("ip-10-0-1-5")
    t.observe(obj)
    assert t.observe(with_condition(obj, "KernelReady", "True", "KernelIsReady")) == []
    assert len(t.observe(with_condition(obj, "StorageReady", "False", "IOFailure"))) == 1


def test_deleted_node_emits_nothing_and_is_forgotten() -> None:
    t = tracker()
    bad = with_condition(node("ip-10-0-1-1"), "GPUProblem", "True", "GPUHardwareError")
    t.relist_page([bad])
    t.forget(bad)
    assert len(t) == 0
    assert t.resync_from_memory() == []


def test_relist_resyncs_bad_emits_recoveries_and_forgets_vanished_nodes() -> None:
    t = tracker()
    a = with_condition(node("ip-10-0-1-1"), "GPUProblem", "True", "GPUHardwareError")
    b = node("ip-10-0-1-2")
    c = with_condition(node("ip-10-0-1-3"), "GPUProblem", "True", "GPUHardwareError")
    t.begin_relist()
    t.relist_page([a, b, c])
    t.end_relist()
    # While the watch was down: a recovered, b broke, c was deleted.
    a2 = with_condition(a, "GPUProblem", "False", "GPUHealthy")
    b2 = with_condition(b, "GPUProblem", "True", "NVLinkError")
    t.begin_relist()
    events = t.relist_page([a2, b2])
    t.end_relist()
    assert keys(events) == [
        ("ip-10-0-1-1", "GPUProblem", "False", "GPUHealthy", ("True", "GPUHardwareError"), False),
        ("ip-10-0-1-2", "GPUProblem", "True", "NVLinkError", ("False", "GPUHealthy"), True),
    ]
    assert len(t) == 2


def test_a_relist_that_starts_over_announces_each_bad_node_once() -> None:
    """A list whose snapshot expired mid-way (410 on a later page) starts over inside the same
    relist: nodes the first attempt already resynced are not announced again, unless they
    changed in between; nodes only the second attempt saw are, and vanished nodes go."""
    t = tracker()
    a = with_condition(node("ip-10-0-1-1"), "GPUProblem", "True", "GPUHardwareError")
    b = with_condition(node("ip-10-0-1-2"), "GPUProblem", "True", "GPUHardwareError")
    c = node("ip-10-0-1-3")
    t.begin_relist()
    first = t.relist_page([a, b])
    t.begin_relist()  # the second page was 410: the list starts over
    b2 = with_condition(b, "GPUProblem", "True", "NVLinkError")
    again = t.relist_page([a, b2, c])
    t.end_relist()
    assert keys(first) == [
        ("ip-10-0-1-1", "GPUProblem", "True", "GPUHardwareError", None, True),
        ("ip-10-0-1-2", "GPUProblem", "True", "GPUHardwareError", None, True),
    ]
    assert keys(again) == [
        ("ip-10-0-1-2", "GPUProblem", "True", "NVLinkError", ("True", "GPUHardwareError"), False),
    ]
    # The next relist is a new one: every bad node is resynced again.
    t.begin_relist()
    assert len(t.relist_page([a, b2, c])) == 2
    t.end_relist()


def test_same_name_new_uid_has_no_previous_view() -> None:
    t = tracker()
    old = node("ip-10-0-1-1")
    t.relist_page([old])
    replacement = with_condition(
        node("ip-10-0-1-1", instance="i-0fff1234567890abc"), "Ready", "False", "KubeletNotReady"
    )
    events = t.observe(replacement)
    assert keys(events) == [("ip-10-0-1-1", "Ready", "False", "KubeletNotReady", None, False)]
    assert events[0].node.instance_id == "i-0fff1234567890abc"


def test_resync_from_memory_re_emits_current_bad_conditions() -> None:
    t = tracker()
    obj = node("ip-10-0-1-1")
    t.relist_page([obj])
    t.observe(with_condition(obj, "GPUProblem", "True", "GPUHardwareError", XID79))
    events = t.resync_from_memory()
    assert keys(events) == [
        ("ip-10-0-1-1", "GPUProblem", "True", "GPUHardwareError", ("True", "GPUHardwareError"), True)
    ]
    assert events[0].condition.message == XID79


def test_identity_fills_contract_fields_from_provider_id_and_well_known_labels() -> None:
    obj = node(
        "ip-10-0-158-235.us-west-2.compute.internal", instance="i-0abc1234567890def", zone="us-west-2b"
    )
    identity = node_identity(obj)
    assert identity.instance_id == "i-0abc1234567890def"
    assert identity.provider_id == "aws:///us-west-2b/i-0abc1234567890def"
    assert (identity.instance_type, identity.zone, identity.node_pool, identity.capacity_type) == (
        "p5.48xlarge",
        "us-west-2b",
        "gpu",
        "on-demand",
    )
    obj["metadata"]["labels"] = {"eks.amazonaws.com/capacityType": "ON_DEMAND"}
    minimal = node_identity(obj)
    assert (minimal.capacity_type, minimal.zone, minimal.node_pool) == ("on-demand", "us-west-2b", "")


def test_event_detail_round_trips_through_the_contract() -> None:
    t = tracker()
    obj = node("ip-10-0-1-1")
    t.relist_page([obj])
    (event,) = t.observe(with_condition(obj, "GPUProblem", "True", "GPUHardwareError", XID79))
    parsed = NodeConditionEvent.from_detail(event.to_json())
    assert parsed == event
    assert event.to_detail()["observedAt"] == "2026-11-21T10:00:01.234Z"


def test_the_cached_node_follows_the_object_its_boot_and_its_instance() -> None:
    """What a Node Event is attributed with (D10, D19): the Node object's uid and creation time,
    its instance and its current boot, kept up to date on the heartbeat path too (a reboot changes
    no condition), and nothing once the Node is gone."""
    tracker = TransitionTracker("training-on-eks", lambda _: True)
    assert tracker.cached("gpu-a") is None
    gpu_a = node("gpu-a", instance="i-0aaa1234567890aaa")
    gpu_a["metadata"].update({"uid": "uid-1", "creationTimestamp": "2026-11-21T09:00:00Z"})
    gpu_a["status"]["nodeInfo"]["bootID"] = "boot-1"
    tracker.observe(gpu_a)
    first = tracker.cached("gpu-a")
    assert first is not None
    assert (first.uid, first.created, first.instance_id, first.boot_id) == (
        "uid-1",
        datetime(2026, 11, 21, 9, 0, tzinfo=UTC),
        "i-0aaa1234567890aaa",
        "boot-1",
    )
    assert tracker.cached("gpu-a") is first  # unchanged: the same view

    rebooted = heartbeat(gpu_a)
    rebooted["status"]["nodeInfo"]["bootID"] = "boot-2"
    assert tracker.observe(rebooted) == []
    assert tracker.cached("gpu-a") == replace(first, boot_id="boot-2")

    replaced = node("gpu-a", instance="i-0bbb1234567890bbb")
    replaced["metadata"].update({"uid": "uid-2", "creationTimestamp": "2026-11-21T11:00:00Z"})
    tracker.observe(replaced)
    second = tracker.cached("gpu-a")
    assert second is not None
    assert (second.uid, second.created, second.instance_id) == (
        "uid-2",
        datetime(2026, 11, 21, 11, 0, tzinfo=UTC),
        "i-0bbb1234567890bbb",
    )
    tracker.forget(replaced)
    assert tracker.cached("gpu-a") is None
