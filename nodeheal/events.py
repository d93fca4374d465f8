"""Event contract 1.1: what the exporter puts on the bus and what ingest accepts.

``Source`` is ``<prefix>.<cluster>`` (prefix ``nodeheal.exporter``, configurable), so IAM can bind
each cluster's exporter role to its own source (``events:source`` is the only identity a PutEvents
condition sees; the detail is invisible to IAM). ``DetailType`` is ``Node Condition Changed``.
Unknown fields are ignored so producers can add fields without breaking consumers; a missing or
mistyped required field is rejected with an :class:`InvalidEventError` naming the field.

1.1 over 1: ``node.uid`` is required. Version "1" (uid optional, Source the bare prefix) is still
accepted until 0.2.0 removes it, so exporters upgraded after the stack are not lost; see
``nodeheal.workflow.ingest.check_source`` for what that costs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeheal.conditions import Condition
from nodeheal.errors import InvalidEventError
from nodeheal.payload import (
    MAX_REASON_BYTES,
    bound_message,
    bounded_condition,
    cut_text,
    json_bytes,
    state_bytes,
)
from nodeheal.timestamps import format_timestamp, parse_timestamp

SCHEMA_VERSION = "1.1"
#: Accepted at ingest until 0.2.0 removes it, with a warning: exporters not yet upgraded send it.
LEGACY_SCHEMA_VERSION = "1"
SUPPORTED_SCHEMA_VERSIONS = (LEGACY_SCHEMA_VERSION, SCHEMA_VERSION)
#: The source prefix; an exporter sends ``<prefix>.<cluster>``. Exporters older than contract 1.1
#: send the bare prefix (the "legacy source").
DEFAULT_SOURCE = "nodeheal.exporter"
DETAIL_TYPE_CONDITION_CHANGED = "Node Condition Changed"
DETAIL_TYPE_NODE_EVENT = "Node Event Observed"

#: EventBridge rejects an entry larger than 256 KB (detail + envelope). Messages from the kernel log
#: are short, but a label map is user-controlled, so the exporter trims to stay under this bound.
MAX_ENTRY_BYTES = 256 * 1024

#: The node labels an event carries, as JSON (D17). A label is at most 317 + 63 characters (a
#: qualified key and its value), so 16 KiB holds at least 42 labels of the longest kind and, in
#: practice, every label of a GPU node with feature discovery (100-150 labels of ~60 bytes).
#: A node with more keeps the well-known labels first (:data:`PREFERRED_LABEL_PREFIXES`), then
#: the rest in key order, and the event says ``labelsTrimmed: true``. Rules that filter on
#: ``node.labels`` should name a well-known key (``karpenter.sh/nodepool``).
MAX_LABELS_BYTES = 16 * 1024
PREFERRED_LABEL_PREFIXES = (
    "karpenter.sh/",
    "karpenter.k8s.aws/",
    "eks.amazonaws.com/",
    "node.kubernetes.io/",
    "topology.kubernetes.io/",
    "kubernetes.io/",
    "nodeheal.io/",
    "nvidia.com/",
)
#: Any other string of the contract (cluster, node name, uid, providerID, condition type...): the
#: longest Kubernetes qualified name (253-character prefix, "/", 63-character name). Longer is
#: not something a cluster produces; ingest rejects it rather than guess which part matters.
MAX_FIELD_CHARS = 317
#: The event's id copied into the execution input (EventBridge ids are 36-character UUIDs).
MAX_EVENT_ID_CHARS = 128

_PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[a-z0-9-]*)/(?P<instance>i-[0-9a-f]{8,17})$")


def cluster_source(prefix: str, cluster: str) -> str:
    """The ``Source`` of a cluster's exporter: ``nodeheal.exporter`` + ``training-on-eks``."""
    return f"{prefix}.{cluster}"


def instance_id_from_provider_id(provider_id: str | None) -> str | None:
    """``aws:///us-west-2b/i-0abc...`` -> ``i-0abc...``; None when it is not an EC2 providerID."""
    if not provider_id:
        return None
    match = _PROVIDER_ID.match(provider_id)
    return match.group("instance") if match else None


