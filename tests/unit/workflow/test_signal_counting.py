"""Counted signals: what a Warning Event adds to an instance's window, when a window crosses, and
what the crossing starts (nodeheal.workflow.signal_windows, nodeheal.workflow.counting).

The Events come from the model of client-go's legacy recorder (nodeheal.sim.event_recorder), the
one NPD and the node monitoring agent use, so the spam filter, the aggregation and the count
patches are the real ones.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeheal.actions import Action
from nodeheal.config import PolicySettings, RemediationSettings
from nodeheal.counted_signals import COUNTED_CONDITION_TYPE, DEFINITIONS, CountedRule
from nodeheal.errors import ConfigurationError, DuplicateExecutionError
from nodeheal.events import DETAIL_TYPE_NODE_EVENT, NodeConditionEvent
from nodeheal.policy.counted_signals import counted_signal
from nodeheal.sim import event_recorder as er
from nodeheal.sim.seeded.memory_ledger import MemoryLedger
from nodeheal.workflow.counting import count_node_event
from nodeheal.workflow.ingest import IngestSettings, execution_name
from nodeheal.workflow.signal_windows import (
    MAX_EVENTS_REMEMBERED,
    MAX_SOURCES,
    EventUpdate,
    SignalWindow,
    crossing,
    observe,
    still_over,
    window_from_item,
    window_to_item,
)

CLUSTER = "training-on-eks"
NODE = "ip-10-0-1-17.ec2.internal"
NODE_UID = "0d1f4c1e-5a4b-4c7e-9f4e-1b2c3d4e5f60"
INSTANCE = "i-0aaa1234567890aaa"
BOOT = "b00710ad-0000-4000-8000-000000000001"
SETTINGS = IngestSettings(
    clusters=frozenset({CLUSTER}), stale_after=timedelta(minutes=15), event_source="nodeheal.exporter"
)
XID_92 = "NVRM: Xid (PCI:0000:53:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC error rate"
XID_63 = "NVRM: Xid (PCI:0000:53:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to activate."
XID_13 = "NVRM: Xid (PCI:0000:53:00): 13, pid=1234, name=python3, Graphics Exception"


class Starter:
    """Step Functions' name uniqueness, as the starter port sees it."""

    def __init__(self) -> None:
        self.started: dict[str, dict[str, Any]] = {}
        self.fail_next = False

    def start(self, name: str, payload: Any) -> str:
        if self.fail_next:
            self.fail_next = False
            raise TimeoutError("the invocation died before StartExecution answered")
        if name in self.started:
            raise DuplicateExecutionError(name)
        self.started[name] = json.loads(json.dumps(payload))
        return f"arn:aws:states:us-west-2:111122223333:execution:nodeheal:{name}"


def detail(stored: dict[str, Any], *, instance: str = INSTANCE, boot: str = BOOT) -> dict[str, Any]:
    """An EventBridge delivery of the exporter's ``Node Event Observed`` for one stored Event."""
    involved = stored["involvedObject"]
    return {
        "id": f"{stored['metadata']['uid']}-{stored['count']}",
        "source": f"nodeheal.exporter.{CLUSTER}",
        "detail-type": DETAIL_TYPE_NODE_EVENT,
        "detail": {
            "schemaVersion": "1.1",
            "cluster": CLUSTER,
            # NPD's Events carry no Node UID; the exporter names the Node it attached them to (D10).
            "node": {
                "name": involved["name"],
                "uid": NODE_UID if instance else "",
                "instanceID": instance,
                "bootID": boot,
            },
            "event": {
                "uid": stored["metadata"]["uid"],
                "type": stored["type"],
                "reason": stored["reason"],
                "message": stored["message"],
                "count": stored["count"],
                "source": stored["source"].get("component", ""),
                "firstTimestamp": stored["firstTimestamp"],
                "lastTimestamp": stored["lastTimestamp"],
            },
            "observedAt": stored["lastTimestamp"],
        },
    }


