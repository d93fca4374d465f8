"""The Warning Events of a seeded schedule: recorded on the nodes, shipped by the exporter, counted.

A stream of its own (``random.Random(seed ^ WARNING_STREAM)``) plans bursts of counted signals on
the nodes: Xid 92, 63, 94 without ``RST: Yes`` and non-fatal NVLink5 lines from NPD's gpu-monitor
(``GPUInformationalXid`` / ``GPUApplicationXid``), the node monitoring agent's
``NvidiaXID92Warning: ...``, and a few operators' own log monitors reading the same kernel lines
(more sources than a window keeps). A burst repeats one line (a fast one runs into client-go's spam
filter) or writes distinct lines (from the tenth within ten minutes the recorder aggregates them).
Every other stream of the seed draws what it drew before this one existed.

Each line goes through the model of client-go's legacy recorder (:mod:`nodeheal.sim.event_recorder`):
one recorder cache per source per NPD process, and one process per instance, so a node replaced
under the same name has new caches. The recorder writes to one Event store (the API server), on
the world's clock. What it wrote is the ground truth the invariants judge the counts by: the
instance each Event uid was about, and the highest ``count`` written for it.

The exporter's Event watch sees each write in order, usually within seconds, and ships it through
the real shipper (:class:`nodeheal.exporter.node_events.NodeEventShipper`), which attributes it
against the Node the exporter's tracker has cached under that name *when it ships* (D10).
EventBridge delivers each detail after a seeded delay, sometimes twice, and the counting function
runs on it (:meth:`WarningEvents.count`, the one place that becomes the handler's invocation once
``lambdas/count_signals.py`` lands).

The case D10 exists for is drawn on purpose: when a Node object goes (Karpenter replacing it, the
instance gone, a replacement under the same name), its instance's NPD often wrote its last Warnings
seconds before, and the exporter's watch had not caught up (a stalled watch, a relist): they ship
late, after a new Node may have joined under the same name. Those Events must count for no
instance, never for the new one.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from nodeheal.errors import LedgerContentionError
from nodeheal.events import DETAIL_TYPE_NODE_EVENT, cluster_source
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.node_events import NodeEventShipper
from nodeheal.exporter.queue import QueuedEvent
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.sim.event_recorder import Action, NpdProblemClient, Recording
from nodeheal.sim.event_recorder import EventStore as ApiServerEvents
from nodeheal.sim.seeded.asl import TaskOutcome
from nodeheal.sim.seeded.deliveries import Delivery
from nodeheal.sim.seeded.template import REGION, SimFunction, SimTemplate
from nodeheal.sim.seeded.world import CLUSTER, World
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.counting import CountResult


class _Counted(Protocol):
    def counted(self, delivery: Any, result: Any) -> None: ...


class StreamHost(Protocol):
    """What the stream needs of the schedule that runs it (``nodeheal.sim.seeded.schedule``'s
    Simulation), named here so the two modules do not import each other."""

    delivering: Delivery | None
    invocations: int

    @property
    def clock(self) -> datetime: ...
    @property
    def deliveries(self) -> list[Delivery]: ...
    @property
    def world(self) -> World: ...
    @property
    def template(self) -> SimTemplate: ...
    @property
    def tracker(self) -> TransitionTracker: ...
    @property
    def invariants(self) -> _Counted: ...

    def now(self) -> datetime: ...
    def log(self, text: str) -> None: ...
    def invoke_function(self, function: SimFunction, payload: Any) -> TaskOutcome: ...


#: XORed with the seed: the Warning Event stream's own random stream.
WARNING_STREAM = 0x5167A1
#: Bursts of Warning Events a schedule plans, and when they begin (after the cluster starts).
BURSTS = (1, 2)
BURST_START_HOURS = 1.5
#: Chance that a Node object that goes had Warnings its exporter had not shipped yet (D10's case).
LATE_EVENTS_CHANCE = 0.7
#: Delivery of a shipped detail by EventBridge: seconds, and the chance of a second delivery.
DELIVERY_SECONDS = (0.05, 2.0)
DUPLICATE_CHANCE = 0.1
#: Lambda's asynchronous retry of a counting invocation that gave up on a contended window.
RETRY_SECONDS = (60.0, 180.0)

NPD_GPU_MONITOR = "gpu-monitor"
NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
#: Sources of the Xid lines, weighted: NPD's gpu-monitor most, the agent (Xid 92 only), and
#: operators' own log monitors, so a window meets more sources than it keeps (MAX_SOURCES).
SOURCES: tuple[tuple[str, int], ...] = (
    (NPD_GPU_MONITOR, 8),
    (NODE_MONITORING_AGENT, 3),
    ("gpu-log-monitor-a", 1),
    ("gpu-log-monitor-b", 1),
    ("gpu-log-monitor-c", 1),
)
#: A second Xid 63 within a day reboots (the default rule), the rest alert: reboots are the dearer
#: remediation to simulate, and one in ten bursts is enough to meet them.
SIGNALS: tuple[tuple[str, int], ...] = (("xid-92", 4), ("xid-63", 1), ("xid-94", 2), ("nvlink-nonfatal", 3))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_METRICS: list[Metrics] = []


def _weighted(rng: random.Random, choices: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def warning_line(signal: str, source: str, variant: int) -> tuple[str, str]:
    """(reason, message) of one occurrence as its source writes it; ``variant`` makes a distinct
    message (another pid, bus or link), which is what the recorder aggregates."""
    if source == NODE_MONITORING_AGENT:
        return (
            "AcceleratedHardwareReady",
            "NvidiaXID92Warning: detected unknown XID-92 on the instance, review kernel logs for "
            + ("additional information." if variant == 0 else f"additional information ({variant})."),
        )
    bus = f"{0x53 + variant % 8:02x}"
    if signal == "xid-63":
        return (
            "GPUInformationalXid",
            f"NVRM: Xid (PCI:0000:{bus}:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
            f"marked for remapping, reset gpu to activate.{'' if variant < 8 else f' ({variant})'}",
        )
    if signal == "xid-94":
        return (
            "GPUApplicationXid",
            f"NVRM: Xid (PCI:0000:{bus}:00): 94, pid={1000 + variant}, Contained: CE User Channel (0x9). "
            "RST: No, D-RST: No",
        )
    if signal == "nvlink-nonfatal":
        return (
            "GPUInformationalXid",
            f"NVRM: Xid (PCI:0000:{bus}:00): 145, RLW_REMAP Nonfatal XC0 i0 Link {variant % 18} "
            f"(0x{variant:x})",
        )
    return (
        "GPUInformationalXid",
        f"NVRM: Xid (PCI:0000:{bus}:00): 92, pid={1000 + variant}, name=python3, "
        "High single-bit ECC error rate",
    )


@dataclass(order=True)
class PlannedWarning:
    """One ``Eventf`` of a burst; its node is the burst's, chosen when the burst begins."""

    at: datetime
    sequence: int
    burst: int = field(compare=False)
    node_index: int = field(compare=False)
    source: str = field(compare=False)
    reason: str = field(compare=False)
    message: str = field(compare=False)