def bound_labels(labels: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """The labels an event carries (at most :data:`MAX_LABELS_BYTES`) and whether any were left out."""
    if state_bytes(dict(labels)) <= MAX_LABELS_BYTES:
        return dict(labels), False

    def rank(key: str) -> tuple[int, str]:
        return (0 if key.startswith(PREFERRED_LABEL_PREFIXES) else 1, key)

    kept: dict[str, str] = {}
    used = 2  # the braces
    for key in sorted(labels, key=rank):
        cost = json_bytes(key) + json_bytes(labels[key]) + 6  # two pairs of quotes, colon, comma
        if used + cost <= MAX_LABELS_BYTES:
            kept[key] = labels[key]
            used += cost
    return kept, True


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    name: str
    uid: str = ""
    provider_id: str = ""
    instance_id: str = ""
    instance_type: str = ""
    zone: str = ""
    node_pool: str = ""
    capacity_type: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    #: Some labels were left out to keep the event within :data:`MAX_LABELS_BYTES`.
    labels_trimmed: bool = False
    #: ``status.nodeInfo.bootID`` when the exporter saw the condition: the event's report belongs
    #: to the instance's episode only on the same boot (D19). Empty from exporters before it.
    boot_id: str = ""

    def to_detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "name": self.name,
            "uid": self.uid,
            "providerID": self.provider_id,
            "instanceID": self.instance_id,
            "instanceType": self.instance_type,
            "zone": self.zone,
            "nodePool": self.node_pool,
            "capacityType": self.capacity_type,
            "labels": dict(self.labels),
        }
        if self.labels_trimmed:
            detail["labelsTrimmed"] = True
        if self.boot_id:
            detail["bootID"] = self.boot_id
        return detail


