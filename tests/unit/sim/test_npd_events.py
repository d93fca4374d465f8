"""NPD's Warning Events reach the local API server as the recorder writes them: a POST for a new
Event, a PATCH of count, lastTimestamp and message for a repeat, nothing for what the spam filter
holds back (nodeheal.sim.cluster.npd_events over nodeheal.sim.event_recorder)."""

from __future__ import annotations

from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.cluster.npd_events import NpdOnNodes
from nodeheal.sim.event_recorder import Action, NanoClock

NODE = "ip-10-0-1-17.us-west-2.compute.internal"
XID_92 = "NVRM: Xid (PCI:0000:53:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC error rate"


def events(store: ClusterStore) -> list[dict]:
    return store.list_objects("events")[0]


def test_a_repeat_patches_the_one_event_and_the_spam_filter_writes_nothing() -> None:
    store, clock = ClusterStore(), NanoClock()
    npd = NpdOnNodes(store, clock)
    actions = []
    for _ in range(30):
        actions.append(npd.record(NODE, "GPUInformationalXid", XID_92).action)
        clock.advance(nanos=1)
    assert actions == [Action.CREATED] + [Action.PATCHED] * 24 + [Action.FILTERED] * 5
    [event] = events(store)
    assert (event["count"], event["reason"], event["type"]) == (25, "GPUInformationalXid", "Warning")
    assert event["source"] == {"component": "gpu-monitor", "host": NODE}
    assert "uid" not in event["involvedObject"]  # NPD v1.35 records no Node UID
    # Five minutes later one more gets through, carrying the five the filter held back.
    clock.advance(seconds=300)
    assert npd.record(NODE, "GPUInformationalXid", XID_92).action is Action.PATCHED
    [event] = events(store)
    assert event["count"] == 31


def test_each_node_has_its_own_npd_and_buckets() -> None:
    store, clock = ClusterStore(), NanoClock()
    npd = NpdOnNodes(store, clock)
    for _ in range(26):
        npd.record(NODE, "GPUInformationalXid", XID_92)
        clock.advance(nanos=1)
    other = NODE.replace("17", "18")
    assert npd.record(other, "GPUInformationalXid", XID_92).action is Action.CREATED
    assert sorted(e["count"] for e in events(store)) == [1, 25]
