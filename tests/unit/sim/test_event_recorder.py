"""The model of client-go's legacy event recorder writes Events as the recorder does
(nodeheal.sim.event_recorder).

Each case names what it pins in client-go v0.35.0 ``tools/record/events_cache.go`` and
``tools/record/event.go``, and NPD v1.35.1 ``pkg/exporters/k8sexporter/problemclient/problem_client.go``.
"""

from __future__ import annotations

import re

from nodeheal.sim import event_recorder as er
from nodeheal.sim.event_recorder import Action

NODE = "ip-10-0-1-17.ec2.internal"
SOURCE = "kernel-monitor"
XID = "NVRM: Xid (PCI:0000:53:00): 13, pid={pid}, name=python3, Graphics Exception"


def npd(pop_any: er.PopAny = min) -> tuple[er.NpdProblemClient, er.NanoClock, er.EventStore]:
    clock = er.NanoClock()
    store = er.EventStore()
    return er.NpdProblemClient(NODE, store, clock, pop_any=pop_any), clock, store


def burst(
    client: er.NpdProblemClient, clock: er.NanoClock, n: int, reason: str = "GPUXid", message: str = "m"
) -> list[er.Recording]:
    """n calls, one nanosecond apart, as a real clock would space them."""
    recordings = []
    for _ in range(n):
        recordings.append(client.eventf("Warning", SOURCE, reason, message))
        clock.advance(nanos=1)
    return recordings


def each_message(
    client: er.NpdProblemClient, clock: er.NanoClock, messages: list[str], seconds_apart: float = 0.0
) -> list[er.Recording]:
    """One GPUXid event per message, the clock moving on after each (at least a nanosecond)."""
    recordings = []
    for message in messages:
        recordings.append(client.eventf("Warning", SOURCE, "GPUXid", message))
        clock.advance(seconds=seconds_apart, nanos=1)
    return recordings


def xids(*pids: int) -> list[str]:
    return [XID.format(pid=pid) for pid in pids]


def uid(recording: er.Recording) -> str:
    assert recording.stored is not None, recording.action
    return recording.stored.uid


def actions(recordings: list[er.Recording]) -> list[Action]:
    return [recording.action for recording in recordings]


# --- the spam filter: getSpamKey lines 69-82, Filter lines 126-151, burst 25 / qps 1/300 lines 47-48


def test_a_source_may_write_25_events_about_a_node_then_one_per_300_seconds() -> None:
    client, clock, _ = npd()
    first = burst(client, clock, 30)
    assert actions(first) == [Action.CREATED] + [Action.PATCHED] * 24 + [Action.FILTERED] * 5

    # A token takes 1 / float32(1/300) s = 299.9999927 s: a millisecond before 300 s is too early.
    clock.advance(seconds=299.999)
    assert client.eventf("Warning", SOURCE, "GPUXid", "m").action is Action.FILTERED
    clock.advance(seconds=0.001)
    assert client.eventf("Warning", SOURCE, "GPUXid", "m").action is Action.PATCHED
    assert client.eventf("Warning", SOURCE, "GPUXid", "m").action is Action.FILTERED
    clock.advance(seconds=900)
    assert actions(burst(client, clock, 4)) == [Action.PATCHED] * 3 + [Action.FILTERED]


def test_reasons_and_messages_of_one_source_on_one_node_share_the_bucket() -> None:
    # getSpamKey has no reason and no message: 13 of one reason leave 12 for another.
    client, clock, _ = npd()
    assert set(actions(burst(client, clock, 13, reason="GPUXid"))) == {Action.CREATED, Action.PATCHED}
    assert set(actions(burst(client, clock, 12, reason="OOMKilling", message="other"))) == {
        Action.CREATED,
        Action.PATCHED,
    }
    assert client.eventf("Warning", SOURCE, "GPUXid", "m").action is Action.FILTERED
    assert client.eventf("Warning", SOURCE, "TaskHung", "new").action is Action.FILTERED