class Cluster:
    """One node whose NPD GPU monitor records Events through the real recorder's semantics."""

    def __init__(self) -> None:
        self.clock = er.NanoClock(now_ns=int(datetime(2026, 11, 21, 10, 0, tzinfo=UTC).timestamp()) * 10**9)
        self.store = er.EventStore()
        self.npd = er.NpdProblemClient(NODE, self.store, self.clock)
        self.ledger = MemoryLedger(clock=self.now)
        self.starter = Starter()
        self.policy = PolicySettings()
        self.results: list[Any] = []

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now_ns / 10**9, tz=UTC)

    def record(
        self, message: str, *, reason: str = "GPUInformationalXid", source: str = "gpu-monitor"
    ) -> Any:
        """NPD records one occurrence; the exporter ships the Event if the API server changed."""
        recording = self.npd.eventf("Warning", source, reason, message)
        self.clock.advance(nanos=1)
        if recording.stored is None:
            return None  # filtered: the API server saw nothing
        return self.count(recording.stored.to_json())

    def count(self, stored: dict[str, Any], **overrides: Any) -> Any:
        result = count_node_event(
            detail(stored, **overrides),
            settings=SETTINGS,
            policy=self.policy,
            windows=self.ledger,
            starter=self.starter,
            ledger=self.ledger,
            now=self.now(),
        )
        self.results.append(result)
        return result

    def window(self, signal: str = "xid-92") -> SignalWindow | None:
        return self.ledger.read_signal_window(CLUSTER, INSTANCE, signal)


# --- which Events count --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event_type", "reason", "message", "signal"),
    [
        ("Warning", "GPUInformationalXid", XID_92, "xid-92"),
        ("Warning", "GPUInformationalXid", XID_63, "xid-63"),
        ("Warning", "GPUInformationalXid", f"(combined from similar events): {XID_92}", "xid-92"),
        # The node monitoring agent: the condition type as reason, "<reason>: <message>" as message.
        (
            "Warning",
            "AcceleratedHardwareReady",
            "NvidiaXID92Warning: detected unknown XID-92 on the instance, review kernel logs for additional information.",
            "xid-92",
        ),
        (
            "Warning",
            "AcceleratedHardwareReady",
            "DCGMHealthCode109: DCGM detected issues in health check system with error code 109",
            "dcgm-health-warning",
        ),
        (
            "Warning",
            "GPUApplicationXid",
            "NVRM: Xid (PCI:0000:53:00): 94, pid=1, Contained: CE User Channel (0x9). RST: No, D-RST: No",
            "xid-94",
        ),
        (
            "Warning",
            "GPUInformationalXid",
            "NVRM: Xid (PCI:0000:53:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 13 (0x0)",
            "nvlink-nonfatal",
        ),
        ("Warning", "OOMKilling", "Killed process 4242 (python3) total-vm:1kB", "oom-kill"),
        ("Warning", "TaskHung", "task python3:4242 blocked for more than 120 seconds.", "task-hung"),
        ("Warning", "ContainerdStart", "Started containerd container runtime.", "service-restart"),
        # Not counted: an application's Xid, a fatal NVLink error (a condition), a Normal Event.
        ("Warning", "GPUApplicationXid", XID_13, None),
        ("Warning", "GPUProblem", "NVRM: Xid (PCI:0000:53:00): 145, RLW Fatal XC0 i0 Link 13 (0x0)", None),
        ("Normal", "GPUInformationalXid", XID_92, None),
    ],
)
def test_the_signal_an_event_reports(event_type: str, reason: str, message: str, signal: str | None) -> None:
    assert counted_signal(event_type, reason, message) == signal


def test_every_default_is_within_reach_of_the_spam_filter_and_cites_its_source() -> None:
    # One source on one node gets 25 writes, then one per 300 s: 25 + 12 per hour (client-go
    # tools/record/events_cache.go, nodeheal.sim.event_recorder). A threshold above that is never
    # reached when every occurrence is a new message that no later write carries.
    for definition in DEFINITIONS.values():
        rule = definition.default
        assert 1 <= rule.count <= 25 + 12 * rule.window_hours, definition.key
        assert rule.action in (Action.ALERT, Action.REBOOT), definition.key
        assert definition.source, definition.key


