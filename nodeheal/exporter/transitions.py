"""From Node objects to condition transitions: the exporter's only decision.

The tracker keeps, per node, the (status, reason) of each watched condition and nothing else, so
memory stays small on a 5,000-node cluster and the hot path is one dict comparison: a heartbeat
(``lastHeartbeatTime``, resourceVersion churn, a label change) changes neither and emits nothing.

It reads the raw JSON of a Node (the dict the API server sent), never the ``kubernetes`` client's
models; ``benchmarks/exporter_throughput.py`` measures why.

Rules:

* a watched condition whose (status, reason) changed emits one event with ``previous``;
* a node or condition seen for the first time emits only if it is bad (``previous`` null), so a
  node joining the cluster healthy costs nothing;
* after every (re)list each currently-bad condition is emitted once with ``resync: true`` (the
  workflow deduplicates), and a condition that recovered while the watch was down emits its
  transition; nodes gone from the list are forgotten silently;
* a deleted node emits nothing, bad or not: there is nothing left to remediate;
* the tracker also keeps, per node, what a Node Event needs to name its instance (D10): the Node's
  uid, creationTimestamp, EC2 instance (from ``spec.providerID``) and ``status.nodeInfo.bootID``,
  read-only through :meth:`TransitionTracker.cached` (:class:`CachedNode`). The exporter watches
  Nodes once; the Node Events shipper reads this cache instead of watching them a second time;
* what an event carries is bounded (D17): the condition's message is cut to 4 KiB keeping its Xid
  lines whole, its reason to 1 KiB, and the labels to 16 KiB, so the workflow's state stays small
  whatever a detector or a user writes on the Node (``nodeheal.payload``, ``bound_labels``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeheal.conditions import Condition, is_bad_status
from nodeheal.errors import InvalidEventError
from nodeheal.events import (
    NodeConditionEvent,
    NodeIdentity,
    PreviousState,
    instance_id_from_provider_id,
    node_identity,
)
from nodeheal.payload import bounded_condition
from nodeheal.timestamps import parse_timestamp, utc_now

_StatusReason = tuple[str, str]


@dataclass(frozen=True, slots=True)
class CachedNode:
    """What the exporter last saw of one Node object: enough to tell whether a Node Event is about
    it, and to name its instance and boot (docs/architecture.md, D10 and D19)."""

    name: str
    #: metadata.uid: a new Node object under a reused name has another.
    uid: str
    #: metadata.creationTimestamp; None when absent or unreadable.
    created: datetime | None
    #: The EC2 instance from spec.providerID ("" when it is not an EC2 providerID).
    instance_id: str
    #: status.nodeInfo.bootID ("" when the kubelet has not reported it).
    boot_id: str


@dataclass(slots=True)
class _NodeState:
    uid: str
    #: condition type -> (status, reason) of every watched condition.
    seen: dict[str, _StatusReason]
    #: The full bad conditions and the node's identity, kept only while something is bad so a
    #: resync from memory (periodic, or on becoming leader) can re-emit them without an API call.
    bad: dict[str, Condition] = field(default_factory=dict)
    identity: NodeIdentity | None = None
    #: For :class:`CachedNode`: kept raw and compared on every update (two dict reads), so a
    #: reboot (new bootID) is seen even on the heartbeat path; parsed only when they change.
    provider_id: str = ""
    boot_id: str = ""
    created: datetime | None = None
    #: The last :class:`CachedNode` handed out, until one of the above changes: a Node Event per
    #: node a minute should not re-parse the providerID each time.
    view: CachedNode | None = None


def _provider_id(obj: Mapping[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("providerID") or "")


def _boot_id(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


def _created(metadata: Mapping[str, Any]) -> datetime | None:
    try:
        return parse_timestamp(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
    except InvalidEventError:
        return None


class TransitionTracker:
    """Per-node condition state; turns Node objects into :class:`NodeConditionEvent` lists.

    Not thread-safe: the caller serialises access (the exporter holds one lock around each call
    and the hand-off to the queue, which also keeps per-node order).
    """

    def __init__(
        self,
        cluster: str,
        watches: Callable[[str], bool],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._cluster = cluster
        self._watches = watches
        self._clock = clock
        self._nodes: dict[str, _NodeState] = {}
        self._relist_seen: set[str] | None = None
        # Nodes the relist in progress already resynced. A list that starts over before it ends
        # (its snapshot expired, a page failed) is the same relist: it announces them again only
        # if they changed in between.
        self._relist_resynced: set[str] = set()

    def __len__(self) -> int:
        return len(self._nodes)

    def cached(self, name: str) -> CachedNode | None:
        """The Node of this name as last seen on the watch; None when it is not (or no longer) known:
        never listed, outside the label selector, or deleted."""
        state = self._nodes.get(name)
        if state is None:
            return None
        if state.view is None:
            state.view = CachedNode(
                name=name,
                uid=state.uid,
                created=state.created,
                instance_id=instance_id_from_provider_id(state.provider_id) or "",
                boot_id=state.boot_id,
            )
        return state.view

    def _watched(self, obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        watched: dict[str, Mapping[str, Any]] = {}
        for raw in (obj.get("status") or {}).get("conditions") or ():
            condition_type = raw.get("type")
            if condition_type and self._watches(condition_type):
                watched[condition_type] = raw
        return watched

    def observe(self, obj: Mapping[str, Any]) -> list[NodeConditionEvent]:
        """An ADDED or MODIFIED Node from the watch."""
        return self._apply(obj, resync=False)

    def forget(self, obj: Mapping[str, Any]) -> None:
        """A DELETED Node: drop its state and emit nothing."""
        name = (obj.get("metadata") or {}).get("name")
        if name:
            self._nodes.pop(name, None)

    def begin_relist(self) -> None:
        if self._relist_seen is None:
            self._relist_resynced = set()
        self._relist_seen = set()

    def relist_page(self, items: Iterable[Mapping[str, Any]]) -> list[NodeConditionEvent]:
        """One page of a (re)list: bad conditions emitted with ``resync: true``, once per relist."""
        events: list[NodeConditionEvent] = []
        for obj in items:
            name = (obj.get("metadata") or {}).get("name")
            first = True
            if self._relist_seen is not None and name:
                self._relist_seen.add(name)
                first = name not in self._relist_resynced
                self._relist_resynced.add(name)
            events.extend(self._apply(obj, resync=first))
        return events

    def end_relist(self) -> None:
        """Forget nodes the list no longer contains: deleted while the watch was down."""
        if self._relist_seen is None:
            return
        for name in [n for n in self._nodes if n not in self._relist_seen]:
            del self._nodes[name]
        self._relist_seen = None
        self._relist_resynced = set()

    def resync_from_memory(self) -> list[NodeConditionEvent]:
        """Every currently-bad condition again, ``resync: true``, without asking the API server."""
        now = self._clock()
        events = []
        for state in self._nodes.values():
            if state.identity is None:
                continue
            for condition in state.bad.values():
                events.append(
                    NodeConditionEvent(
                        cluster=self._cluster,
                        node=state.identity,
                        condition=condition,
                        observed_at=now,
                        previous=PreviousState(condition.status, condition.reason),
                        resync=True,
                    )
                )
        return events

    def _apply(self, obj: Mapping[str, Any], *, resync: bool) -> list[NodeConditionEvent]:
        metadata = obj.get("metadata") or {}
        name = metadata.get("name")
        if not name:
            return []
        uid = str(metadata.get("uid") or "")
        watched = self._watched(obj)
        current = {t: (str(raw.get("status")), str(raw.get("reason") or "")) for t, raw in watched.items()}
        state = self._nodes.get(name)
        if state is not None and state.uid != uid:
            # Same name, new object (an instance replaced under a reused hostname): no earlier view.
            state = None
        provider_id = _provider_id(obj)
        boot_id = _boot_id(obj)
        if state is not None and not resync and current == state.seen:
            # The hot path: heartbeats and resourceVersion churn. A reboot changes no condition
            # but does change bootID, which a Node Event must be attributed with (D19).
            if provider_id != state.provider_id or boot_id != state.boot_id:
                state.provider_id = provider_id
                state.boot_id = boot_id
                state.view = None
            return []
        previous_seen = state.seen if state is not None else {}
        events: list[NodeConditionEvent] = []
        identity: NodeIdentity | None = None
        bad: dict[str, Condition] = {}
        now = self._clock()
        for condition_type, raw in watched.items():
            status, reason = current[condition_type]
            is_bad = is_bad_status(condition_type, status)
            before = previous_seen.get(condition_type)
            changed = before is not None and before != (status, reason)
            emit = changed or (is_bad and (before is None or resync))
            if not emit and not is_bad:
                continue
            try:
                condition = bounded_condition(Condition.from_api(raw))
            except InvalidEventError:
                continue  # a condition the API would not accept either; nothing to decide on
            if is_bad:
                bad[condition_type] = condition
            if emit:
                if identity is None:
                    identity = node_identity(obj)
                events.append(
                    NodeConditionEvent(
                        cluster=self._cluster,
                        node=identity,
                        condition=condition,
                        observed_at=now,
                        previous=None if before is None else PreviousState(*before),
                        resync=resync and is_bad,
                    )
                )
        if bad and identity is None:
            identity = node_identity(obj)
        self._nodes[name] = _NodeState(
            uid=uid,
            seen=current,
            bad=bad,
            identity=identity if bad else None,
            provider_id=provider_id,
            boot_id=boot_id,
            # Same object: its creationTimestamp cannot change, so it is parsed once per object.
            created=state.created if state is not None else _created(metadata),
        )
        return events
