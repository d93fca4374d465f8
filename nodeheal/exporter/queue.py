"""The bounded buffer between the watch and EventBridge.

The watch must never wait for EventBridge (a slow bus would make the watch fall behind until its
resourceVersion expires), so :meth:`EventQueue.put` never blocks. When the buffer is full the
oldest *healthy-direction* event is dropped first: losing a "GPU recovered" costs at most a
redundant alert, losing a "GPU broke" costs a training job. Only when every queued event is bad is
the oldest one dropped, and the periodic resync re-emits it while it is still bad.

Per-node order: a batch holds at most one event per node, and the publisher finishes a batch
(every entry delivered or given up) before it takes the next, so a node's events reach the bus in
the order they were observed even when single entries are retried.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


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
        self._healthy: deque[int] = deque()  # sequence numbers of healthy-direction items, oldest first
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
                if item.healthy_direction:
                    self._healthy.append(seq)
                self._cond.notify()
        if dropped is not None and self._on_drop is not None:
            self._on_drop(dropped)

    def _make_room(self, incoming: QueuedEvent) -> QueuedEvent:
        while self._healthy:
            seq = self._healthy.popleft()
            victim = self._items.pop(seq, None)
            if victim is not None:
                return victim
        if incoming.healthy_direction:
            return incoming  # every queued event is bad: the new healthy one is the cheapest loss
        oldest = next(iter(self._items))
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
            self._prune_healthy()
            return batch

    def _prune_healthy(self) -> None:
        # Taken events leave stale sequence numbers behind; drop them so the index stays bounded.
        while self._healthy and self._healthy[0] not in self._items:
            self._healthy.popleft()
        if len(self._healthy) > 2 * self._capacity:
            self._healthy = deque(seq for seq in self._healthy if seq in self._items)

    def clear(self) -> int:
        """Drop everything (this replica stopped leading); returns how many were queued."""
        with self._cond:
            count = len(self._items)
            self._items.clear()
            self._healthy.clear()
            return count

    def wake(self) -> None:
        """Wake a waiting :meth:`take_batch` (used on shutdown)."""
        with self._cond:
            self._cond.notify_all()