# --- the window ------------------------------------------------------------------------------------


def update(
    uid: str,
    count: int,
    at: datetime,
    *,
    source: str = "gpu-monitor",
    message: str = XID_92,
    first: datetime | None = None,
) -> EventUpdate:
    return EventUpdate(
        uid=uid, source=source, count=count, message=message, first_timestamp=first or at, last_timestamp=at
    )


T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
RULE = CountedRule(count=10, window_hours=24, action=Action.ALERT)


def empty() -> SignalWindow:
    return SignalWindow(cluster=CLUSTER, instance_id=INSTANCE, signal="xid-92")


def test_a_count_increase_is_that_many_occurrences_and_a_replay_is_none() -> None:
    window = observe(empty(), update("e1", 1, T0), boot_id=BOOT, rule=RULE, now=T0)
    window = observe(
        window,
        update("e1", 4, T0 + timedelta(minutes=5)),
        boot_id=BOOT,
        rule=RULE,
        now=T0 + timedelta(minutes=5),
    )
    assert window.count_since(0) == 4
    replayed = observe(
        window,
        update("e1", 4, T0 + timedelta(minutes=5)),
        boot_id=BOOT,
        rule=RULE,
        now=T0 + timedelta(minutes=6),
    )
    assert replayed == window
    older = observe(
        window,
        update("e1", 3, T0 + timedelta(minutes=4)),
        boot_id=BOOT,
        rule=RULE,
        now=T0 + timedelta(minutes=6),
    )
    assert older.count_since(0) == 4


def test_occurrences_between_two_updates_are_placed_at_the_earlier_one() -> None:
    # Three occurrences after 10:00 and up to 20:00: the window keeps them at 10:00, the earliest
    # they can have been, so it never holds an occurrence it may not hold.
    window = observe(empty(), update("e1", 1, T0), boot_id=BOOT, rule=RULE, now=T0)
    later = T0 + timedelta(hours=10)
    window = observe(window, update("e1", 4, later), boot_id=BOOT, rule=RULE, now=later)
    times = sorted(window.occurrences["gpu-monitor"])
    assert times == [T0.timestamp()] * 3 + [later.timestamp()]


def test_an_aggregated_event_counts_once_per_update() -> None:
    # After aggregation the one Event's count rises for any of the merged messages: only the
    # newest message is known, so each update is one occurrence of its signal.
    combined = f"(combined from similar events): {XID_92}"
    window = observe(empty(), update("agg", 1, T0, message=combined), boot_id=BOOT, rule=RULE, now=T0)
    window = observe(
        window,
        update("agg", 7, T0 + timedelta(minutes=1), message=combined),
        boot_id=BOOT,
        rule=RULE,
        now=T0 + timedelta(minutes=1),
    )
    assert window.count_since(0) == 2


def test_an_event_first_seen_above_one_counts_whole_only_inside_the_window() -> None:
    inside = observe(
        empty(), update("e1", 5, T0, first=T0 - timedelta(hours=1)), boot_id=BOOT, rule=RULE, now=T0
    )
    assert inside.count_since(0) == 5
    outside = observe(
        empty(), update("e1", 5, T0, first=T0 - timedelta(hours=30)), boot_id=BOOT, rule=RULE, now=T0
    )
    assert outside.count_since(0) == 1


def test_two_detectors_reporting_one_fault_count_it_once() -> None:
    window = empty()
    for minute in range(6):
        at = T0 + timedelta(minutes=minute)
        window = observe(
            window, update(f"npd{minute}", 1, at, source="gpu-monitor"), boot_id=BOOT, rule=RULE, now=at
        )
        window = observe(
            window,
            update(f"nma{minute}", 1, at, source="eks-node-monitoring-agent"),
            boot_id=BOOT,
            rule=RULE,
            now=at,
        )
    assert window.count_since(0) == 6


