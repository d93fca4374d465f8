from __future__ import annotations

import threading

from nodeheal.exporter.queue import DropOrder, EventQueue, QueuedEvent


def item(key: str, n: int, *, healthy: bool = False) -> QueuedEvent:
    return QueuedEvent(
        key=key, detail_type="Node Condition Changed", detail=f'{{"n":{n}}}', healthy_direction=healthy
    )


def node_event(key: str, n: int) -> QueuedEvent:
    """A ``Node Event Observed`` entry as the shipper builds it."""
    return QueuedEvent(
        key=f"event/{key}",
        detail_type="Node Event Observed",
        detail=f'{{"n":{n}}}',
        healthy_direction=False,
        node_event=True,
    )


def drain(queue: EventQueue) -> list[QueuedEvent]:
    out: list[QueuedEvent] = []
    while batch := queue.take_batch(10, 256 * 1024, timeout=0):
        out.extend(batch)
    return out


def test_batch_holds_at_most_one_event_per_node_in_fifo_order() -> None:
    queue = EventQueue(100)
    for event in [item("a", 1), item("a", 2), item("b", 3), item("a", 4), item("c", 5)]:
        queue.put(event)
    assert [(e.key, e.detail) for e in queue.take_batch(10, 256 * 1024, timeout=0)] == [
        ("a", '{"n":1}'),
        ("b", '{"n":3}'),
        ("c", '{"n":5}'),
    ]
    assert [e.detail for e in queue.take_batch(10, 256 * 1024, timeout=0)] == ['{"n":2}']
    assert [e.detail for e in queue.take_batch(10, 256 * 1024, timeout=0)] == ['{"n":4}']


def test_batch_respects_entry_and_byte_limits() -> None:
    queue = EventQueue(100)
    for n in range(15):
        queue.put(item(f"n{n}", n))
    assert len(queue.take_batch(10, 256 * 1024, timeout=0)) == 10
    big = QueuedEvent(key="x", detail_type="t", detail="x" * 200_000, healthy_direction=False)
    queue.put(big)
    queue.put(QueuedEvent(key="y", detail_type="t", detail="y" * 100_000, healthy_direction=False))
    first = queue.take_batch(10, 256 * 1024, timeout=0)
    assert [e.key for e in first] == [f"n{n}" for n in range(10, 15)] + ["x"]
    assert [e.key for e in queue.take_batch(10, 256 * 1024, timeout=0)] == ["y"]


def test_overflow_drops_oldest_healthy_direction_first() -> None:
    dropped: list[QueuedEvent] = []
    queue = EventQueue(3, on_drop=dropped.append)
    queue.put(item("a", 1))
    queue.put(item("b", 2, healthy=True))
    queue.put(item("c", 3, healthy=True))
    queue.put(item("d", 4))
    queue.put(item("e", 5))
    assert [e.detail for e in dropped] == ['{"n":2}', '{"n":3}']
    assert [e.key for e in drain(queue)] == ["a", "d", "e"]


def test_when_all_queued_are_bad_a_new_healthy_event_is_the_one_dropped() -> None:
    dropped: list[QueuedEvent] = []
    queue = EventQueue(2, on_drop=dropped.append)
    queue.put(item("a", 1))
    queue.put(item("b", 2))
    queue.put(item("c", 3, healthy=True))
    assert [e.key for e in dropped] == ["c"]
    queue.put(item("d", 4))
    assert [e.key for e in dropped] == ["c", "a"]
    assert [e.key for e in drain(queue)] == ["b", "d"]


def test_put_never_blocks_and_take_waits_for_the_first_event() -> None:
    queue = EventQueue(10)
    got: list[list[QueuedEvent]] = []
    consumer = threading.Thread(target=lambda: got.append(queue.take_batch(10, 1024, timeout=5)))
    consumer.start()
    queue.put(item("a", 1))
    consumer.join(timeout=5)
    assert [e.key for e in got[0]] == ["a"]
    assert queue.take_batch(10, 1024, timeout=0.01) == []


def test_healthy_index_stays_bounded_under_steady_flow() -> None:
    queue = EventQueue(10)
    for n in range(1000):
        queue.put(item(f"n{n}", n, healthy=True))
        queue.take_batch(10, 1024, timeout=0)
    assert [len(sequence) for sequence in queue._droppable] == [0, 0]


def test_each_entry_has_its_drop_order() -> None:
    assert [e.drop_order for e in (item("a", 1, healthy=True), node_event("a", 2), item("a", 3))] == [
        DropOrder.HEALTHY,
        DropOrder.NODE_EVENT,
        DropOrder.BAD,
    ]


def test_a_flood_of_node_events_never_pushes_out_a_bad_transition() -> None:
    """One "GPU broke" queued, then ten times the capacity in Warning Events (EventBridge down,
    a noisy fleet): the bad transition stays, the oldest Events go, the newest stay."""
    dropped: list[QueuedEvent] = []
    queue = EventQueue(100, on_drop=dropped.append)
    queue.put(item("gpu-a", 0))
    for n in range(1, 1001):
        queue.put(node_event(f"gpu-{n % 50}", n))
    assert len(queue) == 100
    assert len(dropped) == 901 and {e.drop_order for e in dropped} == {DropOrder.NODE_EVENT}
    assert [e.detail for e in dropped[:2]] == ['{"n":1}', '{"n":2}']
    left = drain(queue)
    assert left[0].key == "gpu-a" and left[0].drop_order is DropOrder.BAD
    assert sorted(int(e.detail[5:-1]) for e in left[1:]) == list(range(902, 1001))


def test_healthy_transitions_go_before_node_events_and_node_events_before_bad_ones() -> None:
    dropped: list[QueuedEvent] = []
    queue = EventQueue(4, on_drop=dropped.append)
    queue.put(node_event("a", 1))
    queue.put(item("b", 2, healthy=True))
    queue.put(item("c", 3))
    queue.put(node_event("d", 4))
    queue.put(item("e", 5))  # full: the healthy transition goes although the Event is older
    queue.put(item("f", 6))  # no healthy left: the oldest Event
    queue.put(item("g", 7))  # then the next Event
    assert [e.detail for e in dropped] == ['{"n":2}', '{"n":1}', '{"n":4}']
    queue.put(item("h", 8))  # only bad transitions left: the oldest of them
    assert [e.detail for e in dropped][3:] == ['{"n":3}']
    assert [e.key for e in drain(queue)] == ["e", "f", "g", "h"]


def test_an_incoming_entry_cheaper_than_anything_queued_is_itself_dropped() -> None:
    dropped: list[QueuedEvent] = []
    queue = EventQueue(2, on_drop=dropped.append)
    queue.put(node_event("a", 1))
    queue.put(item("b", 2))
    queue.put(item("c", 3, healthy=True))  # below the queued Event: the newcomer goes
    assert [e.detail for e in dropped] == ['{"n":3}']
    queue.put(node_event("d", 4))  # an Event against an Event: the older one goes
    assert [e.detail for e in dropped] == ['{"n":3}', '{"n":1}']
    queue.put(item("e", 5))
    queue.put(node_event("f", 6))  # every queued entry is bad: the Event is the loss
    assert [e.detail for e in dropped] == ['{"n":3}', '{"n":1}', '{"n":4}', '{"n":6}']
    assert [e.key for e in drain(queue)] == ["b", "e"]
