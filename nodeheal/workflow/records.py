"""Remediation records: the ledger's account of every execution, success or failure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from nodeheal.actions import Action
from nodeheal.config import PolicySettings
from nodeheal.policy.decide import NodeHistory
from nodeheal.timestamps import format_timestamp, parse_timestamp


class Outcome(StrEnum):
    REPLACED = "replaced"  # instance terminated; Karpenter provisions a replacement
    REBOOTED = "rebooted"  # rebooted, came back healthy, uncordoned
    CORDONED = "cordoned"  # cordon-only action (or mode): left cordoned for a person
    ALERTED = "alerted"  # a person was told; nothing touched
    RECORDED = "recorded"  # action none: recorded for the trend
    DRY_RUN = "dry-run"  # decided and recorded; nothing mutated
    REFUSED = "refused"  # budget, breaker or pause said no; alerted
    SKIPPED = "skipped"  # nothing to do: condition cleared, node gone or replaced, out of scope
    SUPERSEDED = "superseded"  # a more urgent execution took the node over; its cordon stays for it
    PAUSED = "paused"  # paused, or the mode changed, mid-remediation; node left cordoned for a person
    DRAIN_ABORTED = "drain-aborted"  # drain timed out with onTimeout=abort; node stays cordoned
    FAILED = "failed"  # an error ended the remediation; node stays cordoned

    @property
    def needs_person(self) -> bool:
        return self in (
            Outcome.ALERTED,
            Outcome.REFUSED,
            Outcome.DRAIN_ABORTED,
            Outcome.FAILED,
            Outcome.CORDONED,
            Outcome.PAUSED,
        )


#: Outcomes that count as an attempt on the node for the per-node attempt cap.
ATTEMPT_OUTCOMES = frozenset({Outcome.REPLACED, Outcome.REBOOTED, Outcome.DRAIN_ABORTED, Outcome.FAILED})

#: Who writes an execution's record and end marker: ``Record outcome`` and ``Record failure`` ran
#: inside the execution and know what happened to the node.
RECORD_STEP = "workflow"
#: The writers that account for an end from outside the execution (D6): they know only that it
#: ended (timed out, aborted, failed with no Catch), never what its last step did.
FINALIZERS = frozenset({"finalizer", "sweeper"})


def replaces_record(writer: str, stored: str) -> bool:
    """Whether ``writer``'s record of an execution replaces the one ``stored`` wrote.

    A record step's stands over a finalizer's, never the reverse: Step Functions does not stop a
    running task when its execution times out or is aborted, so ``Record outcome`` may write what
    happened (``rebooted``) before or after the finalizer writes ``failed``, and whichever order
    they come in, what happened is what stays (and what the reboot escalation counts). Writers of
    one kind rewrite each other's: a retry repeats the work of an attempt that died part-way.
    """
    return writer not in FINALIZERS or stored in FINALIZERS


def replaces_end(writer: str, stored: str) -> bool:
    """Whether ``writer``'s end marker of an execution replaces the one ``stored`` wrote: only a
    record step's over a finalizer's, which it corrects to its own record's outcome. Otherwise the
    first end stands: it was recorded and notified once."""
    return writer not in FINALIZERS and stored in FINALIZERS


def identity_key(instance_id: str, node_uid: str = "", node_name: str = "") -> str:
    """The key locks, history, attempt caps and escalation follow (D1 in docs/architecture.md): the instance.

    A node with no EC2 instance (not NodeHeal's to reboot or terminate, but it may be cordoned)
    falls back to its object UID, which is never reused either; the name comes last, only for
    records too old to carry either.
    """
    if instance_id:
        return instance_id
    if node_uid:
        return f"uid-{node_uid}"
    return f"name-{node_name}"


@dataclass(frozen=True, slots=True)
class RemediationRecord:
    cluster: str
    node: str
    execution: str
    started_at: datetime
    finished_at: datetime
    outcome: Outcome
    action: Action
    planned_action: Action
    reason: str
    summary: str
    xid: int | None = None
    signal: str = ""
    condition: Mapping[str, str] = field(default_factory=dict)
    instance_id: str = ""
    node_uid: str = ""
    instance_type: str = ""
    node_pool: str = ""
    execution_arn: str = ""
    #: Seconds per stage (fault->ingest, ingest->admit, admit->cordon, cordon->drained, ...).
    stage_seconds: Mapping[str, float] = field(default_factory=dict)
    #: When each stage completed, RFC 3339, for the timeline.
    stage_times: Mapping[str, str] = field(default_factory=dict)
    pods_evicted: int = 0
    pdb_blocked: int = 0
    pods_forced: int = 0
    #: The drain policy's classes (nodeheal.workflow.drain_policy) over the whole drain: per class
    #: ``{"count": n, "pods": [first few]}``, e.g. which pods were evicted with emptyDir data.
    drain_classes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    escalated: bool = False
    #: The capacity behind the instance when it was to go (``read-capacity``, D12), flat:
    #: lifecycle, reservationId, reservationType, reservationEnd, instanceType, and what it decided
    #: (deferredForCapacity, capacityReason, blockEnd, landingReservation), with impairedReported
    #: once the terminate step reported the hardware. Empty when capacity was not read.
    capacity: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    error_cause: str = ""
    #: Who wrote it: :data:`RECORD_STEP`, or one of :data:`FINALIZERS` (see :func:`replaces_record`).
    recorded_by: str = RECORD_STEP

    @property
    def subject(self) -> str:
        return identity_key(self.instance_id, self.node_uid, self.node)

    @property
    def sort_key(self) -> str:
        return f"REM#{format_timestamp(self.started_at, millis=True)}#{self.execution}"

    def to_item(self) -> dict[str, Any]:
        return {
            "recordType": "remediation",
            "cluster": self.cluster,
            "node": self.node,
            "execution": self.execution,
            "executionArn": self.execution_arn,
            "startedAt": format_timestamp(self.started_at, millis=True),
            "finishedAt": format_timestamp(self.finished_at, millis=True),
            "outcome": self.outcome.value,
            "action": self.action.value,
            "plannedAction": self.planned_action.value,
            "reason": self.reason,
            "summary": self.summary,
            "xid": self.xid,
            "signal": self.signal,
            "condition": dict(self.condition),
            "instanceId": self.instance_id,
            "nodeUid": self.node_uid,
            "instanceType": self.instance_type,
            "nodePool": self.node_pool,
            "stageSeconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "stageTimes": dict(self.stage_times),
            "podsEvicted": self.pods_evicted,
            "pdbBlocked": self.pdb_blocked,
            "podsForced": self.pods_forced,
            "drainClasses": {name: dict(entry) for name, entry in self.drain_classes.items()},
            "escalated": self.escalated,
            "capacity": dict(self.capacity),
            "error": self.error,
            "errorCause": self.error_cause,
            "recordedBy": self.recorded_by,
        }

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> RemediationRecord:
        xid = item.get("xid")
        return cls(
            cluster=str(item["cluster"]),
            node=str(item["node"]),
            execution=str(item["execution"]),
            execution_arn=str(item.get("executionArn", "")),
            started_at=parse_timestamp(item["startedAt"], "startedAt"),
            finished_at=parse_timestamp(item["finishedAt"], "finishedAt"),
            outcome=Outcome(str(item["outcome"])),
            action=Action(str(item["action"])),
            planned_action=Action(str(item.get("plannedAction", item["action"]))),
            reason=str(item.get("reason", "")),
            summary=str(item.get("summary", "")),
            xid=int(xid) if xid is not None else None,
            signal=str(item.get("signal", "")),
            condition={str(k): str(v) for k, v in (item.get("condition") or {}).items()},
            instance_id=str(item.get("instanceId", "")),
            node_uid=str(item.get("nodeUid", "")),
            instance_type=str(item.get("instanceType", "")),
            node_pool=str(item.get("nodePool", "")),
            stage_seconds={str(k): float(v) for k, v in (item.get("stageSeconds") or {}).items()},
            stage_times={str(k): str(v) for k, v in (item.get("stageTimes") or {}).items()},
            pods_evicted=int(item.get("podsEvicted", 0)),
            pdb_blocked=int(item.get("pdbBlocked", 0)),
            pods_forced=int(item.get("podsForced", 0)),
            drain_classes={
                str(name): {
                    "count": int((entry or {}).get("count", 0)),
                    **({"pods": [str(p) for p in entry["pods"]]} if (entry or {}).get("pods") else {}),
                }
                for name, entry in (item.get("drainClasses") or {}).items()
            },
            escalated=bool(item.get("escalated", False)),
            capacity=dict(item.get("capacity") or {}),
            error=str(item.get("error", "")),
            error_cause=str(item.get("errorCause", "")),
            # Records of earlier versions do not say: taken as a step's, which no finalizer replaces.
            recorded_by=str(item.get("recordedBy", RECORD_STEP)),
        )


@dataclass(frozen=True, slots=True)
class RecordWrite:
    """What writing an execution's record did (:func:`replaces_record` decides)."""

    written: bool
    #: The execution's record found in the ledger: the one replaced, or the one kept instead.
    previous: RemediationRecord | None = None


@dataclass(frozen=True, slots=True)
class ExecutionEnd:
    """An execution's end marker: its end was recorded (with ``outcome``) and notified, by ``by``."""

    outcome: str
    by: str


def node_history(records: Iterable[RemediationRecord], policy: PolicySettings, now: datetime) -> NodeHistory:
    """The ledger facts the policy needs about one node, from its records."""
    attempt_window = timedelta(hours=policy.attempt_window_hours)
    attempts = 0
    last_reboot: datetime | None = None
    for record in records:
        if record.outcome in ATTEMPT_OUTCOMES and now - record.started_at < attempt_window:
            attempts += 1
        if record.outcome is Outcome.REBOOTED and (last_reboot is None or record.finished_at > last_reboot):
            last_reboot = record.finished_at
    return NodeHistory(attempts_in_window=attempts, last_reboot_at=last_reboot)


@dataclass(frozen=True, slots=True)
class DroppedEvent:
    """An event ingest refused: kept so "why did nothing happen?" always has an answer."""

    at: datetime
    event_id: str
    reason: str
    category: str  # malformed | foreign-cluster | foreign-source | forged | stale | future-dated | not-bad
    cluster: str = ""
    node: str = ""
    condition_type: str = ""
    excerpt: str = ""

    def to_item(self) -> dict[str, Any]:
        return {
            "recordType": "dropped-event",
            "at": format_timestamp(self.at, millis=True),
            "eventId": self.event_id,
            "reason": self.reason,
            "category": self.category,
            "cluster": self.cluster,
            "node": self.node,
            "conditionType": self.condition_type,
            "excerpt": self.excerpt,
        }

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> DroppedEvent:
        return cls(
            at=parse_timestamp(item["at"], "at"),
            event_id=str(item.get("eventId", "")),
            reason=str(item.get("reason", "")),
            category=str(item.get("category", "")),
            cluster=str(item.get("cluster", "")),
            node=str(item.get("node", "")),
            condition_type=str(item.get("conditionType", "")),
            excerpt=str(item.get("excerpt", "")),
        )