def test_a_new_boot_ends_the_window_and_late_events_of_the_old_boot_do_not_count() -> None:
    window = empty()
    for minute in range(9):
        at = T0 + timedelta(minutes=minute)
        window = observe(window, update(f"e{minute}", 1, at), boot_id=BOOT, rule=RULE, now=at)
    rebooted = T0 + timedelta(hours=1)
    window = observe(window, update("new", 1, rebooted), boot_id="another-boot", rule=RULE, now=rebooted)
    assert window.boot_id == "another-boot"
    assert window.count_since(0) == 1
    late = observe(
        window, update("late", 1, T0 + timedelta(minutes=30)), boot_id="another-boot", rule=RULE, now=rebooted
    )
    assert late.count_since(0) == 1
    assert still_over(late, replace(RULE, count=1), boot_id=BOOT, now=rebooted) is None


def test_a_window_item_stays_bounded_however_noisy_the_node() -> None:
    window = empty()
    for index in range(5_000):
        at = T0 + timedelta(seconds=index)
        window = observe(
            window, update(f"e{index}", 1, at, source=f"source-{index % 9}"), boot_id=BOOT, rule=RULE, now=at
        )
    assert len(window.occurrences) <= MAX_SOURCES
    assert all(len(times) <= RULE.count for times in window.occurrences.values())
    assert len(window.events) <= MAX_EVENTS_REMEMBERED
    assert len(json.dumps(window_to_item(window))) < 8_000
    assert window_from_item(json.loads(json.dumps(window_to_item(window)))) == window


def test_a_crossing_names_its_first_occurrence_and_the_next_needs_new_ones() -> None:
    window = empty()
    for minute in range(10):
        at = T0 + timedelta(minutes=minute)
        window = observe(window, update(f"e{minute}", 1, at), boot_id=BOOT, rule=RULE, now=at)
    reached = crossing(window, RULE, T0 + timedelta(minutes=9))
    assert reached is not None
    assert (reached.window_start, reached.crossed_at) == (T0, T0 + timedelta(minutes=9))
    # Outside the window, the oldest no longer counts.
    assert crossing(window, RULE, T0 + timedelta(hours=24, minutes=1)) is None


# --- counting through the recorder's semantics -------------------------------------------------------


def test_ten_xid_92_events_cross_once_and_start_one_named_execution() -> None:
    cluster = Cluster()
    for _ in range(9):
        assert cluster.record(XID_92).status == "counted"
        cluster.clock.advance(seconds=60)
    crossed = cluster.record(XID_92)
    assert (crossed.status, crossed.signal, crossed.instance_id, crossed.count) == (
        "crossed",
        "xid-92",
        INSTANCE,
        10,
    )
    [(name, payload)] = cluster.starter.started.items()
    event = NodeConditionEvent.from_detail(payload["event"])
    assert event.condition.type == COUNTED_CONDITION_TYPE
    assert event.condition.reason == DEFINITIONS["xid-92"].reason
    assert event.node.instance_id == INSTANCE
    assert event.counted_signal is not None
    assert (
        event.counted_signal["count"],
        event.counted_signal["threshold"],
        event.counted_signal["windowHours"],
    ) == (10, 10, 24)
    assert name == execution_name(event)
    assert "xid-92" in name and name.startswith(f"{CLUSTER}-ip-10-0-1-17-")
    # Nine more do not cross again: the next crossing needs ten new occurrences.
    for _ in range(9):
        cluster.clock.advance(seconds=60)
        assert cluster.record(XID_92).status == "counted"
    assert len(cluster.starter.started) == 1
    cluster.clock.advance(seconds=60)
    assert cluster.record(XID_92).status == "crossed"
    assert len(cluster.starter.started) == 2


def test_a_repeated_delivery_of_the_crossing_maps_to_the_same_name() -> None:
    cluster = Cluster()
    for _ in range(10):
        cluster.record(XID_92)
        cluster.clock.advance(seconds=60)
    [stored] = cluster.store.objects()
    again = cluster.count(stored)
    assert again.status == "duplicate"
    assert len(cluster.starter.started) == 1


