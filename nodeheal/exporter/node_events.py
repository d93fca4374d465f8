"""Ship Kubernetes Events about Nodes as ``Node Event Observed`` (on by default; Warnings only).

NPD reports temporary problems (a single Xid, an OOM kill) and the EKS node monitoring agent its
``*Warning`` findings as Events, not conditions. No single one is a fault to act on, but repeated
ones predict a failing GPU (issue 31): each shipped detail is one occurrence, counted per
instance downstream, so they travel under their own detail type and contract
(nodeheal/contracts/node-event-observed-1.1.json).

A recurring Event is one object updated in place, and which counter rises depends on the API
that recorded it. Through core/v1 (client-go's ``tools/record``, NPD, the kubelet) ``count`` and
``lastTimestamp`` rise. Through events.k8s.io/v1 (``tools/events``) the recurrence goes to
``series.count`` and ``series.lastObservedTime``, and ``count`` (``deprecatedCount`` there) may
not change at all; the exporter reads core/v1, which shows both, so it watches both counters.
The shipper deduplicates on (uid, count, series.count): an update that raises either counter is
a new occurrence, shipped once; a watch replay after a reconnect, or a series heartbeat that
raises neither, is not. On the first list after start the existing Events are remembered without
shipping them (history is not news); on later relists (after 410 Gone) the ones not seen yet are
shipped.

NodeHeal's own Events (``reportingComponent`` ``nodeheal.io/remediation``, what
:mod:`nodeheal.workflow.step_events` writes) are never shipped back (docs/architecture.md, D10): the
story of a remediation is not a signal that the node degraded. They are counted as ``outcome="nodeheal"``.

Which instance an Event is about (D10). Counts are kept per EC2 instance (D1), and a Node name
outlives its instance (EC2 reuses private IPs, so a new Node can take an old name), so the
shipper names ``detail.node.instanceID`` and ``bootID`` only when the Event is provably about the
Node object it has cached under that name (:func:`attributed_node`):

* the Event's ``involvedObject.uid`` is that Node's uid; or
* the Event carries no usable uid and it is newer than that Node object: its
  ``firstTimestamp`` (``eventTime`` through events.k8s.io) is after the Node's
  ``creationTimestamp``, strictly, since both are whole seconds.

Otherwise (another uid, an Event older than the Node, no cached Node of that name) both are
empty and the Event counts for no instance. A uid is unusable when it is empty or the Node's
name. What node-problem-detector puts there depends on its version
(kubernetes/node-problem-detector, pkg/exporters/k8sexporter/problemclient/problem_client.go):

* v1.34.x and older (last checked: tag v1.34.4) record against ``getNodeRef``, whose UID is
  ``types.UID(nodeName)``: the name, not a uid ("Remove the invalid node.UID", 88446920);
* v1.35.0 to v1.37.0-alpha.1 (the newest tag checked) record with no UID at all;
* master since c1d461ff ("Set the Node UID on recorded events", 2026-07-23, in no tag yet)
  records against ``nodeRefWithUID()``: the real Node UID, from the Node read at start or any
  status patch, or no UID before the first of those succeeds. It is resolved once, so after the
  Node object is deleted and created again under the same name NPD keeps sending the old uid
  until it restarts; such Events match no cached Node and count for no instance.

The uid is trusted over the timestamps whenever it is usable: ``firstTimestamp`` is written on
the reporting host's clock and ``creationTimestamp`` on the API server's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from nodeheal.errors import InvalidEventError
from nodeheal.events import DETAIL_TYPE_NODE_EVENT, SCHEMA_VERSION
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.publisher import fit_detail
from nodeheal.exporter.queue import QueuedEvent
from nodeheal.exporter.transitions import CachedNode
from nodeheal.kube_event_body import is_nodeheal_event
from nodeheal.payload import MAX_REASON_BYTES, bound_message, cut_text
from nodeheal.timestamps import format_timestamp, parse_timestamp, utc_now

NODE_EVENTS_PATH = "/api/v1/events"
NODE_EVENTS_FIELD_SELECTOR = "involvedObject.kind=Node"


def _occurrence(event: Mapping[str, Any]) -> tuple[int, int]:
    """The Event's two occurrence counters: core ``count`` (an unset one is the first occurrence)
    and ``series.count`` (0 without a series; a series starts at 2)."""
    series = event.get("series") or {}
    return int(event.get("count") or 1), int(series.get("count") or 0)


def _first_seen(event: Mapping[str, Any]) -> datetime | None:
    """When the Event first occurred: core ``firstTimestamp``, else events.k8s.io ``eventTime``."""
    for key in ("firstTimestamp", "eventTime"):
        value = event.get(key)
        if value:
            try:
                return parse_timestamp(value, key)
            except InvalidEventError:
                return None
    return None


def attributed_node(event: Mapping[str, Any], cached: CachedNode | None) -> CachedNode | None:
    """``cached`` (the exporter's Node of the Event's name) when the Event is about that very Node
    object, else None (D10; the rules are in the module's docstring)."""
    if cached is None:
        return None
    involved = event.get("involvedObject") or {}
    uid = str(involved.get("uid") or "")
    if uid and uid != str(involved.get("name") or ""):
        return cached if uid == cached.uid else None
    first = _first_seen(event)
    if first is None or cached.created is None:
        return None  # nothing to prove the Event is not about an earlier Node of that name
    # Strictly after: both timestamps are whole seconds, so an Event the old Node's NPD wrote in
    # the second the new Node was created would otherwise count on the new instance (seed 723 of
    # the seeded simulation, I19). An Event of the new Node's first second counts for none.
    return cached if first > cached.created else None


def node_event_detail(
    cluster: str,
    event: Mapping[str, Any],
    observed_at: datetime,
    node: CachedNode | None = None,
) -> dict[str, Any]:
    """The ``Node Event Observed`` detail (nodeheal/contracts/node-event-observed-1.1.json).

    ``node`` is the Node the Event was attributed to (:func:`attributed_node`); without one,
    ``instanceID`` and ``bootID`` are empty and the Event counts for no instance.
    """
    metadata = event.get("metadata") or {}
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    series = event.get("series") or {}
    return {
        "schemaVersion": SCHEMA_VERSION,
        "cluster": cluster,
        "node": {
            "name": str(involved.get("name") or ""),
            # The Node the Event was attributed to names its own uid: NPD v1.35 records no uid.
            "uid": node.uid if node is not None else str(involved.get("uid") or ""),
            "instanceID": node.instance_id if node is not None else "",
            "bootID": node.boot_id if node is not None else "",
        },
        "event": {
            "uid": str(metadata.get("uid") or ""),
            "type": str(event.get("type") or ""),
            # Bounded as a condition's are (D17): the message to 4 KiB keeping the most severe
            # Xid lines whole, so the counted Xid survives a long aggregated message.
            "reason": cut_text(str(event.get("reason") or ""), MAX_REASON_BYTES),
            "message": bound_message(str(event.get("message") or "")),
            # Occurrences so far, whichever API counted them.
            "count": max(_occurrence(event)),
            "source": str(source.get("component") or event.get("reportingComponent") or ""),
            "firstTimestamp": event.get("firstTimestamp") or event.get("eventTime"),
            "lastTimestamp": (
                event.get("lastTimestamp") or series.get("lastObservedTime") or event.get("eventTime")
            ),
        },
        "observedAt": format_timestamp(observed_at, millis=True),
    }


class NodeEventShipper:
    """A :class:`~nodeheal.exporter.watcher.WatchHandler` for core/v1 Events about Nodes, whichever
    API recorded them."""

    def __init__(
        self,
        cluster: str,
        submit: Callable[[list[QueuedEvent]], None],
        metrics: Metrics,
        nodes: Callable[[str], CachedNode | None],
        *,
        reasons: Sequence[str] = (),
        types: Sequence[str] = ("Warning",),
        memory: int = 50_000,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._cluster = cluster
        self._submit = submit
        self._metrics = metrics
        # Read-only: the Node watch's cache (Pipeline.cached_node); the shipper never watches Nodes.
        self._nodes = nodes
        self._reasons = frozenset(reasons)
        self._types = frozenset(types)
        self._memory = memory
        self._clock = clock
        # uid -> the highest (count, series.count) seen, each counter on its own.
        self._seen: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._listed_once = False
        self._in_list = False

    def _wanted(self, event: Mapping[str, Any]) -> bool:
        if (event.get("involvedObject") or {}).get("kind") != "Node":
            return False
        if self._types and event.get("type") not in self._types:
            return False
        return not self._reasons or event.get("reason") in self._reasons

    def _fresh(self, event: Mapping[str, Any]) -> bool:
        """Record the Event's counters; True if this occurrence was not seen before: the Event is
        new, or either counter rose (a recurrence through either API)."""
        uid = str((event.get("metadata") or {}).get("uid") or "")
        if not uid:
            return False
        count, series_count = _occurrence(event)
        seen = self._seen.get(uid)
        if seen is not None and count <= seen[0] and series_count <= seen[1]:
            return False
        self._seen[uid] = (
            (count, series_count) if seen is None else (max(count, seen[0]), max(series_count, seen[1]))
        )
        self._seen.move_to_end(uid)
        while len(self._seen) > self._memory:
            self._seen.popitem(last=False)
        return True

    def _ship(self, events: Sequence[Mapping[str, Any]]) -> None:
        items: list[QueuedEvent] = []
        now = self._clock()
        for event in events:
            if is_nodeheal_event(event):
                # NodeHeal's own story of a remediation is never a degradation signal (D10).
                self._metrics.inc("node_events_seen_total", outcome="nodeheal")
                continue
            if not self._wanted(event):
                self._metrics.inc("node_events_seen_total", outcome="filtered")
                continue
            if not self._fresh(event):
                self._metrics.inc("node_events_seen_total", outcome="duplicate")
                continue
            if self._in_list and not self._listed_once:
                self._metrics.inc("node_events_seen_total", outcome="history")
                continue
            self._metrics.inc("node_events_seen_total", outcome="shipped")
            name = str((event.get("involvedObject") or {}).get("name") or "")
            node = attributed_node(event, self._nodes(name))
            if node is None:
                self._metrics.inc("node_events_unattributed_total")
            detail = node_event_detail(self._cluster, event, now, node)
            items.append(
                QueuedEvent(
                    key=f"event/{name}",
                    detail_type=DETAIL_TYPE_NODE_EVENT,
                    detail=fit_detail(detail),
                    # An occurrence a count rests on and nothing re-emits: given up after healthy
                    # transitions, before bad ones (nodeheal.exporter.queue).
                    healthy_direction=False,
                    node_event=True,
                )
            )
        if items:
            self._submit(items)

    @property
    def listed(self) -> bool:
        """The first list is done: Events recorded from now on are news, and are shipped."""
        return self._listed_once

    def begin_list(self) -> None:
        self._in_list = True

    def list_page(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._ship(items)

    def end_list(self) -> None:
        self._in_list = False
        self._listed_once = True

    def on_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        if event_type == "DELETED":
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            self._seen.pop(uid, None)
            return
        self._ship([obj])