def test_another_source_another_type_or_another_node_has_its_own_bucket() -> None:
    # NPD makes a broadcaster per source (problem_client.go Eventf lines 122-130); the type and the
    # host are in the spam key.
    client, clock, store = npd()
    burst(client, clock, 26)
    assert client.eventf("Warning", SOURCE, "GPUXid", "m").action is Action.FILTERED
    assert client.eventf("Warning", "custom-plugin-monitor", "GPUXid", "m").action is Action.CREATED
    clock.advance(nanos=1)
    assert client.eventf("Normal", SOURCE, "GPUXid", "m").action is Action.CREATED
    other_node = er.NpdProblemClient("ip-10-0-1-18.ec2.internal", store, clock)
    assert other_node.eventf("Warning", SOURCE, "GPUXid", "m").action is Action.CREATED


# --- the filter runs last: EventCorrelate lines 510-513


def test_a_filtered_occurrence_is_counted_by_the_next_write_of_the_same_event() -> None:
    # events_cache.go line 511 (c.logger.eventObserve) raises the cached count before line 512
    # (c.filterFunc) skips the write; eventObserve stores the count at lines 355-364. So the five
    # filtered occurrences are in the count of the next accepted one: 25 + 5 + 1.
    client, clock, _ = npd()
    recordings = burst(client, clock, 30)
    assert [r.logged_count for r in recordings[25:]] == [26, 27, 28, 29, 30]
    assert recordings[24].stored is not None and recordings[24].stored.event.count == 25
    clock.advance(seconds=300)
    written = client.eventf("Warning", SOURCE, "GPUXid", "m")
    assert written.action is Action.PATCHED
    assert written.stored is not None
    assert written.stored.event.count == 31
    assert uid(written) == uid(recordings[0])


def test_a_filtered_first_occurrence_is_created_later_with_its_count_and_first_timestamp() -> None:
    # The logger keeps the name of an Event never sent; the next accepted occurrence has count 2, so
    # recordToSink PATCHes it (event.go line 302), gets 404 and POSTs it (lines 336-341).
    client, clock, store = npd()
    burst(client, clock, 25)
    filtered = client.eventf("Warning", SOURCE, "TaskHung", "blocked for more than 120 seconds")
    assert filtered.action is Action.FILTERED and filtered.logged_count == 1
    first_seen = clock.now_ns
    clock.advance(seconds=300)
    created = client.eventf("Warning", SOURCE, "TaskHung", "blocked for more than 120 seconds")
    assert created.action is Action.CREATED and created.after_not_found
    assert created.stored is not None
    assert created.stored.event.count == 2
    assert created.stored.event.name == f"{NODE}.{first_seen:x}"
    event = created.to_json()
    assert event is not None
    assert event["firstTimestamp"] == er.rfc3339(first_seen)
    assert event["lastTimestamp"] == er.rfc3339(clock.now_ns)
    assert len(store.events) == 2


# --- the event logger: getEventKey lines 51-67, eventObserve lines 323-366, LRU 4096 line 36


def test_repeats_of_one_message_are_count_patches_of_one_event() -> None:
    client, clock, store = npd()
    created = client.eventf("Warning", SOURCE, "GPUXid", "m")
    assert created.stored is not None
    clock.advance(seconds=61)
    second = client.eventf("Warning", SOURCE, "GPUXid", "m")
    clock.advance(seconds=61)
    third = client.eventf("Warning", SOURCE, "GPUXid", "m")
    assert (second.action, third.action) == (Action.PATCHED, Action.PATCHED)
    assert third.stored is not None
    assert third.stored.uid == created.stored.uid
    assert third.stored.event.name == created.stored.event.name
    assert third.stored.event.count == 3
    assert third.stored.event.first_timestamp_ns == created.stored.event.first_timestamp_ns
    assert third.stored.event.last_timestamp_ns == clock.now_ns - clock.now_ns % 10**9
    assert len(store.events) == 1


def test_another_message_under_the_same_reason_is_another_event() -> None:
    client, clock, store = npd()
    client.eventf("Warning", SOURCE, "GPUXid", XID.format(pid=1))
    clock.advance(nanos=1)
    assert client.eventf("Warning", SOURCE, "GPUXid", XID.format(pid=2)).action is Action.CREATED
    assert len(store.events) == 2