def test_an_invocation_that_dies_before_the_start_starts_the_same_name_on_its_retry() -> None:
    cluster = Cluster()
    for _ in range(9):
        cluster.record(XID_92)
        cluster.clock.advance(seconds=60)
    cluster.starter.fail_next = True
    with pytest.raises(TimeoutError):
        cluster.record(XID_92)
    [stored] = cluster.store.objects()
    retried = cluster.count(stored)  # Lambda's retry of the same delivery
    assert retried.status == "crossed"
    assert len(cluster.starter.started) == 1
    assert cluster.count(stored).status == "duplicate"


def test_occurrences_the_spam_filter_held_back_arrive_with_the_next_write() -> None:
    # 40 occurrences of one message in a burst: the recorder writes 25 and holds back 15, but it
    # raised its count for each, so the next write 5 minutes later carries all 41.
    cluster = Cluster()
    cluster.policy = PolicySettings(
        counted_signals={"xid-92": CountedRule(count=41, window_hours=1, action=Action.ALERT)}
    )
    results = [cluster.record(XID_92) for _ in range(40)]
    assert sum(1 for r in results if r is None) == 15
    window = cluster.window()
    assert window is not None and window.count_since(0) == 25
    cluster.clock.advance(seconds=300)
    assert cluster.record(XID_92).status == "crossed"
    window = cluster.window()
    assert window is not None and window.count_since(0) == 41


def test_aggregation_still_counts_the_xid_of_each_update() -> None:
    # Ten different messages of one reason within ten minutes: from the tenth the recorder merges
    # them into one Event whose message is the newest, so each later update counts once.
    cluster = Cluster()
    for pid in range(9):
        cluster.record(XID_92.replace("pid='<unknown>'", f"pid={pid}"))
        cluster.clock.advance(seconds=1)
    merged = cluster.record(XID_92.replace("pid='<unknown>'", "pid=99"))
    assert (merged.status, merged.count) == ("crossed", 10)
    [aggregate] = [
        o for o in cluster.store.objects() if o["message"].startswith("(combined from similar events): ")
    ]
    for pid in (100, 101, 102):
        cluster.clock.advance(seconds=1)
        assert cluster.record(XID_92.replace("pid='<unknown>'", f"pid={pid}")).status == "counted"
    window = cluster.window()
    assert window is not None
    assert window.count_since(window.crossed_through + 0.5) == 3
    [aggregate] = [o for o in cluster.store.objects() if o["metadata"]["uid"] == aggregate["metadata"]["uid"]]
    assert aggregate["count"] == 4 and "pid=102" in aggregate["message"]


def test_an_event_without_an_instance_counts_for_none_and_is_recorded() -> None:
    cluster = Cluster()
    cluster.npd.eventf("Warning", "gpu-monitor", "GPUInformationalXid", XID_92)
    [stored] = cluster.store.objects()
    result = cluster.count(stored, instance="")
    assert result.status == "unattributed"
    assert [d.category for d in cluster.ledger.dropped] == ["unattributed"]
    assert cluster.ledger.windows == {}


def test_a_count_lands_only_on_the_instance_the_event_names() -> None:
    cluster = Cluster()
    for _ in range(5):
        cluster.record(XID_92)
    cluster.npd.eventf("Warning", "gpu-monitor", "GPUInformationalXid", XID_92 + " other")
    [other] = [o for o in cluster.store.objects() if o["message"].endswith("other")]
    cluster.count(other, instance="i-0bbb1234567890bbb")
    mine = cluster.window()
    theirs = cluster.ledger.read_signal_window(CLUSTER, "i-0bbb1234567890bbb", "xid-92")
    assert mine is not None and theirs is not None
    assert (mine.count_since(0), theirs.count_since(0)) == (5, 1)


