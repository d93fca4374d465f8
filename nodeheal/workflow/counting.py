"""Counting: from a ``Node Event Observed`` to an instance's window, and a remediation when it crosses.

The counting function (``lambdas/count_signals.py``) runs this for every Warning Event the rule
sends it. It is not a state of the state machine: it has its own rule, construct and ledger
grant, and it starts a remediation the way ingest does, with a deterministic name and the same
execution input, so everything after Load settings is the workflow every fault takes.

What it checks before counting, in order, with the same words as ingest where they mean the same:
the contract (``malformed``), that the Source speaks for the detail's cluster (``forged``,
``foreign-source``, D9), that the cluster is this deployment's (``foreign-cluster``), that the
Event is not stale or dated ahead. An Event that reports no counted signal is ``ignored`` and
written nowhere. A counted signal on an Event the exporter could not attach to an instance (D10)
is ``unattributed``, recorded as a dropped event: a count on a guessed instance could reboot the
wrong one, so it counts for none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.counted_signals import COUNTED_CONDITION_TYPE, DEFINITIONS, CountedRule
from nodeheal.errors import DuplicateExecutionError, InvalidEventError, LedgerContentionError
from nodeheal.events import (
    DETAIL_TYPE_NODE_EVENT,
    MAX_EVENT_ID_CHARS,
    NodeConditionEvent,
    NodeEventDetail,
    NodeIdentity,
)
from nodeheal.policy.counted_signals import counted_signal
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.ingest import (
    FUTURE_DATED,
    FUTURE_TOLERANCE,
    IngestSettings,
    check_source,
    execution_input,
    execution_name,
    record_dropped,
)
from nodeheal.workflow.ports import ExecutionStarter, LedgerPort
from nodeheal.workflow.signal_windows import (
    Crossing,
    EventUpdate,
    SignalWindow,
    crossed,
    crossing,
    observe,
)

#: Read-modify-write rounds on one window before the invocation fails (and is retried by
#: Lambda's asynchronous retries): two Events of one instance counted at once race here.
MAX_WRITE_ATTEMPTS = 8
UNATTRIBUTED = "unattributed"


class SignalWindowPort(Protocol):
    """The ledger's window items (``nodeheal.aws.ledger.Ledger``)."""

    def read_signal_window(self, cluster: str, instance_id: str, signal: str) -> SignalWindow | None: ...
    def write_signal_window(self, window: SignalWindow, *, expires_at: datetime) -> SignalWindow:
        """Store ``window`` if the stored item still has ``window.version`` (0: none stored yet);
        return it with its new version, or raise LedgerContentionError."""
        ...


@dataclass(frozen=True, slots=True)
class CountResult:
    #: counted | crossed | duplicate | ignored | unattributed | dropped
    status: str
    reason: str = ""
    signal: str = ""
    instance_id: str = ""
    #: Occurrences in the window after this Event (counted once across detectors).
    count: int = 0
    execution: str = ""
    execution_arn: str = ""
    category: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "signal": self.signal,
            "instanceId": self.instance_id,
            "count": self.count,
            "execution": self.execution,
            "executionArn": self.execution_arn,
            "category": self.category,
        }


def count_node_event(
    payload: Any,
    *,
    settings: IngestSettings,
    policy: PolicySettings,
    windows: SignalWindowPort,
    starter: ExecutionStarter,
    ledger: LedgerPort,
    now: datetime,
) -> CountResult:
    event_id = str(payload.get("id", ""))[:MAX_EVENT_ID_CHARS] if isinstance(payload, dict) else ""

    def drop(category: str, reason: str, detail: NodeEventDetail | None = None) -> CountResult:
        record_dropped(
            ledger,
            now,
            event_id,
            category,
            reason,
            payload=payload,
            cluster=detail.cluster if detail else "",
            node=detail.node_name if detail else "",
            condition_type=COUNTED_CONDITION_TYPE,
        )
        return CountResult("dropped" if category != UNATTRIBUTED else UNATTRIBUTED, reason, category=category)

    try:
        detail = NodeEventDetail.from_detail(_detail_of(payload))
    except InvalidEventError as invalid:
        return drop("malformed", f"invalid Node Event: {invalid}")
    refusal = check_source(
        payload.get("source"), cluster=detail.cluster, schema_version="1.1", prefix=settings.event_source
    )
    if refusal is not None:
        return drop(*refusal, detail)
    if detail.cluster not in settings.clusters:
        return drop(
            "foreign-cluster",
            f"cluster {detail.cluster!r} is not one of this deployment's "
            f"({', '.join(sorted(settings.clusters))})",
            detail,
        )
    occurred = detail.event.last_timestamp
    if occurred - now > FUTURE_TOLERANCE or detail.observed_at - now > FUTURE_TOLERANCE:
        return drop(FUTURE_DATED, "Event dated ahead of this clock: a wrong clock or a forged event", detail)
    signal = counted_signal(detail.event.type, detail.event.reason, detail.event.message)
    if signal is None:
        return CountResult(
            "ignored", f"{detail.event.type} {detail.event.reason or '-'} is no counted signal"
        )
    if not detail.instance_id or not detail.node_uid:
        return drop(
            UNATTRIBUTED,
            f"{DEFINITIONS[signal].title} on node {detail.node_name} carries no instance: the exporter "
            "attaches one only when the Event's Node UID is the Node it holds (D10)",
            detail,
        )
    rule = policy.counted_rule(signal)
    age = now - occurred
    if age > timedelta(hours=rule.window_hours):
        return CountResult(
            "ignored",
            f"occurred {int(age.total_seconds())}s ago, before the window",
            signal,
            detail.instance_id,
        )
    return _count(detail, signal, rule, windows, starter, now, event_id)


