"""Between the watch and the queue: transitions, leadership, replay on takeover, periodic resync.

Every replica watches and tracks; only the leader enqueues for publishing. A standby keeps the
events it produced in the last ``standby_replay_seconds``: when it becomes leader it enqueues those
(the dead leader may never have shipped them: queued, or mid-retry during an EventBridge outage)
followed by a resync of every currently-bad condition from memory. Replayed duplicates are fine;
the workflow deduplicates. A lost transition is not.

One lock serialises tracker updates and their hand-off to the queue, so per-node order holds
across the watcher, the elector and the resync timer. The Node Events shipper reads the tracker's
Nodes through :meth:`Pipeline.cached_node` under the same lock: one Node watch feeds both.

A standby keeps Node Events in a replay buffer of their own: Events are far more numerous than
transitions (one Warning per node per minute on a large cluster fills 10,000 entries in two
minutes), and sharing one bounded buffer would let a flood of them push a "GPU broke" out of
what the next leader replays.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodeheal.events import DETAIL_TYPE_CONDITION_CHANGED, NodeConditionEvent
from nodeheal.exporter.logs import fields
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.publisher import fit_detail
from nodeheal.exporter.queue import EventQueue, QueuedEvent
from nodeheal.exporter.transitions import CachedNode, TransitionTracker

logger = logging.getLogger(__name__)


def to_queued(event: NodeConditionEvent) -> QueuedEvent:
    return QueuedEvent(
        key=event.node.name,
        detail_type=DETAIL_TYPE_CONDITION_CHANGED,
        detail=fit_detail(event.to_detail()),
        healthy_direction=not event.is_bad,
        resync=event.resync,
    )


class Pipeline:
    def __init__(
        self,
        tracker: TransitionTracker,
        queue: EventQueue,
        metrics: Metrics,
        *,
        leading: bool,
        replay_seconds: float,
        replay_capacity: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tracker = tracker
        self._queue = queue
        self._metrics = metrics
        self._leading = leading
        self._replay_seconds = replay_seconds
        self._recent: deque[tuple[float, QueuedEvent]] = deque(maxlen=replay_capacity)
        self._recent_node_events: deque[tuple[float, QueuedEvent]] = deque(maxlen=replay_capacity)
        self._clock = clock
        self._lock = threading.RLock()
        metrics.set("is_leader", 1.0 if leading else 0.0)

    @property
    def leading(self) -> bool:
        with self._lock:
            return self._leading

    # --- from the watcher ---------------------------------------------------------------------

    def node_changed(self, obj: Mapping[str, Any]) -> None:
        with self._lock:
            self._emit(self._tracker.observe(obj))

    def node_deleted(self, obj: Mapping[str, Any]) -> None:
        with self._lock:
            self._tracker.forget(obj)

    def begin_list(self) -> None:
        with self._lock:
            self._tracker.begin_relist()

    def list_page(self, items: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            self._emit(self._tracker.relist_page(items))

    def end_list(self) -> None:
        with self._lock:
            self._tracker.end_relist()

    # --- from the elector and the resync timer -------------------------------------------------

    def start_leading(self) -> None:
        with self._lock:
            self._leading = True
            self._metrics.set("is_leader", 1.0)
            self._prune()
            # Both buffers in the order they were observed (each is already in that order).
            replay = [
                item
                for _, item in heapq.merge(self._recent, self._recent_node_events, key=lambda entry: entry[0])
                if not item.resync
            ]
            for item in replay:
                self._queue.put(item)
            resync = self._tracker.resync_from_memory()
            logger.info(
                "shipping: replaying recent transitions and resyncing bad conditions",
                extra=fields(replayed=len(replay), resync=len(resync)),
            )
            self._emit(resync)

    def stop_leading(self) -> None:
        with self._lock:
            self._leading = False
            self._metrics.set("is_leader", 0.0)
            handed_over = self._queue.clear()
            logger.info("standing by; the new leader replays the queue", extra=fields(queued=handed_over))

    def resync(self) -> None:
        with self._lock:
            events = self._tracker.resync_from_memory()
            if events:
                logger.info("periodic resync", extra=fields(events=len(events)))
            self._emit(events)

    def submit(self, items: Iterable[QueuedEvent]) -> None:
        """Hand over already-built entries (the Node Events shipper)."""
        with self._lock:
            for item in items:
                self._put(item)

    # --- for the Node Events shipper -----------------------------------------------------------

    def cached_node(self, name: str) -> CachedNode | None:
        """The Node of this name as the Node watch last saw it (read-only; None if unknown)."""
        with self._lock:
            return self._tracker.cached(name)

    # --- internals ------------------------------------------------------------------------------

    def _emit(self, events: Iterable[NodeConditionEvent]) -> None:
        for event in events:
            self._metrics.inc(
                "transitions_total",
                direction="bad" if event.is_bad else "healthy",
                resync="true" if event.resync else "false",
            )
            if not event.resync:
                # A resync re-states a condition that did not change; only changes are counted here.
                self._metrics.condition_transition(event.condition.type, event.condition.status)
            logger.info(
                "condition transition",
                extra=fields(
                    node=event.node.name,
                    condition=event.condition.type,
                    status=event.condition.status,
                    reason=event.condition.reason,
                    previous=None if event.previous is None else event.previous.status,
                    resync=event.resync,
                    shipping=self._leading,
                ),
            )
            self._put(to_queued(event))

    def _put(self, item: QueuedEvent) -> None:
        recent = self._recent_node_events if item.node_event else self._recent
        recent.append((self._clock(), item))
        if self._leading:
            self._queue.put(item)
            self._metrics.set("queue_depth", len(self._queue))
        elif len(recent) % 256 == 0:
            self._prune()

    def _prune(self) -> None:
        horizon = self._clock() - self._replay_seconds
        for recent in (self._recent, self._recent_node_events):
            while recent and recent[0][0] < horizon:
                recent.popleft()


class NodeWatchHandler:
    """Adapts the generic watcher's callbacks to the pipeline."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    def begin_list(self) -> None:
        self._pipeline.begin_list()

    def list_page(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._pipeline.list_page(items)

    def end_list(self) -> None:
        self._pipeline.end_list()

    def on_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        if event_type == "DELETED":
            self._pipeline.node_deleted(obj)
        else:
            self._pipeline.node_changed(obj)
