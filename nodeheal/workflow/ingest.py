"""Ingest: from an EventBridge event to a named execution, or a recorded reason why not.

The execution name is deterministic (a readable prefix and a hash of the whole transition, D3), so
every copy of the same transition (EventBridge at-least-once delivery, exporter resyncs after a
restart, archive replays) collapses onto one execution: Step Functions refuses a second execution
with the same name for 90 days after the first closes.

Identity (D9): IAM lets each cluster's exporter role put events only with its own Source,
``<prefix>.<cluster>``, so the Source is the proof of who sent an event; the detail is not (IAM
cannot see it). Ingest accepts an event only when its Source and ``detail.cluster`` agree. For one
release the legacy Source (the bare prefix) is accepted for contract "1" events, which exporters not
yet upgraded send; every exporter role may use it, so for those events the cluster is the
exporter's word alone (the README's upgrade section says so).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodeheal.errors import DuplicateExecutionError, InvalidEventError
from nodeheal.events import (
    DETAIL_TYPE_CONDITION_CHANGED,
    DETAIL_TYPE_EXPORTER_HEARTBEAT,
    LEGACY_SCHEMA_VERSION,
    MAX_EVENT_ID_CHARS,
    SCHEMA_VERSION,
    ExporterHeartbeat,
    NodeConditionEvent,
    cluster_source,
)
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.ports import ExecutionStarter, LedgerPort
from nodeheal.workflow.records import DroppedEvent

#: Step Functions execution names: 1-80 characters; we keep to the portable subset.
MAX_EXECUTION_NAME = 80
_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]+")
_EXCERPT_BYTES = 2048
#: Hex digits of the transition hash in every name: 48 bits, so two transitions of one node
#: colliding is out of reach for any fleet.
_DIGEST_CHARS = 12

#: Dropped-event categories of a Source that does not speak for the event's cluster.
FOREIGN_SOURCE = "foreign-source"
FORGED = "forged"
FUTURE_DATED = "future-dated"
#: How far ahead of ingest's clock an event may claim to have been observed: clocks of EKS nodes
#: and Lambda are NTP-synchronised, so more than this is a wrong clock or a forged event, and its
#: transition time would give it an execution name no genuine delivery shares (docs/architecture.md, D3).
FUTURE_TOLERANCE = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class IngestSettings:
    clusters: frozenset[str]
    stale_after: timedelta
    #: The Source prefix: a cluster's exporter sends ``<event_source>.<cluster>``; exporters of
    #: contract "1" send ``event_source`` itself (accepted until 0.2.0 removes it).
    event_source: str


@dataclass(frozen=True, slots=True)
class IngestResult:
    status: str  # started | duplicate | dropped
    reason: str = ""
    execution: str = ""
    execution_arn: str = ""
    category: str = ""
    #: Set when the event was accepted under the legacy contract "1" (0.1.x only: 0.2.0 removes it).
    warning: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "status": self.status,
            "reason": self.reason,
            "execution": self.execution,
            "executionArn": self.execution_arn,
            "category": self.category,
            "warning": self.warning,
        }


def _clean(part: str) -> str:
    return _ILLEGAL.sub("-", part).strip("-") or "x"


def execution_name(event: NodeConditionEvent) -> str:
    """``<cluster>-<node>-<condition>-<transition time>-<hash>``, at most 80 legal characters (D3).

    The prefix is for people reading the console; the hash, of the full key (cluster, node name,
    node UID, condition type, status, reason, transition time), keeps two different transitions
    apart even when the prefix is the same: a new Node that took an old name, or a reason that
    changed within the same second. The Source is not in the key, so a legacy and a 1.1 delivery of
    the same transition by the same node object share a name. The node's DNS suffix
    (``.us-west-2.compute.internal``) is dropped from the prefix: it is the same for every node of
    a cluster.

    People filter executions by ``<cluster>-<node>``, so when the name would pass 80 characters
    the other parts give way first, in this order, until it fits:

    1. the transition time loses its seconds (``20261121T1000Z``; the hash has them);
    2. the condition is cut, down to :data:`CONDITION_NAME_CHARS` characters;
    3. the time is left out, and the condition takes what is left (it may go too);
    4. the node is cut to what the cluster leaves;
    5. the cluster is cut to its first :data:`CLUSTER_NAME_CHARS` characters.

    The hash and a re-evaluation's ``-r<N>`` are never cut. So a cluster name of at most 47
    characters is always whole, with a node name of up to 19 characters (every EC2 host name:
    ``ip-100-100-100-100``, ``i-`` and 17 hex digits) whole next to it. An EKS cluster name may
    have 100 characters: a longer one cannot fit, and every name of that cluster starts with its
    first 47 characters (search by those); a re-evaluation's ``-r<N>`` then takes its room from
    the node.

    Changing this scheme renames transitions: one delivered before an upgrade and delivered again
    after it (an exporter resync, an archive replay) is not a duplicate any more, so each
    transition in flight at the upgrade may get one second execution. That execution is Admit's
    like any other: it waits behind the first one's lock, and stops when the node was replaced,
    rebooted healthy or is gone; where the first left the node bad (it alerted, cordoned, was
    refused or failed), the second decides again on the live node, with the episode's worst fault
    (D19), and may notify once more.
    """
    return _named(event, "")


def reevaluation_name(event: NodeConditionEvent, number: int) -> str:
    """The name of an operator's re-evaluation of ``event``'s transition: its name with ``-r<number>``
    (D3), within the same 80 characters and by the same rule as :func:`execution_name`.

    Deliveries, resyncs and replays of a transition always get its base name, so after it was
    handled (or refused while the breaker was open) they are all duplicates; a person who wants it
    looked at again starts a new execution under this name, ``number`` coming from the ledger's
    counter so no two re-evaluations share one. The suffix is never cut: the time and the
    condition give way for it, then the node, as for a base name that does not fit.
    """
    if number < 1:
        raise ValueError(f"re-evaluation numbers start at 1, got {number}")
    return _named(event, f"-r{number}")


#: A cluster name longer than this is cut to it (an EKS cluster name may have 100 characters):
#: with a separator, :data:`NODE_NAME_CHARS` of node and the hash it fills the 80.
CLUSTER_NAME_CHARS = 47
#: The longest EC2 host name, ``i-`` and 17 hex digits (``ip-100-100-100-100`` has 18): the node
#: is whole next to a cluster at its cap.
NODE_NAME_CHARS = 19
#: The condition is cut down to this before the time is left out.
CONDITION_NAME_CHARS = 12


def _named(event: NodeConditionEvent, suffix: str) -> str:
    transition = event.condition.last_transition_time or event.observed_at
    stamp = transition.strftime("%Y%m%dT%H%M%SZ")
    counted = event.counted_signal
    if counted is not None:
        # A counted signal's crossing (nodeheal.workflow.counting): the cluster, the node, the
        # signal, the instance and the start of the window that crossed. Every delivery of the
        # Event that crossed, and every retry of the invocation, builds the same name.
        label = str(counted.get("signal", "")) or event.condition.type
        key_parts: tuple[str, ...] = (
            event.cluster,
            event.node.name,
            event.node.uid,
            label,
            str(counted.get("instanceId", "")),
            str(counted.get("windowStart", "")),
        )
    else:
        label = event.condition.type
        key_parts = (
            event.cluster,
            event.node.name,
            event.node.uid,
            event.condition.type,
            event.condition.status,
            event.condition.reason,
            stamp,
        )
    key = "\x1f".join(key_parts)
    digest = hashlib.sha256(key.encode()).hexdigest()[:_DIGEST_CHARS]
    tail = f"-{digest}{suffix}"
    # Room for "<cluster>-<node>[-<condition>][-<time>]".
    room = MAX_EXECUTION_NAME - len(tail)
    if room < 1:
        raise ValueError(f"no room for a name with the suffix {suffix!r}")
    head = _cut(_clean(event.cluster), min(CLUSTER_NAME_CHARS, room))
    node = _cut(_clean(event.node.name.split(".", 1)[0]), room - len(head) - 1)
    if node:
        head = f"{head}-{node}"
    left = room - len(head)
    condition = _clean(label)
    minutes = transition.strftime("%Y%m%dT%H%MZ")
    for time_part in (stamp, minutes):
        if len(condition) + len(time_part) + 2 <= left:
            return f"{head}-{condition}-{time_part}{tail}"
    cut = _cut(condition, left - len(minutes) - 2)
    if len(cut) >= min(CONDITION_NAME_CHARS, len(condition)):
        return f"{head}-{cut}-{minutes}{tail}"
    cut = _cut(condition, left - 1)
    return f"{head}-{cut}{tail}" if cut else head + tail


def _cut(part: str, length: int) -> str:
    """``part`` cut to ``length`` characters without a dangling separator ("" when none fit)."""
    return part[: max(0, length)].rstrip("-")


def execution_input(event: NodeConditionEvent, *, event_id: str, received_at: datetime) -> dict[str, Any]:
    """The input every remediation execution starts with, from ingest or from a person."""
    return {
        "event": event.to_detail(),
        "eventId": event_id,
        "receivedAt": format_timestamp(received_at, millis=True),
    }


def check_source(source: Any, *, cluster: str, schema_version: str, prefix: str) -> tuple[str, str] | None:
    """``(category, reason)`` when ``source`` may not speak for ``cluster``; None when it may.

    * ``<prefix>.<cluster>``: the cluster's own exporter (IAM allows no other role that Source).
    * ``<prefix>`` exactly, contract "1" only: an exporter not yet upgraded (until 0.2.0).
    * ``<prefix>.<other>``, or the legacy Source on a 1.1 event: an exporter speaking for a
      cluster that is not its own, or a publisher hiding behind the legacy allowance: ``forged``.
    * anything else: ``foreign-source``.
    """
    own = cluster_source(prefix, cluster)
    if source == own:
        return None
    if source == prefix:
        if schema_version == LEGACY_SCHEMA_VERSION:
            return None
        return FORGED, (
            f"source {source!r} is the legacy source, which only contract {LEGACY_SCHEMA_VERSION!r} "
            f"exporters may use; a {schema_version!r} event of cluster {cluster!r} must come from {own!r}"
        )
    if isinstance(source, str) and source.startswith(f"{prefix}."):
        return FORGED, (
            f"source {source!r} speaks for cluster {source[len(prefix) + 1 :]!r}, "
            f"but the event claims cluster {cluster!r}"
        )
    return FOREIGN_SOURCE, f"source {source!r} is neither {own!r} nor the legacy {prefix!r}"


def ingest(
    payload: Any,
    *,
    settings: IngestSettings,
    starter: ExecutionStarter,
    ledger: LedgerPort,
    now: datetime,
) -> IngestResult:
    event_id = str(payload.get("id", ""))[:MAX_EVENT_ID_CHARS] if isinstance(payload, dict) else ""
    try:
        detail = _detail_of(payload)
        event = NodeConditionEvent.from_detail(detail)
    except InvalidEventError as invalid:
        return _drop(ledger, now, event_id, "malformed", f"invalid event: {invalid}", payload=payload)

    def drop(category: str, reason: str) -> IngestResult:
        return _drop(ledger, now, event_id, category, reason, payload=payload, event=event)

    if event.counted_signal is not None:
        # Only the counting function starts a counted execution, and never through the bus: a
        # detail that claims one would ask Admit to judge a condition no detector set.
        return drop("malformed", "countedSignal is NodeHeal's own field; a detector's event never carries it")

    refusal = check_source(
        payload.get("source"),
        cluster=event.cluster,
        schema_version=event.schema_version,
        prefix=settings.event_source,
    )
    if refusal is not None:
        return drop(*refusal)
    if event.cluster not in settings.clusters:
        return drop(
            "foreign-cluster",
            f"cluster {event.cluster!r} is not one of this deployment's "
            f"({', '.join(sorted(settings.clusters))})",
        )
    age = now - event.observed_at
    if age > settings.stale_after:
        return drop(
            "stale",
            f"event observed {int(age.total_seconds())}s ago, older than the "
            f"{int(settings.stale_after.total_seconds())}s bound",
        )
    ahead = max(
        event.observed_at - now,
        (event.condition.last_transition_time or event.observed_at) - now,
    )
    if ahead > FUTURE_TOLERANCE:
        return drop(
            FUTURE_DATED,
            f"event dated {int(ahead.total_seconds())}s ahead of this clock (tolerance "
            f"{int(FUTURE_TOLERANCE.total_seconds())}s): a wrong clock or a forged event",
        )
    if not event.is_bad:
        return drop("not-bad", f"{event.condition.type}={event.condition.status} is the healthy direction")

    warning = _legacy_warning(event)
    name = execution_name(event)
    try:
        arn = starter.start(name, execution_input(event, event_id=event_id, received_at=now))
    except DuplicateExecutionError:
        return IngestResult(
            "duplicate", f"execution {name} exists: this transition is handled", name, warning=warning
        )
    return IngestResult("started", "", name, arn, warning=warning)


def is_heartbeat(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("detail-type") == DETAIL_TYPE_EXPORTER_HEARTBEAT


def heartbeat(payload: Any, settings: IngestSettings) -> ExporterHeartbeat | None:
    """The exporter heartbeat in ``payload``, or None when it is not one this deployment counts.

    A malformed heartbeat or one of another cluster is never an error and never a dropped-event
    record: one arrives every minute per cluster, and it only means the alarm on missing
    heartbeats decides. A heartbeat whose Source does not speak for its cluster is not counted
    either (one cluster must not keep another's alarm quiet); :func:`heartbeat_refusal` says why,
    so the caller can record it.
    """
    if not is_heartbeat(payload):
        return None
    try:
        beat = ExporterHeartbeat.from_detail(payload.get("detail"))
    except InvalidEventError:
        return None
    if _heartbeat_source_refusal(payload, beat, settings) is not None:
        return None
    return beat if beat.cluster in settings.clusters else None


def heartbeat_refusal(payload: Any, settings: IngestSettings) -> tuple[str, str] | None:
    """``(category, reason)`` when a well-formed heartbeat's Source does not speak for its cluster."""
    if not is_heartbeat(payload):
        return None
    try:
        beat = ExporterHeartbeat.from_detail(payload.get("detail"))
    except InvalidEventError:
        return None
    return _heartbeat_source_refusal(payload, beat, settings)


def record_refused_heartbeat(
    payload: Any, category: str, reason: str, *, ledger: LedgerPort, now: datetime
) -> IngestResult:
    event_id = str(payload.get("id", "")) if isinstance(payload, dict) else ""
    return _drop(ledger, now, event_id, category, f"heartbeat: {reason}", payload=payload)


def _heartbeat_source_refusal(
    payload: Any, beat: ExporterHeartbeat, settings: IngestSettings
) -> tuple[str, str] | None:
    return check_source(
        payload.get("source"),
        cluster=beat.cluster,
        schema_version=beat.schema_version,
        prefix=settings.event_source,
    )


def _legacy_warning(event: NodeConditionEvent) -> str:
    if not event.is_legacy:
        return ""
    return (
        f"contract {LEGACY_SCHEMA_VERSION!r} event from cluster {event.cluster!r}: accepted for one "
        f"release (the workflow binds to the live node's uid); upgrade its exporter to "
        f"{SCHEMA_VERSION!r}, which sends node.uid and its own source"
    )


def _detail_of(payload: Any) -> Any:
    if not isinstance(payload, dict):
        raise InvalidEventError(f"expected an EventBridge event object, got {type(payload).__name__}")
    if "detail" not in payload:
        raise InvalidEventError("EventBridge event has no detail")
    detail_type = payload.get("detail-type")
    if detail_type != DETAIL_TYPE_CONDITION_CHANGED:
        raise InvalidEventError(f"detail-type {detail_type!r} is not {DETAIL_TYPE_CONDITION_CHANGED!r}")
    return payload["detail"]


def _drop(
    ledger: LedgerPort,
    now: datetime,
    event_id: str,
    category: str,
    reason: str,
    *,
    payload: Any,
    event: NodeConditionEvent | None = None,
) -> IngestResult:
    record_dropped(
        ledger,
        now,
        event_id,
        category,
        reason,
        payload=payload,
        cluster=event.cluster if event else "",
        node=event.node.name if event else "",
        condition_type=event.condition.type if event else "",
    )
    return IngestResult("dropped", reason, category=category)


def record_dropped(
    ledger: LedgerPort,
    now: datetime,
    event_id: str,
    category: str,
    reason: str,
    *,
    payload: Any,
    cluster: str = "",
    node: str = "",
    condition_type: str = "",
) -> None:
    """Keep why an event started nothing, with an excerpt of it, in the ledger: so "why did nothing
    happen?" always has an answer. An event without an id gets one from its text."""
    try:
        excerpt = json.dumps(payload, default=str, sort_keys=True)
    except (TypeError, ValueError):
        excerpt = repr(payload)
    ledger.put_dropped_event(
        DroppedEvent(
            at=now,
            event_id=event_id or hashlib.sha256(excerpt.encode()).hexdigest()[:16],
            reason=reason,
            category=category,
            cluster=cluster,
            node=node,
            condition_type=condition_type,
            excerpt=excerpt.encode()[:_EXCERPT_BYTES].decode(errors="ignore"),
        )
    )
