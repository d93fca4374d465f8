"""The bounded buffer between the watch and EventBridge.

The watch must never wait for EventBridge (a slow bus would make the watch fall behind until its
resourceVersion expires), so :meth:`EventQueue.put` never blocks. When the buffer is full it
gives up entries in this order (:class:`DropOrder`), the oldest of a class first:

1. *healthy-direction* transitions (and heartbeats): losing a "GPU recovered" costs at most a
   redundant alert;
2. Node Events: each is one occurrence a count of a degrading GPU rests on, and, unlike a bad
   condition, nothing re-emits it; but a flood of Warning Events must never push out a
   transition that starts a remediation;
3. bad transitions: losing a "GPU broke" costs a training job. Only when every queued entry is
   a bad transition is the oldest one dropped, and the periodic resync re-emits it while it is
   still bad.

An incoming entry of a class below everything droppable in the queue is itself the one dropped.

Per-node order: a batch holds at most one event per node, and the publisher finishes a batch
(every entry delivered or given up) before it takes the next, so a node's events reach the bus in
the order they were observed even when single entries are retried.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum


class DropOrder(IntEnum):
    """Which entries a full queue gives up first: the lowest class, oldest first."""

    HEALTHY = 0
    NODE_EVENT = 1
    BAD = 2


@dataclass(frozen=True, slots=True)
class QueuedEvent:
    """One EventBridge entry waiting to be published."""

    #: Ordering key: events with the same key are published in order (the node name).
    key: str
    detail_type: str
    #: The serialised ``Detail`` (its size counts toward the 256 KB batch limit).
    detail: str
    #: True when the event moves toward healthy (or carries no problem); dropped first on overflow.
    healthy_direction: bool
    #: Re-emission of a known state rather than an observed change.
    resync: bool = False
    #: A ``Node Event Observed``: dropped after healthy-direction entries, before bad transitions.
    node_event: bool = False

    @property
    def drop_order(self) -> DropOrder:
        if self.healthy_direction:
            return DropOrder.HEALTHY
        return DropOrder.NODE_EVENT if self.node_event else DropOrder.BAD

    @property
    def size(self) -> int:
        return len(self.detail.encode("utf-8")) + len(self.detail_type) + 64


class EventQueue:
    def __init__(self, capacity: int, on_drop: Callable[[QueuedEvent], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._on_drop = on_drop
        self._items: dict[int, QueuedEvent] = {}  # insertion-ordered: the FIFO
        # Sequence numbers of the droppable classes (all but BAD), oldest first, one deque per
        # class in DropOrder; taken items leave stale numbers behind, skipped and pruned lazily.
        self._droppable: tuple[deque[int], ...] = tuple(deque() for _ in range(DropOrder.BAD))
        self._next = 0
        self._cond = threading.Condition()

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, item: QueuedEvent) -> None:
        """Append; never blocks. On overflow drop per the module's policy and report it."""
        dropped: QueuedEvent | None = None
        with self._cond:
            if len(self._items) >= self._capacity:
                dropped = self._make_room(item)
            if dropped is not item:
                seq = self._next
                self._next += 1
                self._items[seq] = item
                order = item.drop_order
                if order < DropOrder.BAD:
                    self._droppable[order].append(seq)
                self._cond.notify()
        if dropped is not None and self._on_drop is not None:
            self._on_drop(dropped)

    def _make_room(self, incoming: QueuedEvent) -> QueuedEvent:
        for order, sequence in enumerate(self._droppable):
            while sequence:
                victim = self._items.pop(sequence.popleft(), None)
                if victim is not None:
                    return victim
            if incoming.drop_order == order:
                return incoming  # nothing queued is cheaper to lose than the newcomer
        oldest = next(iter(self._items))  # every queued entry is a bad transition, and so is this
        return self._items.pop(oldest)

    def take_batch(self, max_entries: int, max_bytes: int, timeout: float | None) -> list[QueuedEvent]:
        """Up to ``max_entries`` events in FIFO order, at most one per key, within ``max_bytes``.

        Waits up to ``timeout`` seconds for the first event; returns [] if none arrived.
        """
        with self._cond:
            if not self._items and not self._cond.wait_for(lambda: bool(self._items), timeout):
                return []
            batch: list[QueuedEvent] = []
            taken: list[int] = []
            keys: set[str] = set()
            size = 0
            for seq, item in self._items.items():
                if len(batch) >= max_entries:
                    break
                if item.key in keys:
                    continue
                if batch and size + item.size > max_bytes:
                    break
                keys.add(item.key)
                batch.append(item)
                taken.append(seq)
                size += item.size
            for seq in taken:
                del self._items[seq]
            self._prune_droppable()
            return batch

    def _prune_droppable(self) -> None:
        # Taken events leave stale sequence numbers behind; drop them so the indexes stay bounded.
        for sequence in self._droppable:
            while sequence and sequence[0] not in self._items:
                sequence.popleft()
            if len(sequence) > 2 * self._capacity:
                live = [seq for seq in sequence if seq in self._items]
                sequence.clear()
                sequence.extend(live)

    def clear(self) -> int:
        """Drop everything (this replica stopped leading); returns how many were queued."""
        with self._cond:
            count = len(self._items)
            self._items.clear()
            for sequence in self._droppable:
                sequence.clear()
            return count

    def wake(self) -> None:
        """Wake a waiting :meth:`take_batch` (used on shutdown)."""
        with self._cond:
            self._cond.notify_all()