@pytest.mark.parametrize(
    ("change", "category"),
    [
        (lambda p: p | {"source": "nodeheal.exporter.other-cluster"}, "forged"),
        (lambda p: p | {"source": "aws.ec2"}, "foreign-source"),
        (
            lambda p: p
            | {
                "detail": {**p["detail"], "cluster": "other", "node": p["detail"]["node"]},
                "source": "nodeheal.exporter.other",
            },
            "foreign-cluster",
        ),
        (
            lambda p: p | {"detail": {**p["detail"], "event": {**p["detail"]["event"], "count": 0}}},
            "malformed",
        ),
        (
            lambda p: p
            | {"detail": {**p["detail"], "node": {**p["detail"]["node"], "instanceID": "not-an-instance"}}},
            "malformed",
        ),
        (lambda p: p | {"detail-type": "Node Condition Changed"}, "malformed"),
    ],
)
def test_bad_input_is_recorded_with_a_reason_and_counts_nothing(change: Any, category: str) -> None:
    cluster = Cluster()
    cluster.npd.eventf("Warning", "gpu-monitor", "GPUInformationalXid", XID_92)
    [stored] = cluster.store.objects()
    result = count_node_event(
        change(detail(stored)),
        settings=SETTINGS,
        policy=cluster.policy,
        windows=cluster.ledger,
        starter=cluster.starter,
        ledger=cluster.ledger,
        now=cluster.now(),
    )
    assert (result.status, result.category) == ("dropped", category)
    assert result.reason
    assert [d.category for d in cluster.ledger.dropped] == [category]
    assert cluster.ledger.windows == {}


def test_the_policy_setting_overrides_a_default_and_refuses_an_unknown_signal() -> None:
    settings = RemediationSettings.from_json(
        {"policy": {"countedSignals": {"xid-92": {"count": 3, "windowHours": 2}}}}
    )
    assert settings.policy.counted_rule("xid-92") == CountedRule(count=3, window_hours=2, action=Action.ALERT)
    assert settings.policy.counted_rule("xid-63") == DEFINITIONS["xid-63"].default
    with pytest.raises(
        ConfigurationError, match=r"settings\.policy\.countedSignals\.xid-999 names no counted signal"
    ):
        RemediationSettings.from_json({"policy": {"countedSignals": {"xid-999": {}}}})
    with pytest.raises(ConfigurationError, match=r"countedSignals\.xid-92\.count"):
        RemediationSettings.from_json({"policy": {"countedSignals": {"xid-92": {"count": 0}}}})


def test_the_exporters_detail_is_what_the_counting_function_reads() -> None:
    """One contract, two ends: the shipper's detail of an NPD Event (no Node UID, as NPD v1.35
    records it) attributed to the cached Node parses into the instance, boot and Node UID the
    counting function keys on; an unattributed one names no instance."""
    from nodeheal.events import NodeEventDetail
    from nodeheal.exporter.node_events import attributed_node, node_event_detail
    from nodeheal.exporter.transitions import CachedNode

    cluster = Cluster()
    cluster.npd.eventf("Warning", "gpu-monitor", "GPUInformationalXid", XID_92)
    [stored] = cluster.store.objects()
    assert "uid" not in stored["involvedObject"]
    cached = CachedNode(
        name=NODE, uid=NODE_UID, created=T0 - timedelta(days=1), instance_id=INSTANCE, boot_id=BOOT
    )
    shipped = node_event_detail(CLUSTER, stored, cluster.now(), attributed_node(stored, cached))
    parsed = NodeEventDetail.from_detail(shipped)
    assert (parsed.instance_id, parsed.boot_id, parsed.node_uid) == (INSTANCE, BOOT, NODE_UID)
    assert (parsed.event.count, parsed.event.source, parsed.event.reason) == (
        1,
        "gpu-monitor",
        "GPUInformationalXid",
    )
    newer = replace(cached, created=T0 + timedelta(days=1), uid="another-node-object")
    unattributed = NodeEventDetail.from_detail(
        node_event_detail(CLUSTER, stored, cluster.now(), attributed_node(stored, newer))
    )
    assert (unattributed.instance_id, unattributed.boot_id) == ("", "")