def _count(
    detail: NodeEventDetail,
    signal: str,
    rule: CountedRule,
    windows: SignalWindowPort,
    starter: ExecutionStarter,
    now: datetime,
    event_id: str,
) -> CountResult:
    update = EventUpdate(
        uid=detail.event.uid,
        source=detail.event.source,
        count=detail.event.count,
        message=detail.event.message,
        first_timestamp=detail.event.first_timestamp,
        last_timestamp=detail.event.last_timestamp,
    )
    for _attempt in range(MAX_WRITE_ATTEMPTS):
        stored = windows.read_signal_window(detail.cluster, detail.instance_id, signal)
        window = stored or SignalWindow(cluster=detail.cluster, instance_id=detail.instance_id, signal=signal)
        counted = observe(window, update, boot_id=detail.boot_id, rule=rule, now=now)
        reached = crossing(counted, rule, now)
        if counted == window and reached is None:
            return CountResult(
                "duplicate",
                "no new occurrence: a repeated delivery, or an update that raised no count",
                signal,
                detail.instance_id,
                counted.count_since((now - timedelta(hours=rule.window_hours)).timestamp()),
            )
        try:
            written = windows.write_signal_window(counted, expires_at=counted.expires_at(rule))
        except LedgerContentionError:
            continue  # another invocation counted this window first: read it again
        total = written.count_since((now - timedelta(hours=rule.window_hours)).timestamp())
        if reached is None:
            return CountResult("counted", "", signal, detail.instance_id, total)
        return _start(detail, written, reached, windows, starter, now, event_id, total)
    raise LedgerContentionError(
        f"the {signal} window of {detail.instance_id} changed under {MAX_WRITE_ATTEMPTS} writes in a row"
    )


def _start(
    detail: NodeEventDetail,
    window: SignalWindow,
    reached: Crossing,
    windows: SignalWindowPort,
    starter: ExecutionStarter,
    now: datetime,
    event_id: str,
    total: int,
) -> CountResult:
    """Start the crossing's execution, then mark the window crossed. In that order: an invocation
    that dies between the two starts the same name again on its retry, which Step Functions
    refuses as a duplicate, so a crossing is never lost and never started twice."""
    event = counted_event(detail, reached, now)
    name = execution_name(event)
    status, arn = "crossed", ""
    try:
        arn = starter.start(name, execution_input(event, event_id=event_id, received_at=now))
    except DuplicateExecutionError:
        status = "duplicate"
    marked = crossed(window, reached)
    for _attempt in range(MAX_WRITE_ATTEMPTS):
        try:
            windows.write_signal_window(marked, expires_at=marked.expires_at(reached.rule))
            break
        except LedgerContentionError:
            stored = windows.read_signal_window(window.cluster, window.instance_id, window.signal)
            if stored is None:
                break
            marked = crossed(stored, reached)
    reason = (
        f"{DEFINITIONS[reached.signal].title}: {total} within {reached.rule.window_hours}h "
        f"(threshold {reached.rule.count}) on {reached.instance_id}"
    )
    return CountResult(status, reason, reached.signal, reached.instance_id, total, name, arn)


def counted_event(detail: NodeEventDetail, reached: Crossing, now: datetime) -> NodeConditionEvent:
    """The event a crossing's execution starts with: the node as the Event named it, and a
    condition made from the window, which Admit proves against the ledger (D1, D19)."""
    definition = DEFINITIONS[reached.signal]
    message = (
        f"{definition.title} seen {reached.count} times within {reached.rule.window_hours}h on instance "
        f"{reached.instance_id} (threshold {reached.rule.count}, window from "
        f"{format_timestamp(reached.window_start)}); newest: {detail.event.message}"
    )
    return NodeConditionEvent(
        cluster=detail.cluster,
        node=NodeIdentity(
            name=detail.node_name,
            uid=detail.node_uid,
            instance_id=reached.instance_id,
            boot_id=reached.boot_id,
        ),
        condition=Condition(
            type=COUNTED_CONDITION_TYPE,
            status="True",
            reason=definition.reason,
            message=message,
            last_transition_time=reached.window_start,
        ),
        observed_at=now,
        counted_signal=reached.to_json(),
    )


def _detail_of(payload: Any) -> Any:
    if not isinstance(payload, dict):
        raise InvalidEventError(f"expected an EventBridge event object, got {type(payload).__name__}")
    if payload.get("detail-type") != DETAIL_TYPE_NODE_EVENT:
        raise InvalidEventError(
            f"detail-type {payload.get('detail-type')!r} is not {DETAIL_TYPE_NODE_EVENT!r}"
        )
    if "detail" not in payload:
        raise InvalidEventError("EventBridge event has no detail")
    return payload["detail"]
