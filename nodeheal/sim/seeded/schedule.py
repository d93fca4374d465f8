"""One seeded schedule: the workflow, the cluster and the faults, interleaved by a seeded scheduler.

Everything runs in one thread on a virtual clock. At each step the scheduler picks, with the
seed's random stream, one of the things that are ready: an execution's next state (the real
handler of a Task, through the in-memory adapters), a world timer (a pod stopping, a node coming
back from a reboot, Karpenter replacing a node), an event reaching ingest, a status-change event
reaching the finalizer, the sweeper, or a planned fault that has come due. Inside a handler, every
adapter call is a scheduling point too: there the scheduler may first run another ready step
(nested, to a bounded depth) or inject a fault, which is how a schedule asks "what if the node,
the condition, the lock, the clock or AWS changed between my read and my write?". The invariants
(:mod:`nodeheal.sim.seeded.invariants`) are checked after every step.

The fakes a handler runs against (the Lambda runtime and context, Step Functions, SNS) are in
:mod:`nodeheal.sim.seeded.aws_fakes`; the process they share is prepared by
:mod:`nodeheal.sim.seeded.handler_env`.
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodeheal import worst_case
from nodeheal.config import RemediationSettings
from nodeheal.errors import (
    DuplicateExecutionError,
    Ec2ThrottledError,
    KubernetesApiUnavailableError,
    LedgerContentionError,
)
from nodeheal.events import DETAIL_TYPE_CONDITION_CHANGED, NodeConditionEvent, cluster_source
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.patterns import match
from nodeheal.runtime import using_runtime
from nodeheal.sim.seeded import asl
from nodeheal.sim.seeded.aws_fakes import SimContext, SimExecutions, SimNotifier, SimRuntime, SimStarter
from nodeheal.sim.seeded.deliveries import NODE_EVENT_DELIVERIES, Delivery
from nodeheal.sim.seeded.faults import (
    HELD_CHECKPOINT_APP,
    IDENTITY_BEFORE,
    LESSER_REASON_BEFORE,
    PlannedFault,
)
from nodeheal.sim.seeded.handler_env import quiet
from nodeheal.sim.seeded.memory_ledger import MemoryLedger
from nodeheal.sim.seeded.policy_oracle import transition_key
from nodeheal.sim.seeded.template import REGION, STATE_MACHINE_ARN, SimFunction, SimTemplate
from nodeheal.sim.seeded.warning_events import WarningEvents
from nodeheal.sim.seeded.world import (
    CLUSTER,
    START,
    Budget,
    Mutation,
    World,
)
from nodeheal.steps import ADMIT, CORDON, DRAIN, REBOOT, RECORD, TERMINATE
from nodeheal.timestamps import format_timestamp

#: The exporter re-sends every bad condition this often (its default ``resync_seconds``), which is
#: what recovers an event EventBridge delivered too late for ingest.
EXPORTER_RESYNC_SECONDS = 3600


#: Faults applied only between invocations (a clock jump inside one would be a Lambda running for hours).
BETWEEN_INVOCATIONS = frozenset({"lock-ttl-expiry"})


class LambdaKilled(BaseException):
    """The Lambda service ends the invocation (timeout): no line of the handler runs after this."""


@dataclass
class Invocation:
    """One Lambda invocation of a handler, as the invariants see it."""

    number: int
    function: str
    execution: str
    state_name: str
    payload: Mapping[str, Any] | None
    started_at: datetime
    timeout_seconds: float
    mode: str
    paused: bool
    #: Virtual seconds the invocation's calls took (slow API answers).
    spent: float = 0.0
    #: Its result is lost after it returns (the Lambda was killed after its side effect).
    lose_result: bool = False
    claimed: set[str] = field(default_factory=set)
    #: The worst confirmed fault of the admitted instance when the invocation began (I8).
    worst_at_start: str = "none"

    @property
    def admitted(self) -> Mapping[str, Any]:
        admission = (self.payload or {}).get("admission") or {}
        return admission.get("node") or {}

    @property
    def condition_type(self) -> str:
        """The condition the execution remediates: admit's (it takes over the fault of a holder it
        pushed aside when its own is gone, D2 in docs/architecture.md), else the event's."""
        admitted = ((self.payload or {}).get("admission") or {}).get("condition") or {}
        if admitted.get("type"):
            return str(admitted["type"])
        return str((((self.payload or {}).get("event") or {}).get("condition") or {}).get("type", ""))


@dataclass
class SimExecution:
    run: asl.Execution
    #: (cluster, node name, node uid, condition type, status, reason, transition time) of its event.
    key: tuple[str, ...]
    started_by: str  # the delivery kind that started it
    #: Transient faults injected per state visit (state name, visit number) -> count.
    transient: dict[str, int] = field(default_factory=dict)
    last_error_state: str = ""