@dataclass(frozen=True)
class Written:
    """The ground truth of one Event uid: the instance its recorder ran on, the highest count."""

    instance_id: str
    node_uid: str
    count: int


@dataclass(order=True)
class WatchItem:
    """A write the exporter's Event watch has not delivered yet (the watch keeps write order)."""

    visible_at: datetime
    sequence: int
    kind: str = field(compare=False)  # ADDED | MODIFIED
    obj: dict[str, Any] = field(compare=False)


def draw_bursts(rng: random.Random, start: datetime) -> list[PlannedWarning]:
    """The schedule's bursts: a repeated line (2 to 8 times, 1 s to 10 min apart), a flood of one
    line (26 to 36 times 1 to 5 s apart, which the spam filter cuts after 25), or distinct lines
    (6 to 13 within minutes: the recorder aggregates from the 10th). A flood is of a signal that
    needs ten to cross: each crossing starts a remediation, and a schedule stays one schedule."""
    planned: list[PlannedWarning] = []
    for burst in range(rng.randint(*BURSTS)):
        at = start + timedelta(seconds=rng.uniform(0, BURST_START_HOURS * 3600))
        node_index = rng.randrange(64)
        source = _weighted(rng, SOURCES)
        signal = "xid-92" if source == NODE_MONITORING_AGENT else _weighted(rng, SIGNALS)
        shape = rng.choices(["repeat", "flood", "distinct"], weights=[6, 1, 3])[0]
        distinct = shape == "distinct"
        if shape == "flood":
            signal = "xid-92" if signal in ("xid-63", "xid-94") else signal
            times, gap = rng.randint(26, 36), rng.uniform(1, 5)
        elif distinct:
            times, gap = rng.randint(6, 13), rng.uniform(1, 40)
        else:
            times, gap = rng.randint(2, 8), rng.choice([rng.uniform(1, 20), rng.uniform(60, 600)])
        for index in range(times):
            reason, message = warning_line(signal, source, index if distinct else 0)
            planned.append(PlannedWarning(at, len(planned), burst, node_index, source, reason, message))
            at += timedelta(seconds=gap * rng.uniform(0.5, 1.5))
    heapq.heapify(planned)
    return planned