def test_the_logger_forgets_the_oldest_of_4096_events_and_creates_it_again() -> None:
    def run(others: int) -> tuple[er.Recording, er.Recording]:
        client, clock, _ = npd()
        first = client.eventf("Warning", SOURCE, "Reason0", "m")
        for i in range(others):
            clock.advance(nanos=1)
            client.eventf("Warning", SOURCE, f"Other{i}", "m")  # filtered after 24, still logged
        clock.advance(seconds=300)
        return first, client.eventf("Warning", SOURCE, "Reason0", "m")

    first, again = run(4095)
    assert again.action is Action.PATCHED and again.stored is not None
    assert uid(again) == uid(first) and again.stored.event.count == 2

    first, again = run(4096)
    assert again.action is Action.CREATED and again.stored is not None
    assert again.stored.event.count == 1
    assert uid(again) != uid(first)


# --- the aggregator: EventAggregatorByReasonFunc lines 159-176, EventAggregate lines 238-293


def test_the_tenth_distinct_message_within_600_seconds_starts_one_aggregate_event() -> None:
    client, clock, store = npd()
    recordings = each_message(client, clock, xids(*range(1, 12)), seconds_apart=59)
    assert actions(recordings) == [Action.CREATED] * 10 + [Action.PATCHED]
    aggregate, again = recordings[9].to_json(), recordings[10].to_json()
    assert aggregate is not None and again is not None
    assert aggregate["message"] == "(combined from similar events): " + XID.format(pid=10)
    assert aggregate["reason"] == "GPUXid" and aggregate["count"] == 1
    assert re.fullmatch(re.escape(NODE) + r"\.[0-9a-f]+", aggregate["metadata"]["name"])
    # The aggregate Event is built without ReportingController/Instance (lines 278-291).
    assert aggregate["reportingComponent"] == "" and aggregate["reportingInstance"] == ""
    # The 11th distinct message patches the aggregate: count 2, the newest text.
    assert again["metadata"]["uid"] == aggregate["metadata"]["uid"]
    assert again["count"] == 2
    assert again["message"] == "(combined from similar events): " + XID.format(pid=11)
    assert len(store.events) == 10


def test_a_gap_of_more_than_600_seconds_since_the_last_similar_event_starts_over() -> None:
    # interval is measured from the record's lastTimestamp, moved on every event (line 265); only
    # interval > maxInterval (line 259) starts a fresh set.
    def tenth_message_written(gap_ns: int) -> str:
        client, clock, _ = npd()
        for message in xids(*range(1, 10)):
            client.eventf("Warning", SOURCE, "GPUXid", message)
            clock.advance(nanos=gap_ns)
        tenth = client.eventf("Warning", SOURCE, "GPUXid", XID.format(pid=10))
        assert tenth.stored is not None
        return tenth.stored.event.message

    # Ten messages 600 s apart, 90 minutes in all: one similar event never more than 600 s ago.
    assert tenth_message_written(600 * 10**9) == er.AGGREGATE_MESSAGE_PREFIX + XID.format(pid=10)
    assert tenth_message_written(600 * 10**9 + 1) == XID.format(pid=10)


def test_after_aggregation_a_message_still_in_the_set_goes_to_its_own_event() -> None:
    # PopAny (line 274) drops one message of ten, leaving nine; which one is Go's map order. A
    # repeat of a kept message is below the threshold (line 269) and patches its own Event; a
    # repeat of the dropped one is aggregated.
    def drop_pid_1_first(keys: set[str]) -> str:
        return XID.format(pid=1) if XID.format(pid=1) in keys else min(keys)

    client, clock, _ = npd(pop_any=drop_pid_1_first)
    first = each_message(client, clock, xids(*range(1, 11)), seconds_apart=1)
    assert first[9].stored is not None and first[1].stored is not None
    aggregate_uid = first[9].stored.uid
    kept = client.eventf("Warning", SOURCE, "GPUXid", XID.format(pid=2))
    assert kept.action is Action.PATCHED and kept.stored is not None
    assert kept.stored.uid == first[1].stored.uid and kept.stored.event.count == 2
    clock.advance(seconds=1)
    dropped = client.eventf("Warning", SOURCE, "GPUXid", XID.format(pid=1))
    assert dropped.action is Action.PATCHED and dropped.stored is not None
    assert dropped.stored.uid == aggregate_uid and dropped.stored.event.count == 2


