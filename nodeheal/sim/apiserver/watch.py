"""One watch stream: initial state or history replay, then live events, bookmarks and timeouts.

Events are written as chunked JSON lines. A clean end sends the terminating chunk; a dropped
connection (fault injection or server shutdown) closes the socket without it, which the client
sees as a ProtocolError exactly as with a real apiserver going away.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodeheal.sim.apiserver.faults import WatchControl
from nodeheal.sim.apiserver.resources import ResourceType
from nodeheal.sim.apiserver.selectors import FieldSelector, LabelSelector
from nodeheal.sim.apiserver.status import gone_watch_status
from nodeheal.sim.apiserver.store import ClusterStore, ResourceExpiredError, WatchEvent

JSON = dict[str, Any]


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


def run_watch(
    req: WatchRequest,
    store: ClusterStore,
    control: WatchControl,
    send: Callable[[JSON], None],
    stopping: Callable[[], bool],
) -> None:
    """Stream events through `send` until the timeout; raises WatchAbortedError for an abrupt end."""
    deadline = time.monotonic() + req.timeout
    next_bookmark = time.monotonic() + req.bookmark_interval

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

    if req.start_rv is None:
        items, last = store.list_objects(req.rtype.plural, req.namespace, req.labels, req.fields)
        for item in items:
            send({"type": "ADDED", "object": item})
    else:
        last = req.start_rv
    while True:
        try:
            events, reached = store.events_after(last, req.rtype.plural)
        except ResourceExpiredError as exc:
            send({"type": "ERROR", "object": gone_watch_status(exc.requested, exc.oldest)})
            return
        for event in events:
            kind = project(req, event)
            if kind is not None:
                send({"type": kind, "object": store.present(req.rtype.plural, event.object)})
        last = reached
        now = time.monotonic()
        if req.bookmarks and now >= next_bookmark:
            bookmark(last)
            next_bookmark = now + req.bookmark_interval
        if now >= deadline:
            if req.bookmarks:
                bookmark(last)
            return
        with store.changed:
            if store.resource_version == last and not (control.drop or control.expire or stopping()):
                wake_at = min(deadline, next_bookmark) if req.bookmarks else deadline
                store.changed.wait(max(min(wake_at - time.monotonic(), 1.0), 0.0))
        if control.drop or stopping():
            raise WatchAbortedError
        if control.expire:
            send(
                {
                    "type": "ERROR",
                    "object": gone_watch_status(last, max(store.oldest_resource_version, last + 1)),
                }
            )
            return
