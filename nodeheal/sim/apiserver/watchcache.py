"""The watch cache's sliding window of events, one per cached resource, as the real cacher keeps it.

kube-apiserver serves a watch that resumes from a resourceVersion out of a per-resource window of
recent events, not out of etcd (k8s.io/apiserver ``pkg/storage/cacher/watch_cache.go``, v0.33.1:
https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/storage/cacher/watch_cache.go). The window
is bounded by count, and its capacity follows the age of the events:

* it starts at 100 events (``defaultLowerBoundCapacity``) and never drops below that;
* when full, it doubles (up to ``defaultUpperBoundCapacity``, 100 Ki) if its oldest event is younger
  than ``eventFreshDuration`` -- 75 s, ``DefaultEventFreshDuration`` in ``cacher.go`` -- and halves
  if even the event a quarter of the window from the newest is older than that;
* otherwise a full window drops its oldest event for each new one (``updateCache``).

So a quiet resource keeps its last 100 events however old they are, and a busy one keeps at least
about 75 s of them. A watch from a resourceVersion older than the window answers ``410 Expired``
"too old resource version: R (O)" (``getAllEventsSinceLocked``), where O is one less than the
oldest version the window can still deliver. A cacher that re-lists (an apiserver restart, its
own etcd watch failing) starts an empty window at the list's version (``Replace``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from nodeheal.sim.apiserver.messages import WATCH_CACHE_TOO_OLD_RESOURCE_VERSION


@dataclass(frozen=True)
class WatchEvent:
    """One change of a stored object at its revision, as the cache keeps it and a watch sends it."""

    resource_version: int
    resource: str
    type: str
    object: dict[str, Any]
    # The object before this change, so a filtered watch can turn a MODIFIED that leaves (or
    # enters) its selector into DELETED (or ADDED), as the watch cache does, and a read as of an
    # older revision can undo it. None for ADDED.
    previous: dict[str, Any] | None


#: ``defaultLowerBoundCapacity`` in watch_cache.go.
LOWER_BOUND_CAPACITY = 100
#: ``defaultUpperBoundCapacity`` in watch_cache.go (100 * 1024).
UPPER_BOUND_CAPACITY = 100 * 1024
#: ``DefaultEventFreshDuration`` in cacher.go: the 60 s bookmark frequency plus 15 s.
EVENT_FRESH_SECONDS = 75.0


class ResourceExpiredError(Exception):
    """A watch asked for history the server no longer has; ``message`` is the Status message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class _Cached:
    event: WatchEvent
    record_time: float


class WatchCache:
    """The window of one resource's events. Not thread-safe: the store's lock guards it."""

    def __init__(self, list_resource_version: int) -> None:
        self.capacity = LOWER_BOUND_CAPACITY
        self._events: deque[_Cached] = deque()
        self._list_resource_version = list_resource_version
        self._removed_since_relist = False

    def __len__(self) -> int:
        return len(self._events)

    def add(self, event: WatchEvent, now: float) -> None:
        """``updateCache``: resize if the window's age says so, then drop the oldest if full."""
        self._resize(now)
        if len(self._events) == self.capacity:
            self._events.popleft()
            self._removed_since_relist = True
        self._events.append(_Cached(event, now))

    def _resize(self, now: float) -> None:
        """``resizeCacheLocked``, on a deque: index 0 is ``startIndex``, the right end ``endIndex``."""
        if len(self._events) != self.capacity:
            return
        if now - self._events[0].record_time < EVENT_FRESH_SECONDS:
            self.capacity = min(self.capacity * 2, UPPER_BOUND_CAPACITY)
            return
        # ``w.cache[(w.endIndex-w.capacity/4)%w.capacity]`` on a full window.
        if now - self._events[self.capacity - self.capacity // 4].record_time > EVENT_FRESH_SECONDS:
            smaller = max(self.capacity // 2, LOWER_BOUND_CAPACITY)
            if smaller < self.capacity:
                # ``doCacheResizeLocked`` keeps the newest events; it does not mark a removal, but
                # the full window drops one more right after, which does.
                for _ in range(self.capacity - smaller):
                    self._events.popleft()
                self.capacity = smaller

    def replace(self, list_resource_version: int) -> None:
        """``Replace``: the cacher re-listed at this version; the window starts over, empty."""
        self._events.clear()
        self._removed_since_relist = False
        self._list_resource_version = list_resource_version

    def oldest_deliverable(self) -> int:
        """The oldest resourceVersion a watch can still be given events from, less one: a watch
        from this version or later is served, from anything older is 410."""
        if not self._removed_since_relist or not self._events:
            return self._list_resource_version
        return self._events[0].event.resource_version - 1

    def since(self, resource_version: int) -> list[WatchEvent]:
        """Events newer than ``resource_version``; raises the cacher's 410 if it is too old."""
        oldest = self.oldest_deliverable()
        if resource_version < oldest:
            raise ResourceExpiredError(
                WATCH_CACHE_TOO_OLD_RESOURCE_VERSION.format(requested=resource_version, oldest=oldest)
            )
        newer: list[WatchEvent] = []
        # The window is ordered; walk back from the newest, so a caught-up watch costs nothing.
        for cached in reversed(self._events):
            if cached.event.resource_version <= resource_version:
                break
            newer.append(cached.event)
        newer.reverse()
        return newer
