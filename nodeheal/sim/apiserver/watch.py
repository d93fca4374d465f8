"""One watch stream: initial state or history replay, then live events, bookmarks and timeouts.

Events are written as chunked JSON lines. A clean end sends the terminating chunk; a dropped
connection (fault injection or server shutdown) closes the socket without it, which the client
sees as a ProtocolError exactly as with a real apiserver going away.

Errors found once the stream is open are ERROR events, never HTTP statuses, as in the real
cacher (``Cacher.Watch`` in k8s.io/apiserver pkg/storage/cacher/cacher.go returns them through
``newErrWatcher``): a version older than the history answers 410 Expired, one the store has not
reached yet answers 504 "Too large resource version" after the cache's wait. A watch whose
history runs out while it is being served (a consumer far behind) just ends, as the cacher ends
a watcher whose interval was invalidated. Timeouts and bookmarks run on the store's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodeheal.sim.apiserver.request_faults import WatchControl
from nodeheal.sim.apiserver.resources import ResourceType
from nodeheal.sim.apiserver.selectors import FieldSelector, LabelSelector
from nodeheal.sim.apiserver.status import expired, too_large_resource_version
from nodeheal.sim.apiserver.store import ClusterStore, ResourceExpiredError, WatchEvent

JSON = dict[str, Any]

#: Longest real-time wait between two looks at the control flags and the clock.
_POLL_SECONDS = 1.0


class WatchAbortedError(Exception):
    """The stream must end without its terminating chunk."""


@dataclass(frozen=True)
class WatchRequest:
    rtype: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    start_rv: int | None  # None: synthetic ADDED events for the current state first
    timeout: float
    bookmarks: bool
    bookmark_interval: float
    # When the request arrived, on the store's clock: the timeout and every wait count from here.
    started: float
    too_large_rv_wait: float = 3.0


def _matches(req: WatchRequest, obj: JSON | None) -> bool:
    if obj is None:
        return False
    if req.namespace is not None and obj["metadata"].get("namespace") != req.namespace:
        return False
    return req.labels.matches(obj["metadata"].get("labels")) and req.fields.matches(obj)


def project(req: WatchRequest, event: WatchEvent) -> str | None:
    """The event type this watcher sees, given its selectors (None: not at all)."""
    now, before = _matches(req, event.object), _matches(req, event.previous)
    if event.type != "MODIFIED":
        return event.type if now else None
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    if before:
        return "DELETED"
    return None


def _wait_until_fresh(req: WatchRequest, store: ClusterStore, stopping: Callable[[], bool]) -> bool:
    """``waitUntilFreshAndBlock`` in watch_cache.go: wait up to ``blockTimeout`` for the cache to
    reach the requested version. A watch served by etcd (no watch cache) just waits for it."""
    assert req.start_rv is not None
    if not req.rtype.watch_cached:
        return True
    clock = store.clock
    deadline = req.started + req.too_large_rv_wait
    with store.changed:
        while store.resource_version < req.start_rv:
            remaining = deadline - clock.now()
            if remaining <= 0 or stopping():
                return False
            store.changed.wait(min(remaining, _POLL_SECONDS))
    return True


def run_watch(
    req: WatchRequest,
    store: ClusterStore,
    control: WatchControl,
    send: Callable[[JSON], None],
    stopping: Callable[[], bool],
) -> None:
    """Stream events through `send` until the timeout; raises WatchAbortedError for an abrupt end."""
    clock = store.clock
    deadline = req.started + req.timeout
    next_bookmark = req.started + req.bookmark_interval
    plural = req.rtype.plural
    rtype = req.rtype

    def bookmark(rv: int) -> None:
        send(
            {
                "type": "BOOKMARK",
                "object": {
                    "kind": req.rtype.kind,
                    "apiVersion": req.rtype.api_version,
                    "metadata": {"resourceVersion": str(rv), "creationTimestamp": None},
                },
            }
        )

    def deliver(events: list[WatchEvent]) -> None:
        for event in events:
            kind = project(req, event)
            if kind is not None:
                # Stored objects, served in the version the watch asked for.
                send({"type": kind, "object": store.present(rtype, event.object)})

    if req.start_rv is None:
        items, last = store.list_objects(rtype, req.namespace, req.labels, req.fields)
        for item in items:
            send({"type": "ADDED", "object": item})
    else:
        if not _wait_until_fresh(req, store, stopping):
            send(
                {"type": "ERROR", "object": too_large_resource_version(req.start_rv, store.resource_version)}
            )
            return
        try:
            events, reached = store.events_after(req.start_rv, plural)
        except ResourceExpiredError as exc:
            send({"type": "ERROR", "object": expired(exc.message)})
            return
        deliver(events)
        last = max(req.start_rv, reached)
    while True:
        if control.drop or stopping():
            raise WatchAbortedError
        if control.error is not None:
            send({"type": "ERROR", "object": control.error})
            return
        if control.expire:
            send({"type": "ERROR", "object": expired(store.expired_message(plural, last))})
            return
        try:
            events, reached = store.events_after(last, plural)
        except ResourceExpiredError:
            return
        deliver(events)
        last = max(last, reached)
        now = clock.now()
        if req.bookmarks and now >= next_bookmark:
            bookmark(last)
            next_bookmark = now + req.bookmark_interval
        if now >= deadline:
            if req.bookmarks:
                bookmark(last)
            return
        with store.changed:
            if store.resource_version <= last and not (
                control.drop or control.expire or control.error is not None or stopping()
            ):
                wake_at = min(deadline, next_bookmark) if req.bookmarks else deadline
                store.changed.wait(max(min(wake_at - clock.now(), _POLL_SECONDS), 0.0))
