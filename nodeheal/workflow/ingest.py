"""Ingest: from an EventBridge event to a named execution, or a recorded reason why not.

The execution name is deterministic (cluster, node, condition, transition time), so every copy
of the same transition (EventBridge at-least-once delivery, exporter resyncs after a restart,
archive replays) collapses onto one execution: Step Functions refuses a second execution with
the same name for 90 days after the first closes.
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
    MAX_EVENT_ID_CHARS,
    ExporterHeartbeat,
    NodeConditionEvent,
)
from nodeheal.timeutil import format_timestamp
from nodeheal.workflow.ports import ExecutionStarter, LedgerPort
from nodeheal.workflow.records import DroppedEvent

#: Step Functions execution names: 1-80 characters; we keep to the portable subset.
MAX_EXECUTION_NAME = 80
_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]+")
_EXCERPT_BYTES = 2048


@dataclass(frozen=True, slots=True)
class IngestSettings:
    clusters: frozenset[str]
    stale_after: timedelta
    event_source: str


@dataclass(frozen=True, slots=True)
class IngestResult:
    status: str  # started | duplicate | dropped
    reason: str = ""
    execution: str = ""
    execution_arn: str = ""
    category: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "status": self.status,
            "reason": self.reason,
            "execution": self.execution,
            "executionArn": self.execution_arn,
            "category": self.category,
        }


def _clean(part: str) -> str:
    return _ILLEGAL.sub("-", part).strip("-") or "x"


def execution_name(event: NodeConditionEvent) -> str:
    """``<cluster>-<node>-<condition>-<transition time>``, at most 80 legal characters.

    The node's DNS suffix (``.us-west-2.compute.internal``) is dropped: it is the same for every
    node of a cluster. When the parts still do not fit they are shortened and an 8-character hash
    of the full key keeps names of different transitions apart.
    """
    transition = event.condition.last_transition_time or event.observed_at
    stamp = transition.strftime("%Y%m%dT%H%M%SZ")
    cluster = _clean(event.cluster)
    node = _clean(event.node.name.split(".", 1)[0])
    condition = _clean(event.condition.type)
    name = f"{cluster}-{node}-{condition}-{stamp}"
    if len(name) <= MAX_EXECUTION_NAME:
        return name
    key = f"{event.cluster}/{event.node.name}/{event.condition.type}/{stamp}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    budget = MAX_EXECUTION_NAME - len(stamp) - len(digest) - 4  # four separators
    cluster_part = cluster[: max(8, budget // 4)]
    condition_part = condition[: max(8, budget // 4)]
    node_part = node[: budget - len(cluster_part) - len(condition_part)]
    return f"{cluster_part}-{node_part}-{condition_part}-{stamp}-{digest}"[:MAX_EXECUTION_NAME]


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
        detail = _detail_of(payload, settings)
        event = NodeConditionEvent.from_detail(detail)
    except InvalidEventError as invalid:
        return _drop(ledger, now, event_id, "malformed", f"invalid event: {invalid}", payload=payload)

    def drop(category: str, reason: str) -> IngestResult:
        return _drop(ledger, now, event_id, category, reason, payload=payload, event=event)

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
    if not event.is_bad:
        return drop("not-bad", f"{event.condition.type}={event.condition.status} is the healthy direction")

    name = execution_name(event)
    execution_input = {
        "event": event.to_detail(),
        "eventId": event_id,
        "receivedAt": format_timestamp(now, millis=True),
    }
    try:
        arn = starter.start(name, execution_input)
    except DuplicateExecutionError:
        return IngestResult("duplicate", f"execution {name} exists: this transition is handled", name)
    return IngestResult("started", "", name, arn)


def is_heartbeat(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("detail-type") == DETAIL_TYPE_EXPORTER_HEARTBEAT


def heartbeat(payload: Any, settings: IngestSettings) -> ExporterHeartbeat | None:
    """The exporter heartbeat in ``payload``, or None when it is not one this deployment counts.

    A heartbeat is never an error and never a dropped-event record: one arrives every minute per
    cluster, and a malformed or foreign one only means the alarm on missing heartbeats decides.
    """
    if not is_heartbeat(payload) or payload.get("source") != settings.event_source:
        return None
    try:
        beat = ExporterHeartbeat.from_detail(payload.get("detail"))
    except InvalidEventError:
        return None
    return beat if beat.cluster in settings.clusters else None


def _detail_of(payload: Any, settings: IngestSettings) -> Any:
    if not isinstance(payload, dict):
        raise InvalidEventError(f"expected an EventBridge event object, got {type(payload).__name__}")
    if "detail" not in payload:
        raise InvalidEventError("EventBridge event has no detail")
    detail_type = payload.get("detail-type")
    if detail_type != DETAIL_TYPE_CONDITION_CHANGED:
        raise InvalidEventError(f"detail-type {detail_type!r} is not {DETAIL_TYPE_CONDITION_CHANGED!r}")
    source = payload.get("source")
    if source != settings.event_source:
        raise InvalidEventError(f"source {source!r} is not {settings.event_source!r}")
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
            cluster=event.cluster if event else "",
            node=event.node.name if event else "",
            condition_type=event.condition.type if event else "",
            excerpt=excerpt.encode()[:_EXCERPT_BYTES].decode(errors="ignore"),
        )
    )
    return IngestResult("dropped", reason, category=category)