@dataclass
class TraceLine:
    at: datetime
    point: int
    text: str

    def render(self, start: datetime) -> str:
        return f"{(self.at - start).total_seconds():9.1f}s #{self.point:<5d} {self.text}"


#: The most characters of one admission's trace line after the execution's name: the reason grows
#: with every adjustment made to the classification, and a trace line stays one line.
ADMISSION_TRACE_CHARS = 400


def admission_trace(execution: str, result: Any) -> str:
    """The trace line of one admission: the verdict, the action decided, and the rule that made it
    (what the classification asked for and the decision's reason), then admit's note. A longer one
    loses its middle (the catalog's text), not the rule that starts it or the adjustments that end it."""
    admission = result if isinstance(result, Mapping) else {}
    decision = admission.get("decision")
    said = str(admission.get("verdict") or "?")
    if isinstance(decision, Mapping):
        said += (
            f", {decision.get('action')} (rule: {decision.get('plannedAction')}; {decision.get('reason')})"
        )
    else:
        said += ", no decision"
    if admission.get("note"):
        said += ("; " if isinstance(decision, Mapping) else ": ") + str(admission["note"])
    said = " ".join(said.split())
    if len(said) > ADMISSION_TRACE_CHARS:
        head = ADMISSION_TRACE_CHARS // 3
        said = f"{said[:head]} ... {said[head + 5 - ADMISSION_TRACE_CHARS :]}"
    return f"  admit {execution}: {said}"


#: Pool kind of each node, by index (cycled): three in a Karpenter NodePool, two in a managed node
#: group, one in neither.
MIXED_POOLS: tuple[str, ...] = ("karpenter", "karpenter", "karpenter", "nodegroup", "nodegroup", "none")
POOL_NAMES = {"karpenter": "gpu", "nodegroup": "gpu-mng", "none": ""}


@dataclass(frozen=True, slots=True)
class SimOptions:
    nodes: int = 6
    #: Pool kinds of the nodes (see :data:`MIXED_POOLS`); ``("nodegroup",)`` is a cluster of managed
    #: node groups only.
    pool_kinds: tuple[str, ...] = MIXED_POOLS
    #: How deep a handler's scheduling point may run other steps inside it.
    max_nesting: int = 1
    #: Chance that a scheduling point inside a handler runs another ready step first.
    interleave: float = 0.25
    max_steps: int = 6000
    horizon: timedelta = timedelta(hours=30)
    #: Warning Events on the nodes (:mod:`nodeheal.sim.seeded.warning_events`). Off only to replay
    #: a trace kept from before they existed: their steps change a seed's interleaving.
    warning_events: bool = True


class FaultInjector(Protocol):
    """How faults reach the world (:mod:`nodeheal.sim.seeded.fault_effects`, handed in by the runner:
    it reads the simulation, so it cannot be imported here)."""

    def inject(self, sim: Simulation, fault: PlannedFault) -> None: ...
    def provoke_a_contender(self, sim: Simulation, name: str, rng: random.Random) -> None: ...
    def write_lesser_reason(
        self, sim: Simulation, name: str, condition_type: str, rng: random.Random
    ) -> bool: ...


class Observer(Protocol):
    """What the simulation tells the safety invariants (:class:`nodeheal.sim.seeded.invariants.
    Invariants`, built by the runner with this simulation), and what the faults count in them."""

    #: Fault kind -> schedules it was applied in / times it fired.
    coverage: Counter[str]
    fired: Counter[str]
    #: (start, duration) of outages: nothing of NodeHeal runs then.
    outages: list[tuple[datetime, timedelta]]

    def after_step(self) -> None: ...
    def at_end(self) -> None: ...
    def execution_started(self, execution: SimExecution, delivery: Any) -> None: ...
    def ingested(self, delivery: Any, result: Mapping[str, Any] | None) -> None: ...
    def invocation_started(self, invocation: Invocation) -> None: ...
    def invocation_ended(self, invocation: Invocation) -> None: ...
    def mutation(self, mutation: Mutation) -> None: ...
    def saw_event(self, event: Any) -> None: ...
    def saw_node(self, node: Mapping[str, Any]) -> None: ...
    def state_entered(self, execution: SimExecution) -> None: ...
    def task_returned(self, function: str, execution: str, result: Any) -> None: ...
    def taken_back(self, node_uid: str, at: datetime, executions: Iterable[str]) -> None: ...
    def operator_changed(self, kind: str) -> None: ...
    def counted(self, delivery: Any, result: Any) -> None: ...