def test_after_a_reset_the_next_aggregate_patches_the_old_aggregate_event() -> None:
    # The logger still holds the aggregate key, so the new aggregate takes the old name (lines 338-343).
    client, clock, _ = npd()
    first_round = each_message(client, clock, [f"a{i}" for i in range(10)])
    clock.advance(seconds=601)
    second_round = each_message(client, clock, [f"b{i}" for i in range(10)])
    assert actions(second_round) == [Action.CREATED] * 9 + [Action.PATCHED]
    old, new = first_round[9].stored, second_round[9].stored
    assert old is not None and new is not None
    assert new.uid == old.uid and new.event.count == 2
    assert new.event.message == er.AGGREGATE_MESSAGE_PREFIX + "b9"


# --- what the API server holds


def test_the_event_objects_are_what_npd_writes() -> None:
    client, clock, _ = npd()
    recordings = [client.eventf("Warning", SOURCE, "GPUXid", "m")]
    start = clock.now_ns
    clock.advance(seconds=10.5)
    recordings.append(client.eventf("Warning", SOURCE, "GPUXid", "m"))
    (event,) = er.event_objects(recordings)
    assert event["metadata"]["name"] == f"{NODE}.{start:x}"
    assert event["metadata"]["namespace"] == "default"  # NPD's --event-namespace defaults to ""
    # getNodeRef (problem_client.go lines 156-164) sets no UID.
    assert event["involvedObject"] == {"kind": "Node", "name": NODE, "apiVersion": "v1"}
    assert event["source"] == {"component": SOURCE, "host": NODE}
    # generateEvent copies the source into ReportingController/Instance (event.go lines 454-455).
    assert (event["reportingComponent"], event["reportingInstance"]) == (SOURCE, NODE)
    assert event["count"] == 2 and event["eventTime"] is None
    assert event["firstTimestamp"] == er.rfc3339(start)
    assert event["lastTimestamp"] == er.rfc3339(clock.now_ns)
    assert [kind for kind, _ in er.watch_stream(recordings)] == ["ADDED", "MODIFIED"]


def test_an_event_deleted_on_the_server_is_created_again_with_its_count() -> None:
    client, clock, store = npd()
    created = client.eventf("Warning", SOURCE, "GPUXid", "m")
    assert created.stored is not None
    store.delete("default", created.stored.event.name)  # the Event's TTL ran out
    clock.advance(seconds=3600)
    again = client.eventf("Warning", SOURCE, "GPUXid", "m")
    assert again.action is Action.CREATED and again.after_not_found
    assert again.stored is not None
    assert again.stored.event.name == created.stored.event.name and again.stored.event.count == 2
    assert again.stored.uid != created.stored.uid


def test_two_events_of_one_node_in_the_same_nanosecond_collide_on_the_name() -> None:
    client, _, _ = npd()
    assert client.eventf("Warning", SOURCE, "GPUXid", "m").action is Action.CREATED
    assert client.eventf("Warning", SOURCE, "TaskHung", "m").action is Action.REJECTED
    assert client.eventf("Info", SOURCE, "TaskHung", "m").action is Action.INVALID_TYPE


def test_a_steady_signal_reaches_the_server_25_plus_12_times_an_hour_with_every_occurrence_counted() -> None:
    # One occurrence every 10 s through W = 2 hours (721, both ends included): 25 + 12 * 2 = 49
    # writes, and the last write's count holds every occurrence before it, filtered ones included.
    client, clock, _ = npd()
    recordings = []
    for _ in range(721):
        recordings.append(client.eventf("Warning", SOURCE, "GPUXid", "m"))
        clock.advance(seconds=10)
    written = [r for r in recordings if r.action is not Action.FILTERED]
    assert len(written) == 25 + 12 * 2
    last_index = max(i for i, r in enumerate(recordings) if r.action is not Action.FILTERED)
    assert written[-1].stored is not None
    assert written[-1].stored.event.count == last_index + 1