class WarningEvents:
    """The Warning Event stream of one schedule (see the module docstring)."""

    def __init__(self, sim: StreamHost, seed: int, *, enabled: bool = True) -> None:
        self.sim = sim
        self.enabled = enabled
        self.rng = random.Random(seed ^ WARNING_STREAM)
        self.planned = draw_bursts(self.rng, sim.clock) if enabled else []
        self.api_server = ApiServerEvents()
        #: instance -> its NPD process (recorder caches per source): a new instance, a new process.
        self.processes: dict[str, NpdProblemClient] = {}
        #: instance -> when its NPD last wrote (a process's clock only moves forward).
        self.last_written: dict[str, datetime] = {}
        #: Event uid -> what the recorder wrote it about (the invariants' ground truth).
        self.written: dict[str, Written] = {}
        self.watch: list[WatchItem] = []
        self._watch_tail = sim.clock
        self._sequence = 0
        self._burst_nodes: dict[int, str] = {}
        self._recording_at: datetime = sim.clock
        self.shipper = NodeEventShipper(
            CLUSTER,
            self._submit,
            _metrics(),
            sim.tracker.cached,
            clock=sim.now,
        )

    # -- the scheduler's view -------------------------------------------------------------------

    def next_time(self) -> datetime | None:
        times = [t for t in (self.planned[0].at if self.planned else None, self._watch_head()) if t]
        return min(times, default=None)

    def _watch_head(self) -> datetime | None:
        return self.watch[0].visible_at if self.watch else None

    def ready(self, now: datetime) -> list[tuple[str, Any]]:
        ready: list[tuple[str, Any]] = []
        if self.planned and self.planned[0].at <= now:
            ready.append(("warning", None))
        if self.watch and self.watch[0].visible_at <= now:
            ready.append(("event-watch", None))
        return ready

    @property
    def settled(self) -> bool:
        return not self.planned and not self.watch

    def step(self, kind: str) -> None:
        if kind == "warning":
            self._record(heapq.heappop(self.planned))
        else:
            item = heapq.heappop(self.watch)
            self.shipper.on_event(item.kind, item.obj)

    # -- recording on the nodes -------------------------------------------------------------------

    def _instance_on(self, name: str) -> str:
        """The instance whose NPD runs as Node ``name`` (its providerID may not be set yet)."""
        world = self.sim.world
        return world.instance_of(name) or world.unnamed_instances.get(name, "").rsplit("/", 1)[-1]

    def _record(self, planned: PlannedWarning) -> None:
        world = self.sim.world
        name = self._burst_nodes.get(planned.burst)
        if name is None:
            names = sorted(world.nodes)
            if not names:
                return
            name = self._burst_nodes[planned.burst] = names[planned.node_index % len(names)]
        if name not in world.nodes or name in world.dead_kubelets:
            return
        instance_id = self._instance_on(name)
        instance = world.instances.get(instance_id)
        if instance is None or instance.state != "running":
            return
        self._eventf(
            name,
            instance_id,
            world.node_uid(name),
            planned.source,
            planned.reason,
            planned.message,
            self.sim.clock,
        )

    def _eventf(
        self,
        name: str,
        instance_id: str,
        node_uid: str,
        source: str,
        reason: str,
        message: str,
        at: datetime,
        lag: float | None = None,
    ) -> Recording:
        process = self.processes.get(instance_id)
        if process is None:
            process = self.processes[instance_id] = NpdProblemClient(name, self.api_server, self._nanos)
        self._recording_at = at
        self.last_written[instance_id] = at
        recording = process.eventf("Warning", source, reason, message)
        stored = recording.stored
        if stored is None:
            return recording
        obj = stored.to_json()
        uid = str(obj["metadata"]["uid"])
        before = self.written.get(uid)
        self.written[uid] = Written(
            instance_id, node_uid, max(stored.event.count, before.count if before else 0)
        )
        self.sim.log(
            f"warning {recording.action.value} on {name.split('.')[0]} ({instance_id}) by {source}: "
            f"{reason} count {stored.event.count}"
        )
        kind = "ADDED" if recording.action is Action.CREATED else "MODIFIED"
        self._watch(kind, obj, at, lag)
        return recording

    def _nanos(self) -> int:
        moment = self._recording_at - _EPOCH
        return (moment.days * 86400 + moment.seconds) * 10**9 + moment.microseconds * 1000

    def _watch(self, kind: str, obj: dict[str, Any], written_at: datetime, lag: float | None = None) -> None:
        """The exporter's watch delivers the write after ``lag`` seconds, and never before an
        earlier write (one watch stream, in order)."""
        if lag is None:
            lag = self.rng.uniform(0.05, 2.0) if self.rng.random() < 0.9 else self.rng.uniform(30, 300)
        visible = max(self._watch_tail, written_at + timedelta(seconds=lag))
        self._watch_tail = visible
        self._sequence += 1
        heapq.heappush(self.watch, WatchItem(visible, self._sequence, kind, obj))

    def node_deleted(self, raw: Mapping[str, Any]) -> None:
        """A Node object goes: often its instance's NPD wrote its last Warnings seconds before, and
        the exporter ships them only after a stall of its watch, when a new Node may have joined
        under the same name (D10's case, drawn here so the simulation meets it often)."""
        if not self.enabled or self.rng.random() >= LATE_EVENTS_CHANCE:
            return
        metadata = raw["metadata"]
        instance_id = str((raw.get("spec") or {}).get("providerID", "")).rsplit("/", 1)[-1]
        if not instance_id:
            return
        now = self.sim.clock
        signal = _weighted(self.rng, SIGNALS)
        at = now - timedelta(seconds=self.rng.uniform(2, 20))
        last = self.last_written.get(instance_id)
        if last is not None and at <= last:
            at = last + timedelta(milliseconds=1)
        stall = self.rng.uniform(1, 300)
        for variant in range(self.rng.randint(1, 3)):
            reason, message = warning_line(signal, NPD_GPU_MONITOR, variant % 2)
            # Written before the Node went; the stalled watch delivers it ``stall`` s from now.
            lag = (now - at).total_seconds() + stall
            self._eventf(
                str(metadata["name"]),
                instance_id,
                str(metadata["uid"]),
                NPD_GPU_MONITOR,
                reason,
                message,
                at,
                lag,
            )
            at += timedelta(milliseconds=self.rng.randint(1, 900))

    # -- the exporter, EventBridge and the counting function -------------------------------------

    def _submit(self, items: list[QueuedEvent]) -> None:
        sim = self.sim
        for item in items:
            sim.invocations += 1
            envelope = {
                "version": "0",
                "id": f"nev-{sim.invocations}",
                "detail-type": DETAIL_TYPE_NODE_EVENT,
                "source": cluster_source("nodeheal.exporter", CLUSTER),
                "account": "123456789012",
                "time": format_timestamp(sim.clock),
                "region": REGION,
                "resources": [],
                "detail": json.loads(item.detail),
            }
            at = sim.clock + timedelta(seconds=self.rng.uniform(*DELIVERY_SECONDS))
            sim.deliveries.append(Delivery(at, envelope, "node-event"))
            if self.rng.random() < DUPLICATE_CHANCE:
                again = at + timedelta(seconds=self.rng.uniform(1, 120))
                sim.deliveries.append(Delivery(again, envelope, "node-event-duplicate"))

    def count(self, delivery: Delivery) -> CountResult | None:
        """The counting function (``lambdas/count_signals.py``, the template's) invoked on one
        delivered detail, as the rule invokes it: through the schedule's Lambda runtime, so its
        ports are the schedule's (the ledger's windows and dropped events, ingest's starter) and a
        lost ledger race is Lambda's asynchronous retry."""
        sim = self.sim
        sim.delivering = delivery  # an execution a crossing starts says which delivery started it
        try:
            outcome = sim.invoke_function(sim.template.count_signals, delivery.envelope)
        finally:
            sim.delivering = None
        result: CountResult | None = None
        if outcome.error == LedgerContentionError.__name__:
            retry = sim.clock + timedelta(seconds=self.rng.uniform(*RETRY_SECONDS))
            sim.deliveries.append(Delivery(retry, delivery.envelope, delivery.kind))
        elif outcome.error is not None:
            # Lambda retries an asynchronous invocation that failed for any other reason too.
            sim.log(f"count failed ({outcome.error}): Lambda retries it")
            retry = sim.clock + timedelta(seconds=self.rng.uniform(*RETRY_SECONDS))
            sim.deliveries.append(Delivery(retry, delivery.envelope, delivery.kind))
        else:
            result = CountResult(**_count_fields(outcome.output))
        detail = delivery.envelope["detail"]
        sim.log(
            f"count {delivery.kind} of {str(detail['node']['name']).split('.')[0]} "
            f"(instance {detail['node']['instanceID'] or '-'}, Event count {detail['event']['count']}): "
            + (
                f"{result.status} {result.signal} {result.count} {result.execution}".rstrip()
                if result
                else "retry"
            )
        )
        sim.invariants.counted(delivery, result)
        return result


def _count_fields(output: Any) -> dict[str, Any]:
    """The handler's JSON answer (``CountResult.to_json``) as CountResult's fields."""
    answer = output if isinstance(output, Mapping) else {}
    return {
        "status": str(answer.get("status", "")),
        "reason": str(answer.get("reason", "")),
        "signal": str(answer.get("signal", "")),
        "instance_id": str(answer.get("instanceId", "")),
        "count": int(answer.get("count", 0) or 0),
        "execution": str(answer.get("execution", "")),
        "execution_arn": str(answer.get("executionArn", "")),
        "category": str(answer.get("category", "")),
    }


def _metrics() -> Metrics:
    """One exporter registry for every schedule of the process: the shipper only counts into it."""
    if not _METRICS:
        _METRICS.append(Metrics())
    return _METRICS[0]


__all__: list[str] = ["WARNING_STREAM", "WarningEvents", "Written", "draw_bursts", "warning_line"]