class Simulation:
    def __init__(
        self,
        template: SimTemplate,
        seed: int,
        plan: list[PlannedFault],
        *,
        options: SimOptions | None = None,
        settings_overrides: Callable[[random.Random, dict[str, Any]], None] | None = None,
        trace: bool = True,
        ledger_factory: Callable[[Callable[[], datetime], Callable[[str], None]], Any] | None = None,
        injector: FaultInjector,
        observer: Callable[[Simulation], Observer],
    ) -> None:
        self.injector = injector
        self.template = template
        self.seed = seed
        self.options = options or SimOptions()
        self.rng = random.Random(seed)
        self.fault_rng = random.Random(seed ^ 0x5EED)
        self.drain_rng = random.Random(seed ^ 0xD2A1)
        #: Capacity (how each instance was bought, which pools are scarce), from a stream of its own
        #: so every seed draws its faults, timings and settings as before instances had capacity.
        self.capacity_rng = random.Random(seed ^ 0xCA9AC)
        self.clock = START
        self.plan = sorted(plan, key=lambda f: (f.at_point, f.kind, f.seed))
        self.applied: list[PlannedFault] = []
        self.points = 0
        self.steps = 0
        self.trace_enabled = trace
        self.trace: list[TraceLine] = []
        self.world = World(self.rng, self.now, cluster=CLUSTER, capacity_rng=self.capacity_rng)
        self.ledger: Any = (
            ledger_factory(self.now, self._ledger_point)
            if ledger_factory is not None
            else MemoryLedger(clock=self.now, on_call=self._ledger_point)
        )
        self.notifier = SimNotifier()
        self.executions: dict[str, SimExecution] = {}
        self.by_arn: dict[str, SimExecution] = {}
        self.executions_port = SimExecutions(self)
        self.starter: SimStarter = SimStarter(self)
        self.deliveries: list[Delivery] = []
        self.status_changes: list[tuple[datetime, str]] = []
        self.next_sweep = START + timedelta(seconds=template.sweep_seconds or 300)
        self.next_resync = START + timedelta(seconds=EXPORTER_RESYNC_SECONDS)
        self.last_end_at = START
        self.last_sweep_at = START
        self.deployed_mode: str = ""
        self.stack: list[Invocation] = []
        self.invocations: int = 0
        self.delivering: Delivery | None = None
        self.sent_events: list[Delivery] = []
        self.armed: dict[str, int] = {}
        #: Executions whose drain contender-ends has provoked a contender for already.
        self._provoked: set[str] = set()
        self.settings: RemediationSettings = self._settings(settings_overrides)
        self.definition = self._definition()
        self.machine = asl.StateMachine.from_definition(self.definition)
        self.tracker: TransitionTracker = TransitionTracker(CLUSTER, lambda t: True, clock=self.now)
        self.world.on_node_change = self._node_changed
        self.world.observer = self
        self.invariants: Observer = observer(self)
        self._handlers: dict[str, Any] = {}
        #: Warning Events on the nodes, shipped and counted: a stream of its own (``seed ^
        #: WARNING_STREAM``), so every stream above draws what it drew before it existed.
        self.warnings = WarningEvents(self, seed, enabled=self.options.warning_events)
        self._build_cluster()

    # -- clock and trace --------------------------------------------------------------------------

    def now(self) -> datetime:
        return self.clock

    def log(self, text: str) -> None:
        if self.trace_enabled:
            self.trace.append(TraceLine(self.clock, self.points, text))

    # -- settings: the deployed ones, varied per schedule within what the config accepts ----------

    def _settings(
        self, overrides: Callable[[random.Random, dict[str, Any]], None] | None
    ) -> RemediationSettings:
        raw = copy.deepcopy(self.template.definition["States"]["Load settings"]["Parameters"]["settings"])
        raw["drain"]["onTimeout"] = self.rng.choice(["force", "abort"])
        raw["drain"]["onConditionCleared"] = self.rng.choice(["keep-cordoned", "uncordon"])
        if overrides is not None:
            overrides(self.rng, raw)
        self._draw_drain_policy(raw["drain"])
        self._draw_scarcity(raw.setdefault("replace", {}))
        if any(fault.kind == "refuse-beside-held" for fault in self.plan):
            self._refuse_some_class(raw["drain"])
        return worst_case.checked_settings(raw)

    def _refuse_some_class(self, drain: dict[str, Any]) -> None:
        """A schedule that plans refuse-beside-held refuses at least one class of pod, and holds the
        pods that fault adds with an allow-completion mode (from a stream of its own)."""
        rng = random.Random(self.seed ^ 0x2EF05E)
        if "refuse" not in (drain["emptyDir"], drain["unmanagedPods"]):
            drain[rng.choice(["emptyDir", "unmanagedPods"])] = "refuse"
        drain["evictionModes"] = [
            *drain.get("evictionModes", []),
            {"mode": "allow-completion", "podLabels": {"app": HELD_CHECKPOINT_APP}},
        ]

    def _draw_drain_policy(self, drain: dict[str, Any]) -> None:
        """The drain policy (nodeheal.workflow.drain_policy), drawn from a stream of its own so a
        seed's schedule stream, and every seed found before these settings existed, stays as it was."""
        rng = self.drain_rng
        # evict is the default and the common choice; refuse and wait each end or stretch drains.
        drain["emptyDir"] = rng.choice(["evict", "evict", "refuse", "wait"])
        drain["unmanagedPods"] = rng.choice(["evict", "evict", "refuse", "wait"])
        drain["skipWaitForDeleteTimeoutSeconds"] = rng.choice([0, 60])
        drain["neverDrainNamespaces"] = rng.choice([["kube-system"], ["kube-*", "monitoring"], []])
        if rng.random() < 0.5:
            mode = rng.choice(["immediate", "allow-completion", "delete-after-timeout"])
            drain["evictionModes"] = [{"mode": mode, "podLabels": {"app": "notebook"}}]
            drain["deleteAfterSeconds"] = rng.randrange(0, int(drain["timeoutSeconds"]))

    def _draw_scarcity(self, replace: dict[str, Any]) -> None:
        """Half the schedules name the Karpenter pool scarce (``replace.scarcePools``, D12), so its
        on-demand instances meet the scarce-pool rule; the pool of the managed node group is never
        named, so the rule's "only the pools named" is exercised too."""
        if self.capacity_rng.random() < 0.5:
            replace["scarcePools"] = [POOL_NAMES["karpenter"]]

    def _definition(self) -> dict[str, Any]:
        # Copy only the objects on the way to the settings: the interpreter never changes a
        # definition, so every other state is shared with the template.
        definition = dict(self.template.definition)
        states = definition["States"] = dict(definition["States"])
        load = states["Load settings"] = dict(states["Load settings"])
        parameters = load["Parameters"] = dict(load["Parameters"])
        parameters["settings"] = self.settings.to_json()
        return definition

    # -- the cluster -----------------------------------------------------------------------------------

    def _build_cluster(self) -> None:
        count = self.options.nodes
        kinds = [self.options.pool_kinds[index % len(self.options.pool_kinds)] for index in range(count)]
        layout = [(kind, POOL_NAMES[kind]) for kind in kinds]
        for index, (kind, pool) in enumerate(layout):
            name = f"ip-10-0-1-{10 + index}.us-west-2.compute.internal"
            self.world.add_node(name, pool_kind=kind, pool=pool)
            self.world.add_pod(name, "trainer")
            self.world.add_pod(name, "trainer")
            self.world.add_pod(name, "logs", owner="DaemonSet")
            if self.rng.random() < 0.3:
                self.world.add_pod(
                    name, "notebook", owner="ReplicaSet", empty_dir=self.drain_rng.random() < 0.5
                )
            # Pods in the drain policy's classes: a bare debug pod, a system pod that is never drained.
            if self.drain_rng.random() < 0.2:
                self.world.add_pod(name, "debug", owner=None)
            if self.drain_rng.random() < 0.2:
                self.world.add_pod(name, "metrics", namespace="monitoring")
        self.world.budgets.append(Budget("trainer", max(1, 2 * count - 3)))
        self.log(
            f"cluster: {count} nodes; settings onTimeout={self.settings.drain.on_timeout} "
            f"onConditionCleared={self.settings.drain.on_condition_cleared} "
            f"emptyDir={self.settings.drain.empty_dir} unmanagedPods={self.settings.drain.unmanaged_pods} "
            f"neverDrainNamespaces={list(self.settings.drain.never_drain_namespaces)} evictionModes="
            f"{[rule.mode for rule in self.settings.drain.eviction_modes]} "
            f"skipWaitForDeleteTimeoutSeconds={self.settings.drain.skip_wait_for_delete_timeout_seconds}"
        )

    def _node_changed(self, raw: dict[str, Any], deleted: bool) -> None:
        """The exporter's watch: every transition becomes an event on the bus."""
        if deleted:
            self.warnings.node_deleted(raw)
            self.tracker.forget(raw)
            return
        for event in self.tracker.observe(raw):
            self._publish(event, "genuine")

    def envelope(self, event: NodeConditionEvent, *, source: str | None = None) -> dict[str, Any]:
        self.invocations += 1
        return {
            "version": "0",
            "id": f"evt-{self.invocations}",
            "detail-type": DETAIL_TYPE_CONDITION_CHANGED,
            "source": source or cluster_source("nodeheal.exporter", event.cluster),
            "account": "123456789012",
            "time": format_timestamp(self.clock),
            "region": REGION,
            "resources": [],
            "detail": event.to_detail(),
        }

    def _publish(
        self, event: NodeConditionEvent, kind: str, *, delay: float | None = None, **extra: Any
    ) -> None:
        envelope = self.envelope(event, **extra)
        self.sent_events.append(Delivery(self.clock, envelope, kind))
        if kind in ("genuine", "resync"):
            self.invariants.saw_event(event)
        if not match(self.template.condition_pattern, envelope).matched:
            return
        at = self.clock + timedelta(seconds=self.rng.uniform(0.05, 2.0) if delay is None else delay)
        self.deliveries.append(Delivery(at, envelope, kind))

    # -- executions ---------------------------------------------------------------------------------

    def start_execution(self, name: str, payload: Mapping[str, Any]) -> str:
        if name in self.executions:
            raise DuplicateExecutionError(name)
        arn = f"{STATE_MACHINE_ARN.replace(':stateMachine:', ':execution:')}:{name}"
        key = transition_key(payload["event"])
        run = asl.Execution(self.machine, name, arn, json.loads(json.dumps(payload)), self.clock)
        kind = self.delivering.kind if self.delivering else "operator"
        execution = SimExecution(run, key, kind)
        self.executions[name] = execution
        self.by_arn[arn] = execution
        self.invariants.execution_started(execution, self.delivering)
        self.log(f"start {name} ({kind})")
        return arn

    def _end(self, execution: SimExecution) -> None:
        run = execution.run
        self.last_end_at = self.clock
        self.log(f"{run.name} ended {run.status} {run.error}".rstrip())
        if run.status in ("FAILED", "TIMED_OUT", "ABORTED"):
            lost = self._consume("finalizer-event-lost") or self.rng.random() < 0.1
            if not lost:
                self.status_changes.append(
                    (self.clock + timedelta(seconds=self.rng.uniform(0.5, 30)), run.arn)
                )

    # -- invoking handlers --------------------------------------------------------------------------

    def _handler(self, function: SimFunction) -> Any:
        handler = self._handlers.get(function.spec.handler)
        if handler is None:
            handler = function.handler()
            self._handlers[function.spec.handler] = handler
        return handler

    def invoke_function(
        self, function: SimFunction, payload: Any, *, execution: str = "", state_name: str = ""
    ) -> asl.TaskOutcome:
        self.invocations += 1
        invocation = Invocation(
            number=self.invocations,
            function=function.name,
            execution=execution,
            state_name=state_name,
            payload=payload if isinstance(payload, Mapping) else None,
            started_at=self.clock,
            timeout_seconds=float(function.spec.timeout_seconds),
            mode=self.deployed_mode or str(function.environment.get("NODEHEAL_MODE", "")),
            paused=self.ledger.observed_state(CLUSTER).paused,
        )
        if execution and self._consume("lambda-killed-after-side-effect"):
            invocation.lose_result = True
        self.invariants.invocation_started(invocation)
        if execution:
            self._before_handler(function.name, execution)
        runtime = SimRuntime(self, function)
        context = SimContext(function, invocation, self.now)
        self.stack.append(invocation)
        try:
            with using_runtime(runtime), quiet():
                # What a Lambda receives: the payload as JSON, nothing shared with the state.
                result = self._handler(function)(json.loads(json.dumps(payload)), context)
        except LambdaKilled as killed:
            return asl.TaskOutcome(
                error=self.rng.choice(["Sandbox.Timedout", "Lambda.Unknown"]), cause=str(killed)
            )
        except Exception as error:
            name = type(error).__name__
            return asl.TaskOutcome(
                error=name, cause=json.dumps({"errorMessage": str(error), "errorType": name})
            )
        finally:
            self.stack.pop()
            self.invariants.invocation_ended(invocation)
        if invocation.lose_result:
            self.log(f"  {function.name} of {execution}: Lambda killed after its side effects")
            return asl.TaskOutcome(
                error="Sandbox.Timedout", cause="Task timed out (killed after its side effects)"
            )
        if execution and function.name == ADMIT.name:
            self._after_admit(execution, result)
        self.invariants.task_returned(function.name, execution, result)
        return asl.TaskOutcome(output=json.loads(json.dumps(result)))

    # -- the dropped-fault class: faults aimed at one step of one execution --------------------------

    def _before_handler(self, function: str, execution: str) -> None:
        """lesser-reason-*: a lesser reason lands on the execution's condition just before the
        step reads the node."""
        sim_execution = self.executions.get(execution)
        if sim_execution is None:
            return
        if function == DRAIN.name and self.armed.get("contender-ends") and execution not in self._provoked:
            # contender-ends aims at an execution that waits to take a node over: a drain round
            # about to claim the node for a lesser fault gets a replace-class fault beside it.
            self._provoked.add(execution)
            self.injector.provoke_a_contender(self, sim_execution.key[1], self.fault_rng)
        for kind, functions in IDENTITY_BEFORE.items():
            if function in functions and self.armed.get(kind):
                self._change_identity(kind, sim_execution.key[1])
        node = sim_execution.key[1]
        acts_on_the_node = (CORDON.name, DRAIN.name, REBOOT.name, TERMINATE.name)
        if function in acts_on_the_node and self.world.set_provider_id(node):
            # provider-id-late: the instance is named between admit and the first step acting on it.
            self.log(f"  provider-id-late: {node.split('.')[0]} now names its instance")
        for kind, functions in LESSER_REASON_BEFORE.items():
            if function not in functions or not self.armed.get(kind):
                continue
            node, condition_type = sim_execution.key[1], sim_execution.key[3]
            if self.injector.write_lesser_reason(self, node, condition_type, self.fault_rng):
                self._consume(kind)
                self.log(f"  {kind}: {condition_type} on {node.split('.')[0]} now reads a lesser fault")

    def _change_identity(self, kind: str, node: str) -> None:
        """kubelet-re-registers, person-takes-node-back, instance-untagged: the node an execution is
        about to act on changes identity, ownership or owner in a way only the real world shows."""
        if node not in self.world.nodes:
            return
        if kind == "kubelet-re-registers":
            # Only a running kubelet on a running instance registers its node again.
            instance = self.world.instances.get(self.world.instance_of(node))
            alive = (
                instance is not None and instance.state == "running" and node not in self.world.dead_kubelets
            )
            changed = alive and self.world.reregister_node(node) is not None
        elif kind == "person-takes-node-back":
            taken_from = [
                name
                for name, execution in self.executions.items()
                if execution.key[1] == node and not execution.run.done
            ]
            uid = self.world.node_uid(node)
            changed = self.world.person_takes_back(node)
            if changed:
                self.invariants.taken_back(uid, self.clock, taken_from)
        else:
            changed = self.world.untag_instance(node)
        if changed and self._consume(kind):
            self.log(f"  {kind}: {node.split('.')[0]}")

    def _after_admit(self, execution: str, result: Any) -> None:
        """contender-ends: an execution that just contended a busy holder (it waits to take the
        node over) ends before it does: its condition clears, its node goes, or it is aborted or
        times out."""
        if not isinstance(result, Mapping) or result.get("verdict") != "wait" or not result.get("displaced"):
            return
        sim_execution = self.executions.get(execution)
        if sim_execution is None or not self._consume("contender-ends"):
            return
        node, condition_type = sim_execution.key[1], sim_execution.key[3]
        how = self.fault_rng.choice(["clears", "node-goes", "aborted", "timed-out"])
        self.log(f"  contender-ends: {execution} ({condition_type}) {how} before it takes the node over")
        if how == "clears" and node in self.world.nodes:
            if condition_type == "Ready":
                self.world.set_condition(
                    node, "Ready", "True", "KubeletReady", "kubelet is posting ready status"
                )
            else:
                self.world.restart_detector(node, condition_type)
        elif how == "node-goes" and node in self.world.nodes:
            instance = self.world.instances.get(self.world.instance_of(node))
            if instance is not None:
                instance.state = "terminated"
            self.world.delete_node_object(node)
        elif how == "aborted":
            sim_execution.run.stop("ABORTED", self.clock, "", "aborted while it waited to take the node over")
        elif how == "timed-out":
            sim_execution.run.stop("TIMED_OUT", self.clock, "States.Timeout", "timed out while it waited")

    def _task(self, execution: SimExecution) -> asl.Invoke:
        def invoke(state_name: str, resource: str, payload: Any) -> asl.TaskOutcome:
            function = self.template.functions[resource]
            outcome = self.invoke_function(
                function, payload, execution=execution.run.name, state_name=state_name
            )
            if outcome.error:
                execution.last_error_state = state_name
            elif function.name == ADMIT.name:
                self.log(admission_trace(execution.run.name, outcome.output))
            return outcome

        return invoke

    # -- scheduling points inside handlers (the observer the world and the ledger call) -----------------

    def caller(self) -> Invocation | None:
        return self.stack[-1] if self.stack else None

    def saw(self, node: dict[str, Any]) -> None:
        self.invariants.saw_node(node)

    def mutated(self, mutation: Mutation) -> None:
        self.log(
            f"  {mutation.kind} {mutation.pod or mutation.node} "
            f"by {getattr(mutation.caller, 'execution', '?')}"
        )
        self.invariants.mutation(mutation)

    def _ledger_point(self, operation: str) -> None:
        if operation == "write_admission_state" and self._consume("ledger-contention"):
            self.log("  ledger contention on the admission state")
            raise LedgerContentionError("simulated: another admission wrote the cluster item first")
        self.point(f"ledger {operation}")

    def point(self, operation: str) -> None:
        self.points += 1
        invocation = self.caller()
        if invocation is not None:
            self._call_faults(invocation, operation)
            self._timeout_in_record(invocation)
            if len(self.stack) <= self.options.max_nesting and self.rng.random() < self.options.interleave:
                self._step(nested=True)
        self._due_faults()

    def _call_faults(self, invocation: Invocation, operation: str) -> None:
        kube = not operation.startswith(("ledger", "ec2"))
        if kube and self._consume("api-5xx"):
            self._note_transient(invocation)
            self.log(f"  {operation}: 503 from the API server")
            raise KubernetesApiUnavailableError(f"{operation}: 503 Service Unavailable (simulated)")
        if operation.startswith("ec2") and self._consume("ec2-throttled"):
            self._note_transient(invocation)
            raise Ec2ThrottledError(f"{operation}: RequestLimitExceeded (simulated)")
        if kube and self._consume("api-slow"):
            self._spend(invocation, self.fault_rng.uniform(2, 20), operation)
        if kube and self._consume("api-timeout"):
            self._note_transient(invocation)
            self._spend(invocation, invocation.timeout_seconds + 1, operation)

    def _timeout_in_record(self, invocation: Invocation) -> None:
        """timeout-in-record: the execution times out while its Record outcome task runs, and the
        finalizer runs on its status-change event at once, while that task is still running."""
        if invocation.function != RECORD.name or not invocation.execution:
            return
        execution = self.executions.get(invocation.execution)
        if execution is None or execution.run.done or not self._consume("timeout-in-record"):
            return
        self.log(f"  timeout-in-record: {execution.run.name} times out while Record outcome runs")
        execution.run.stop(
            "TIMED_OUT", self.clock, "States.Timeout", "the execution ran past its TimeoutSeconds"
        )
        self.last_end_at = self.clock
        self._finalizer_event(execution.run.arn)

    def _note_transient(self, invocation: Invocation) -> None:
        execution = self.executions.get(invocation.execution)
        if execution is not None:
            visit = f"{invocation.state_name}#{len(execution.run.entered)}"
            execution.transient[visit] = execution.transient.get(visit, 0) + 1

    def _spend(self, invocation: Invocation, seconds: float, operation: str) -> None:
        """A call that took ``seconds``: the clock moves; past the function's timeout Lambda kills it."""
        invocation.spent += seconds
        self.clock += timedelta(seconds=seconds)
        self.log(f"  {operation} took {seconds:.1f}s")
        if invocation.spent >= invocation.timeout_seconds:
            raise LambdaKilled(f"{invocation.function} ran past its {invocation.timeout_seconds:g}s timeout")

    def _unhandled_bad_conditions(self) -> bool:
        """A bad condition no execution was started for: the exporter's next resync will send it."""
        started = {(e.key[2], e.key[3]) for e in self.executions.values()}
        return any(
            (event.node.uid, event.condition.type) not in started
            for event in self.tracker.resync_from_memory()
        )

    # -- faults ----------------------------------------------------------------------------------------

    def _consume(self, kind: str) -> bool:
        if self.armed.get(kind, 0) > 0:
            self.armed[kind] -= 1
            self.invariants.fired[kind] += 1
            return True
        return False

    def _due_faults(self) -> None:
        while self.plan and self.plan[0].at_point <= self.points:
            if self.plan[0].kind in BETWEEN_INVOCATIONS and self.stack:
                return  # the world's clock does not jump inside a Lambda invocation
            fault = self.plan.pop(0)
            self.applied.append(fault)
            self.log(f"FAULT {fault.describe()}")
            self.injector.inject(self, fault)
            self.invariants.after_step()

    # -- the scheduler ----------------------------------------------------------------------------------

    def _ready(self) -> list[tuple[str, Any]]:
        ready: list[tuple[str, Any]] = []
        now = self.clock
        for execution in self.executions.values():
            run = execution.run
            if run.done or any(inv.execution == run.name for inv in self.stack):
                continue
            if run.timeout_at is not None and run.timeout_at <= now:
                ready.append(("timeout", execution))
            elif run.ready(now):
                ready.append(("execution", execution))
        ready.extend(("delivery", d) for d in self.deliveries if d.at <= now)
        ready.extend(("status-change", s) for s in self.status_changes if s[0] <= now)
        if self.world.next_timer_at() is not None and self.world.next_timer_at() <= now:  # type: ignore[operator]
            ready.append(("timer", None))
        if self.next_sweep <= now and not any(inv.function == "finalize" for inv in self.stack):
            ready.append(("sweep", None))
        if self.next_resync <= now:
            ready.append(("resync", None))
        ready.extend(self.warnings.ready(now))
        return ready

    def _next_time(self) -> datetime | None:
        times = [e.run.wake_at for e in self.executions.values() if not e.run.done and e.run.wake_at]
        times += [e.run.timeout_at for e in self.executions.values() if not e.run.done and e.run.timeout_at]
        times += [d.at for d in self.deliveries] + [s[0] for s in self.status_changes]
        timer = self.world.next_timer_at()
        if timer is not None:
            times.append(timer)
        warning = self.warnings.next_time()
        if warning is not None:
            times.append(warning)
        if (
            any(not e.run.done for e in self.executions.values())
            or self.deliveries
            or self.status_changes
            or self.last_sweep_at <= self.last_end_at
        ):
            times.append(self.next_sweep)
        if self.tracker.resync_from_memory():
            times.append(self.next_resync)
        return min((t for t in times if t is not None), default=None)

    def _step(self, *, nested: bool = False) -> bool:
        ready = self._ready()
        if not ready:
            return False
        kind, item = ready[self.rng.randrange(len(ready))]
        self.steps += 1
        if kind in ("execution", "timeout") and not nested:
            self.points += 1
        if kind == "execution":
            run = item.run
            record = run.step(self.clock, self._task(item), self.rng)
            if record.kind in ("Task", "Wait") or record.detail:
                self.log(f"{run.name} | {record.state} {record.detail}".rstrip())
            self.invariants.state_entered(item)
            if run.done:
                self._end(item)
        elif kind == "timeout":
            item.run.stop(
                "TIMED_OUT", self.clock, "States.Timeout", "the execution ran past its TimeoutSeconds"
            )
            self._end(item)
        elif kind == "delivery":
            self.deliveries.remove(item)
            self._deliver(item)
        elif kind == "status-change":
            self.status_changes.remove(item)
            self._finalizer_event(item[1])
        elif kind == "timer":
            timer = self.world.pop_due_timer()
            if timer is not None:
                self.log(f"cluster: {timer.label}")
                timer.action()
        elif kind in ("warning", "event-watch"):
            self.warnings.step(kind)
        elif kind == "resync":
            self.next_resync = self.clock + timedelta(seconds=EXPORTER_RESYNC_SECONDS)
            for event in self.tracker.resync_from_memory():
                self._publish(event, "resync")
        elif kind == "sweep":
            self.next_sweep = self.clock + timedelta(seconds=self.template.sweep_seconds or 300)
            self.last_sweep_at = self.clock
            self.invoke_function(
                self.template.finalize, {"source": "aws.events", "detail-type": "Scheduled Event"}
            )
        self.invariants.after_step()
        return True

    def _deliver(self, delivery: Delivery) -> None:
        if delivery.kind in NODE_EVENT_DELIVERIES:
            self.warnings.count(delivery)
            return
        self.delivering = delivery
        try:
            outcome = self.invoke_function(self.template.ingest, delivery.envelope)
        finally:
            self.delivering = None
        detail = delivery.envelope.get("detail") or {}
        node = (detail.get("node") or {}).get("name", "?") if isinstance(detail, dict) else "?"
        status = (
            (outcome.output or {}).get("status", outcome.error) if outcome.error is None else outcome.error
        )
        self.log(f"ingest {delivery.kind} event of {str(node).split('.')[0]}: {status}")
        self.invariants.ingested(delivery, outcome.output if outcome.error is None else None)

    def _finalizer_event(self, arn: str) -> None:
        event = {
            "version": "0",
            "id": f"sc-{self.invocations}",
            "detail-type": "Step Functions Execution Status Change",
            "source": "aws.states",
            "detail": {"executionArn": arn, "stateMachineArn": STATE_MACHINE_ARN},
        }
        self.invoke_function(self.template.finalize, event)

    def run(self) -> None:
        """Run until the plan is spent and everything has settled (or a bound is hit)."""
        end = START + self.options.horizon
        while self.steps < self.options.max_steps:
            self._due_faults()
            if self._step():
                continue
            later = self._next_time()
            if self.plan and (
                later is None or later > self.clock + timedelta(seconds=self.rng.uniform(0, 600))
            ):
                # Nothing is ready soon: the next planned fault comes due now.
                self.points = max(self.points, self.plan[0].at_point)
                continue
            if not self.plan and self._settled():
                break
            if later is None or later > end:
                break
            self.clock = max(self.clock, later)
        self.invariants.at_end()

    def _settled(self) -> bool:
        return (
            all(e.run.done for e in self.executions.values())
            and not self._unhandled_bad_conditions()
            # The sweeper must have run after the last end (an end in the same instant may follow it).
            and self.last_sweep_at > self.last_end_at
            and not self.deliveries
            and not self.status_changes
            and self.world.next_timer_at() is None
            and self.warnings.settled
        )
