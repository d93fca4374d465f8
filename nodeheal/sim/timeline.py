"""The local pipeline's timeline: what happened where, in order, with elapsed times.

Every part of the simulation (fault injection, the exporter's publications, the rule target,
each Lambda task, the simulated Karpenter and scheduler) emits one :class:`TimelineEvent`; the
demo prints them live and the tests read them to know *that* something happened. How long each
remediation stage took is the ledger's business (``stage_seconds``), never the timeline's.

An event about a node carries the node's name and its EC2 instance: with several nodes faulting
at once, every printed line says which node (and which instance behind that name) it is about.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from nodeheal.steps import step_of_handler
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.records import RemediationRecord


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    at: float  # time.monotonic()
    #: Who did it: fault, exporter, eventbridge, ingest, count-signals, workflow, ec2, karpenter,
    #: scheduler, node.
    source: str
    #: What happened, for code: fault, published, matched, started, duplicate, dropped, decision,
    #: cordoned, drain-round, drained, forced, terminated, rebooted, recovered, uncordoned, recorded,
    #: task-failed, stopped, node-deleted, nodeclaim-deleting, instance-launched, node-ready,
    #: pod-bound, pod-running, workload-running.
    kind: str
    text: str
    node: str = ""
    execution: str = ""
    #: The EC2 instance the event is about: the node's, or a new one with no Node yet.
    instance: str = ""


class Timeline:
    """Thread-safe, append-only list of events with live subscribers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[TimelineEvent] = []
        self._listeners: list[Callable[[TimelineEvent], None]] = []
        #: Node name -> its instance, as the cluster registered it (names are never reused here).
        self._instances: dict[str, str] = {}
        self.origin = time.monotonic()
        self._origin_wall = time.time()

    def note_instance(self, node: str, instance: str) -> None:
        """``node`` runs on ``instance``: events about the node that do not name one carry it."""
        with self._lock:
            self._instances[node] = instance

    def mark_origin(self) -> None:
        """Elapsed times count from now (the demo marks the fault injection)."""
        with self._lock:
            self.origin = time.monotonic()
            self._origin_wall = time.time()

    def monotonic_of(self, moment: datetime) -> float:
        """A wall-clock timestamp (an event's observedAt) on the timeline's monotonic scale."""
        return self.origin + (moment.timestamp() - self._origin_wall)

    def subscribe(self, listener: Callable[[TimelineEvent], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def emit(
        self,
        source: str,
        kind: str,
        text: str,
        *,
        node: str = "",
        execution: str = "",
        instance: str | None = None,
        at: float | None = None,
    ) -> TimelineEvent:
        # Listeners run under the lock so printed lines never interleave across threads.
        with self._lock:
            event = TimelineEvent(
                at=time.monotonic() if at is None else at,
                source=source,
                kind=kind,
                text=text,
                node=node,
                execution=execution,
                instance=self._instances.get(node, "") if instance is None else instance,
            )
            self._events.append(event)
            for listener in self._listeners:
                listener(event)
        return event

    def events(self, kind: str | None = None, *, node: str | None = None) -> list[TimelineEvent]:
        with self._lock:
            return [
                e
                for e in self._events
                if (kind is None or e.kind == kind) and (node is None or e.node == node)
            ]

    def elapsed(self, event: TimelineEvent) -> float:
        return event.at - self.origin


def short_node(name: str) -> str:
    """``ip-10-0-1-2.us-west-2.compute.internal`` -> ``ip-10-0-1-2`` (the suffix is the same for all)."""
    return name.split(".", 1)[0]


#: Width of the printed node column: the simulated cluster's longest host name (its VPC is
#: 10.0.0.0/16, see nodeheal.sim.cluster.names), an instance id (i- and 17 hex digits), a space between.
NODE_COLUMN = len("ip-10-0-255-255") + 1 + len("i-0123456789abcdef0")
#: The node column of an event about an instance that has no Node yet (Karpenter's launch).
NO_NODE_YET = "(no Node yet)"


def node_column(event: TimelineEvent) -> str:
    """``ip-10-0-1-2 i-0abc...``: which node, and which instance behind the name, the event is about."""
    if not event.node and not event.instance:
        return ""
    return f"{short_node(event.node) or NO_NODE_YET} {event.instance or '-'}"


class TimelinePrinter:
    """Prints each event as one line: elapsed seconds, who, which node (and instance), what."""

    def __init__(
        self, timeline: Timeline, stream: TextIO | None = None, *, color: bool | None = None
    ) -> None:
        self._timeline = timeline
        self._stream = stream or sys.stdout
        self._color = self._stream.isatty() if color is None else color

    _COLORS: Mapping[str, str] = {
        "fault": "31",
        "decision": "1",
        "terminated": "33",
        "rebooted": "33",
        "recorded": "32",
        "workload-running": "32",
        "task-failed": "31",
        "stopped": "33",
        "dropped": "35",
    }

    def __call__(self, event: TimelineEvent) -> None:
        elapsed = self._timeline.elapsed(event)
        text = event.text
        code = self._COLORS.get(event.kind)
        if self._color and code:
            text = f"\033[{code}m{text}\033[0m"
        node = node_column(event)
        self._stream.write(f"  {elapsed:+7.2f}s  {event.source:<11} {node:<{NODE_COLUMN}}  {text}\n")
        self._stream.flush()


# -- describing what the workflow did --------------------------------------------------------------


def describe_task(handler: str, result: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, text) for a Lambda task's result, or None when it is not worth a line. A step of the
    registry is described in its entry's words (``nodeheal.steps``)."""
    step = step_of_handler(handler)
    if step is not None:
        return step.timeline(result) if step.timeline is not None else None
    return None


# -- the remediation history table -----------------------------------------------------------------


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def history_table(records: Sequence[RemediationRecord]) -> str:
    """The ledger's remediation history as the console shows it, oldest first."""
    header = ("started", "node", "signal", "action", "outcome", "pods", "fault->action", "execution")
    rows: list[tuple[str, ...]] = [header]
    for record in sorted(records, key=lambda r: (r.started_at, r.execution)):
        signal = (
            f"Xid {record.xid}"
            if record.xid is not None
            else (record.signal or record.condition.get("type", ""))
        )
        action = record.action.value
        if record.planned_action is not record.action:
            action = f"{action} (wanted {record.planned_action.value})"
        pods = (
            str(record.pods_evicted + record.pods_forced)
            if record.pods_evicted or record.pods_forced
            else "-"
        )
        seconds = record.stage_seconds.get("faultToInstanceAction", record.stage_seconds.get("faultToCordon"))
        rows.append(
            (
                format_timestamp(record.started_at)[11:19],
                short_node(record.node),
                signal,
                action,
                record.outcome.value,
                pods,
                _duration(seconds),
                record.execution,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def stage_breakdown(record: RemediationRecord, stages: Iterable[str] | None = None) -> str:
    """``detected 0.1s, published 0.0s, ...`` from the record's ledger stage durations."""
    names = stages or (
        "detected",
        "published",
        "ingested",
        "started",
        "admitted",
        "cordoned",
        "drained",
        "instanceAction",
        "recovered",
        "uncordoned",
    )
    return ", ".join(
        f"{name} {record.stage_seconds[name]:.1f}s" for name in names if name in record.stage_seconds
    )
