"""node-problem-detector's Warning Events, written to the local cluster's API server as NPD writes them.

NPD records a temporary problem (an informational Xid, an OOM kill) with client-go's legacy event
recorder, one per monitor source (``pkg/exporters/k8sexporter/problemclient/problem_client.go``).
:mod:`nodeheal.sim.event_recorder` models that recorder: its spam filter, its aggregation and its
count patches. This module is its sink on the local API server: a created Event is a POST of the
Event (the server gives it its uid and creationTimestamp), a repeat is the recorder's strategic
merge PATCH of ``count``, ``lastTimestamp`` and ``message``. So the exporter watching Events sees
exactly the ADDED and MODIFIED a real cluster would send, and what the recorder held back never
reaches it.

The recorder's clock is its own: a scenario may set it in the past to tell, in seconds, a story
that took an hour on the node (the spam filter refills one Event per 300 s), while the Events it
writes stay within the counting window of the functions that read them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from nodeheal.sim.apiserver.status import ApiError
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.event_recorder import (
    Event,
    NpdProblemClient,
    Recording,
    StoredEvent,
    rfc3339,
)

JSON = dict[str, Any]
#: The monitor source of NodeHeal's GPU log monitor (deploy/node-problem-detector/gpu-monitor.json).
GPU_MONITOR = "gpu-monitor"


def _whole_seconds(nanos: int) -> int:
    return nanos - nanos % 1_000_000_000


class ApiServerEventSink:
    """The recorder's :class:`~nodeheal.sim.event_recorder.EventStore` on the local API server."""

    def __init__(self, store: ClusterStore) -> None:
        self._store = store
        self._kept: dict[tuple[str, str], StoredEvent] = {}
        self._lock = threading.Lock()

    def create(self, event: Event, now_ns: int) -> StoredEvent | None:
        body = StoredEvent(
            event=replace(
                event,
                first_timestamp_ns=_whole_seconds(event.first_timestamp_ns),
                last_timestamp_ns=_whole_seconds(event.last_timestamp_ns),
            ),
            uid="",
            resource_version="",
            creation_timestamp_ns=_whole_seconds(now_ns),
        ).to_json()
        for field in ("uid", "resourceVersion", "creationTimestamp"):
            body["metadata"].pop(field, None)
        try:
            created = self._store.create("events", body, event.namespace)
        except ApiError as error:
            if error.code == 409:
                return None  # AlreadyExists: the recorder drops the Event (event.go, recordEvent)
            raise
        stored = StoredEvent(
            event=body_event(event),
            uid=str(created["metadata"]["uid"]),
            resource_version=str(created["metadata"]["resourceVersion"]),
            creation_timestamp_ns=_whole_seconds(now_ns),
        )
        with self._lock:
            self._kept[event.namespace, event.name] = stored
        return stored

    def patch(self, event: Event) -> StoredEvent | None:
        with self._lock:
            kept = self._kept.get((event.namespace, event.name))
        if kept is None:
            return None
        patch = {
            "count": event.count,
            "lastTimestamp": rfc3339(event.last_timestamp_ns),
            "message": event.message,
        }
        try:
            patched = self._store.patch(
                "events", event.name, "application/strategic-merge-patch+json", patch, event.namespace
            )
        except ApiError as error:
            if error.code == 404:
                return None  # gone (its TTL): the recorder creates it again
            raise
        stored = replace(
            kept,
            event=replace(
                kept.event,
                count=event.count,
                last_timestamp_ns=_whole_seconds(event.last_timestamp_ns),
                message=event.message,
            ),
            resource_version=str(patched["metadata"]["resourceVersion"]),
        )
        with self._lock:
            self._kept[event.namespace, event.name] = stored
        return stored


def body_event(event: Event) -> Event:
    return replace(
        event,
        first_timestamp_ns=_whole_seconds(event.first_timestamp_ns),
        last_timestamp_ns=_whole_seconds(event.last_timestamp_ns),
    )


class NpdOnNodes:
    """One NPD per node, each with its recorders, writing to the local API server."""

    def __init__(self, store: ClusterStore, clock: Callable[[], int]) -> None:
        self._sink = ApiServerEventSink(store)
        self._clock = clock
        self._npds: dict[str, NpdProblemClient] = {}

    def record(self, node: str, reason: str, message: str, *, source: str = GPU_MONITOR) -> Recording:
        """One occurrence NPD reports as a Warning Event (a temporary problem)."""
        npd = self._npds.get(node)
        if npd is None:
            npd = self._npds[node] = NpdProblemClient(node, self._sink, self._clock)
        return npd.eventf("Warning", source, reason, message)