@dataclass(frozen=True, slots=True)
class PreviousState:
    status: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class NodeConditionEvent:
    """The ``detail`` of a ``Node Condition Changed`` event."""

    cluster: str
    node: NodeIdentity
    condition: Condition
    observed_at: datetime
    previous: PreviousState | None = None
    resync: bool = False
    schema_version: str = SCHEMA_VERSION
    #: Set only on the event of an execution a counted signal started (``nodeheal.workflow.counting``):
    #: the crossing of its window (signal, instance, boot, window start, count, rule). No detector
    #: sends it, and ingest refuses an event that does: its condition is proven against the
    #: ledger's window, not the Node.
    counted_signal: Mapping[str, Any] | None = None

    @property
    def is_bad(self) -> bool:
        return self.condition.is_bad

    def to_detail(self) -> dict[str, Any]:
        detail = {
            "schemaVersion": self.schema_version,
            "cluster": self.cluster,
            "node": self.node.to_detail(),
            "condition": self.condition.to_api(),
            "previous": (
                None
                if self.previous is None
                else {"status": self.previous.status, "reason": self.previous.reason}
            ),
            "observedAt": format_timestamp(self.observed_at, millis=True),
            "resync": self.resync,
        }
        if self.counted_signal is not None:
            detail["countedSignal"] = dict(self.counted_signal)
        return detail

    def to_json(self) -> str:
        return json.dumps(self.to_detail(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_detail(cls, detail: Any) -> NodeConditionEvent:
        """Validate and parse an event ``detail`` (dict or JSON string)."""
        detail = _detail_object(detail)
        version = detail.get("schemaVersion")
        if version not in SUPPORTED_SCHEMA_VERSIONS:
            raise InvalidEventError(
                f"unsupported schemaVersion {version!r}; this NodeHeal understands "
                + " and ".join(repr(v) for v in SUPPORTED_SCHEMA_VERSIONS)
            )
        cluster = _required_string(detail, "cluster")
        node_raw = detail.get("node")
        if not isinstance(node_raw, dict):
            raise InvalidEventError("node must be an object")
        node = _parse_node(node_raw, uid_required=version != LEGACY_SCHEMA_VERSION)
        if "condition" not in detail:
            raise InvalidEventError("condition is required")
        # An exporter older than D17 may send a message of any length: cut it here as the exporter
        # now does, so no execution input carries more (idempotent for a message already cut).
        condition = bounded_condition(Condition.from_api(detail["condition"]))
        if len(condition.type) > MAX_FIELD_CHARS:
            raise InvalidEventError(f"condition.type is longer than {MAX_FIELD_CHARS} characters")
        previous_raw = detail.get("previous")
        previous: PreviousState | None = None
        if previous_raw is not None:
            if not isinstance(previous_raw, dict) or not isinstance(previous_raw.get("status"), str):
                raise InvalidEventError("previous must be null or an object with a string status")
            reason = previous_raw.get("reason") or ""
            if not isinstance(reason, str):
                raise InvalidEventError("previous.reason must be a string")
            if len(previous_raw["status"]) > MAX_FIELD_CHARS:
                raise InvalidEventError(f"previous.status is longer than {MAX_FIELD_CHARS} characters")
            previous = PreviousState(status=previous_raw["status"], reason=cut_text(reason, MAX_REASON_BYTES))
        observed_at = parse_timestamp(detail.get("observedAt"), "observedAt")
        resync = detail.get("resync", False)
        if not isinstance(resync, bool):
            raise InvalidEventError("resync must be a boolean")
        counted = detail.get("countedSignal")
        if counted is not None and not isinstance(counted, dict):
            raise InvalidEventError("countedSignal must be an object when present")
        return cls(
            cluster=cluster,
            node=node,
            condition=condition,
            observed_at=observed_at,
            previous=previous,
            resync=resync,
            schema_version=str(version),
            counted_signal=counted,
        )

    @property
    def is_legacy(self) -> bool:
        """Contract "1": no required uid, sent by an exporter not yet upgraded."""
        return self.schema_version == LEGACY_SCHEMA_VERSION


def unwrap_eventbridge_envelope(payload: Any) -> Any:
    """Return ``detail`` from an EventBridge event (as delivered to a target), else the payload."""
    if isinstance(payload, dict) and "detail" in payload and "detail-type" in payload:
        return payload["detail"]
    return payload


def _detail_object(detail: Any) -> dict[str, Any]:
    """An event ``detail`` as delivered (an object, or its JSON text) as an object."""
    if isinstance(detail, str | bytes):
        try:
            detail = json.loads(detail)
        except ValueError as exc:
            raise InvalidEventError(f"event detail is not valid JSON: {exc}") from exc
    if not isinstance(detail, dict):
        raise InvalidEventError(f"event detail must be a JSON object, got {type(detail).__name__}")
    return detail


def _required_string(container: dict[str, Any], key: str, prefix: str = "") -> str:
    value = container.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidEventError(f"{prefix}{key} is required and must be a non-empty string")
    return _within_bound(value, key, prefix)


def _within_bound(value: str, key: str, prefix: str) -> str:
    if len(value) > MAX_FIELD_CHARS:
        raise InvalidEventError(f"{prefix}{key} is longer than {MAX_FIELD_CHARS} characters")
    return value


def _optional_string(container: dict[str, Any], key: str, prefix: str) -> str:
    value = container.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidEventError(f"{prefix}{key} must be a string")
    return _within_bound(value, key, prefix)


def _parse_node(raw: dict[str, Any], *, uid_required: bool) -> NodeIdentity:
    labels = raw.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise InvalidEventError("node.labels must be an object of string to string")
    # An exporter older than D17 ships every label: keep what the exporter now would.
    kept_labels, trimmed = bound_labels(labels)
    provider_id = _optional_string(raw, "providerID", "node.")
    instance_id = _optional_string(raw, "instanceID", "node.") or (
        instance_id_from_provider_id(provider_id) or ""
    )
    return NodeIdentity(
        name=_required_string(raw, "name", "node."),
        # Required since 1.1: without it a new Node that took an old name is indistinguishable.
        uid=_required_string(raw, "uid", "node.") if uid_required else _optional_string(raw, "uid", "node."),
        provider_id=provider_id,
        instance_id=instance_id,
        instance_type=_optional_string(raw, "instanceType", "node."),
        zone=_optional_string(raw, "zone", "node."),
        node_pool=_optional_string(raw, "nodePool", "node."),
        capacity_type=_optional_string(raw, "capacityType", "node."),
        labels=kept_labels,
        labels_trimmed=trimmed or raw.get("labelsTrimmed") is True,
        boot_id=_optional_string(raw, "bootID", "node."),
    )


@dataclass(frozen=True, slots=True)
class ObservedNodeEvent:
    """The Kubernetes Event a ``Node Event Observed`` detail carries (core/v1 fields)."""

    uid: str
    type: str
    reason: str
    message: str
    #: Occurrences so far, whichever API counted them (the exporter ships the larger counter).
    count: int
    #: The reporting component (``gpu-monitor``, ``kernel-monitor``, ``eks-node-monitoring-agent``).
    source: str
    first_timestamp: datetime | None
    last_timestamp: datetime


@dataclass(frozen=True, slots=True)
class NodeEventDetail:
    """The ``detail`` of a ``Node Event Observed`` event (schema ``node-event-observed``).

    ``node.instanceID`` and ``node.bootID`` are the exporter's attachment (D10): set only when the
    Event's Node UID matches the Node the exporter holds, so a count never lands on an instance the
    Event is not about. Empty, the Event is shipped as context and counts for no instance."""

    cluster: str
    node_name: str
    node_uid: str
    instance_id: str
    boot_id: str
    event: ObservedNodeEvent
    observed_at: datetime

    @classmethod
    def from_detail(cls, detail: Any) -> NodeEventDetail:
        detail = _detail_object(detail)
        version = detail.get("schemaVersion")
        if version != SCHEMA_VERSION:
            raise InvalidEventError(
                f"unsupported schemaVersion {version!r} for a Node Event; "
                f"this NodeHeal understands {SCHEMA_VERSION!r}"
            )
        node = detail.get("node")
        if not isinstance(node, dict):
            raise InvalidEventError("node must be an object")
        raw = detail.get("event")
        if not isinstance(raw, dict):
            raise InvalidEventError("event must be an object")
        count = raw.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidEventError("event.count must be a whole number of at least 1")
        instance_id = _optional_string(node, "instanceID", "node.")
        if instance_id and instance_id_from_provider_id(f"aws:///zone/{instance_id}") is None:
            raise InvalidEventError(f"node.instanceID {instance_id!r} is not an EC2 instance ID")
        observed_at = parse_timestamp(detail.get("observedAt"), "observedAt")
        first_raw = raw.get("firstTimestamp")
        last_raw = raw.get("lastTimestamp")
        return cls(
            cluster=_required_string(detail, "cluster"),
            node_name=_required_string(node, "name", "node."),
            node_uid=_optional_string(node, "uid", "node."),
            instance_id=instance_id,
            boot_id=_optional_string(node, "bootID", "node."),
            event=ObservedNodeEvent(
                uid=_required_string(raw, "uid", "event."),
                type=_required_string(raw, "type", "event."),
                reason=_optional_string(raw, "reason", "event."),
                message=bound_message(str(raw.get("message") or "")),
                count=count,
                source=_optional_string(raw, "source", "event."),
                first_timestamp=parse_timestamp(first_raw, "event.firstTimestamp") if first_raw else None,
                last_timestamp=(
                    parse_timestamp(last_raw, "event.lastTimestamp") if last_raw else observed_at
                ),
            ),
            observed_at=observed_at,
        )


DETAIL_TYPE_EXPORTER_HEARTBEAT = "Exporter Heartbeat"
#: The metric ingest counts each heartbeat under (dimension ``cluster``); the stack alarms when it
#: stays below one a minute for ``observability.heartbeatMissingMinutes``.
EXPORTER_HEARTBEATS_METRIC = "ExporterHeartbeats"


@dataclass(frozen=True, slots=True)
class ExporterHeartbeat:
    """The exporter's periodic "I am alive and shipping" event (``DetailType`` Exporter Heartbeat).

    It travels the same path as condition events (queue, publisher, bus, rule, ingest), so its
    arrival proves the whole path works, not only that the pod runs. The counters are the
    publisher's since the previous heartbeat, so CloudWatch can sum them without knowing about
    exporter restarts.
    """

    cluster: str
    identity: str
    sent_at: datetime
    interval_seconds: float
    queue_depth: int = 0
    published: int = 0
    publish_failures: int = 0
    dropped: int = 0
    schema_version: str = SCHEMA_VERSION

    def to_detail(self) -> dict[str, Any]:
        return {
            "schemaVersion": self.schema_version,
            "cluster": self.cluster,
            "identity": self.identity,
            "sentAt": format_timestamp(self.sent_at, millis=True),
            "intervalSeconds": self.interval_seconds,
            "queueDepth": self.queue_depth,
            "sincePrevious": {
                "published": self.published,
                "publishFailures": self.publish_failures,
                "dropped": self.dropped,
            },
        }

    @classmethod
    def from_detail(cls, detail: Any) -> ExporterHeartbeat:
        if not isinstance(detail, dict):
            raise InvalidEventError(f"heartbeat detail must be an object, got {type(detail).__name__}")
        counters = detail.get("sincePrevious") or {}
        if not isinstance(counters, dict):
            raise InvalidEventError("heartbeat sincePrevious must be an object")

        def count(container: dict[str, Any], key: str) -> int:
            value = container.get(key, 0)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise InvalidEventError(f"heartbeat {key} must be a non-negative number")
            return int(value)

        interval = detail.get("intervalSeconds", 0)
        if not isinstance(interval, int | float) or isinstance(interval, bool):
            raise InvalidEventError("heartbeat intervalSeconds must be a number")
        version = detail.get("schemaVersion")
        if version not in SUPPORTED_SCHEMA_VERSIONS:
            raise InvalidEventError(f"heartbeat schemaVersion {version!r} is not supported")
        return cls(
            cluster=_required_string(detail, "cluster"),
            identity=_optional_string(detail, "identity", ""),
            sent_at=parse_timestamp(detail.get("sentAt"), "sentAt"),
            interval_seconds=float(interval),
            queue_depth=count(detail, "queueDepth"),
            published=count(counters, "published"),
            publish_failures=count(counters, "publishFailures"),
            dropped=count(counters, "dropped"),
            schema_version=str(version),
        )


# -- the node block, from a raw Node ------------------------------------------------------------

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
NODE_POOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABELS = ("karpenter.sh/capacity-type", "eks.amazonaws.com/capacityType")


def node_identity(obj: Mapping[str, Any]) -> NodeIdentity:
    """The contract's node block from a raw Node; instance ID and zone fall back to providerID."""
    metadata = obj.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    provider_id = str((obj.get("spec") or {}).get("providerID") or "")
    shipped, trimmed = bound_labels({str(k): str(v) for k, v in labels.items()})
    zone = _first_label(labels, ZONE_LABELS)
    if not zone and provider_id.startswith("aws:///"):
        zone = provider_id[len("aws:///") :].split("/", 1)[0]
    return NodeIdentity(
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        provider_id=provider_id,
        instance_id=instance_id_from_provider_id(provider_id) or "",
        instance_type=_first_label(labels, INSTANCE_TYPE_LABELS),
        zone=zone,
        node_pool=str(labels.get(NODE_POOL_LABEL, "")),
        capacity_type=_capacity_type(labels),
        labels=shipped,
        labels_trimmed=trimmed,
        boot_id=str(((obj.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""),
    )


def _first_label(labels: Mapping[str, str], keys: Iterable[str]) -> str:
    for key in keys:
        value = labels.get(key)
        if value:
            return str(value)
    return ""


def _capacity_type(labels: Mapping[str, str]) -> str:
    # Karpenter writes "on-demand"/"spot"; managed node groups write "ON_DEMAND"/"SPOT". One
    # spelling on the bus lets one rule match both.
    value = _first_label(labels, CAPACITY_TYPE_LABELS)
    return value.lower().replace("_", "-")
