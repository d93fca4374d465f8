"""The safety invariants, as code, checked after every step of every schedule.

Each check is named after the invariant it enforces (I1-I12 of the seeded-simulation issue, which
map onto the safety invariants of docs/architecture.md as the package docstring's table shows) and reads the
simulation's ground truth (the world, the mutation journal, the executions) rather than trusting
NodeHeal's own bookkeeping wherever the two could differ.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodeheal.conditions import is_bad_status
from nodeheal.counted_signals import COUNTED_CONDITION_TYPE
from nodeheal.errors import InvalidEventError
from nodeheal.events import MAX_FIELD_CHARS, NodeConditionEvent
from nodeheal.kube_event_body import NOTE_MAX_BYTES, REPORTING_INSTANCE_PREFIX
from nodeheal.kube_views import ANNOTATION_EXECUTION
from nodeheal.sim.seeded.deliveries import NODE_EVENT_DELIVERIES
from nodeheal.sim.seeded.faults import FAULT_KINDS
from nodeheal.sim.seeded.policy_oracle import classify, confirm_seconds, transition_key
from nodeheal.sim.seeded.schedule import Invocation, SimExecution, Simulation
from nodeheal.sim.seeded.world import Mutation
from nodeheal.steps import ADMIT, DRAIN, FORCE_DRAIN, RECORD
from nodeheal.timestamps import format_timestamp, parse_timestamp
from nodeheal.workflow.budget import PoolHealth, pool_allowance
from nodeheal.workflow.capacity import CAPACITY_BLOCK, CapacityContext, block_usable_until
from nodeheal.workflow.records import Outcome
from nodeheal.workflow.signal_windows import (
    MAX_EVENTS_REMEMBERED,
    MAX_SOURCES,
    still_over,
    window_to_item,
)
from nodeheal.worst_case import NOT_IDEMPOTENT_TASKS, holding_worst_case, remediation_bound

#: I20: bytes of one window item beyond its sources' times and Events' counters (keys, cluster,
#: instance, signal, boot). JSON escapes a byte of a name as up to six characters (``\u0001``).
WINDOW_ITEM_FIXED_BYTES = 1024
#: A source's key: its name (the counting function refuses a detail whose fields pass
#: MAX_FIELD_CHARS), escaped, quoted.
WINDOW_SOURCE_BYTES = 6 * MAX_FIELD_CHARS + 8
WINDOW_TIME_BYTES = 24  # one epoch-seconds float and its separator
#: An Event's counter: its uid (MAX_FIELD_CHARS), escaped, the count and the time.
WINDOW_EVENT_BYTES = 6 * MAX_FIELD_CHARS + 64


def window_item_bound(count: int) -> int:
    """I20's byte bound of one stored window whose rule counts ``count``: it grows with the
    rule, never with how many Events a node writes."""
    per_source = WINDOW_SOURCE_BYTES + WINDOW_TIME_BYTES * max(count, 1)
    return WINDOW_ITEM_FIXED_BYTES + MAX_SOURCES * per_source + MAX_EVENTS_REMEMBERED * WINDOW_EVENT_BYTES


#: D17: the whole state stays under this.
STATE_BOUND_BYTES = 64 * 1024
DESTRUCTIVE = frozenset({"evict", "force-delete", "reboot", "terminate", "delete-node"})
ALLOWED_BY_MODE = {
    "full": frozenset({"cordon", "uncordon", "evict", "force-delete", "reboot", "terminate", "delete-node"}),
    "cordon-only": frozenset({"cordon", "uncordon"}),
    "dry-run": frozenset(),
}
SEVERITY = {"none": 0, "alert": 1, "cordon": 2, "retire": 3, "reboot": 4, "replace": 5}
#: Errors the simulation injects that a retry is meant to absorb.
TRANSIENT_ERRORS = frozenset(
    {
        "KubernetesApiUnavailableError",
        "Ec2ThrottledError",
        "DeadlineExceededError",
        "Sandbox.Timedout",
        "Lambda.Unknown",
    }
)
#: Event deliveries that must never start an execution.
NEVER_START = frozenset({"forged", "foreign", "stale", "future-dated"})


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    at: datetime
    point: int
    detail: str

    def render(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass
class Episode:
    """A condition of one Node object that went bad at ``since`` (its lastTransitionTime)."""

    node: str
    node_uid: str
    instance: str
    condition_type: str
    since: datetime
    confirm_seconds: int
    ended_at: datetime | None = None


class InvariantViolated(BaseException):
    """Raised through the handler that broke an invariant, up to the schedule's runner."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(violation.render())
        self.violation = violation


class Invariants:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.violations: list[Violation] = []
        self.coverage: Counter[str] = Counter(dict.fromkeys(FAULT_KINDS, 0))
        #: Armed faults that found the call they aim at (a contender to end, a Record step to time
        #: out): drawn is not the same as exercised.
        self.fired: Counter[str] = Counter()
        self.journal: list[Mutation] = []
        #: instance -> (execution, its Mutation) of the last mutation, for I9.
        self._last_mutator: dict[str, str] = {}
        self._mutators: dict[str, list[str]] = {}
        #: (node uid, condition type) -> when it last stopped being bad.
        self._cleared_at: dict[tuple[str, str], datetime] = {}
        #: (node uid, condition type) -> every time the condition was seen to clear: a message that
        #: cleared within its confirmation time was a flap (:meth:`_forget_flaps`).
        self._clear_times: dict[tuple[str, str], list[datetime]] = {}
        #: instance -> worst action its faults called for in the current episode (I8).
        #: instance -> condition type -> (bad since, worst action confirmed since then) (I8).
        self._worst: dict[str, dict[str, tuple[str, str]]] = {}
        self.episodes: dict[tuple[str, str, str], Episode] = {}
        self._breaker_open_since: datetime | None = None
        self._operator_closed = False
        self._names: dict[str, tuple[str, ...]] = {}
        self._keys: dict[tuple[str, ...], str] = {}
        self._first_cordon: dict[str, datetime] = {}
        settings = sim.settings
        self.bound = timedelta(
            seconds=remediation_bound(settings).total_seconds
            + holding_worst_case(settings).total_seconds
            + 120
        )
        self._seen_conditions: dict[tuple[str, str], tuple[str, str, str]] = {}
        #: (instance, node uid, boot) -> condition type -> each action a message NodeHeal saw in the
        #: episode called for (docs/architecture.md, D19: the instance's episode, whatever the reason or
        #: transition time became since), in an event or by reading the Node, with (bad since, confirmation
        #: seconds) of its earliest confirmation and when NodeHeal first saw it. A message no event
        #: carried and no step read is not "seen": a detector may overwrite it before anything reads it.
        self._seen_worst: dict[
            tuple[str, str, str], dict[str, dict[str, tuple[datetime, int, datetime]]]
        ] = {}
        #: The same, of what a step of NodeHeal had read when it could act on it (I8): a Node it
        #: read, or an event once admit of its execution read it. An event on its way (EventBridge,
        #: ingest, the execution's start) is seen for I13, which waits its bound, but not yet
        #: known to a holder about to reboot: no step of NodeHeal can know of it then.
        self._known_worst: dict[
            tuple[str, str, str], dict[str, dict[str, tuple[datetime, int, datetime]]]
        ] = {}
        #: Invocation number -> the refuse-class pods on its node when a drain step began (I14).
        self._refused_at_start: dict[int, list[str]] = {}
        #: Execution -> the outcome its Record step returned (I15).
        self._recorded_by_step: dict[str, str] = {}
        #: Node name -> (resourceVersion, uid, its bad conditions, wholly healthy): a node is
        #: rescanned when it changes.
        self._node_scans: dict[
            str, tuple[str, str, list[tuple[tuple[str, str, str], Any, Episode]], bool]
        ] = {}
        #: (start, duration) of outages: nothing of NodeHeal runs then, so I2's clock stops.
        self.outages: list[tuple[datetime, timedelta]] = []
        #: (execution, states entered) of each entry into Record failure R1 has judged.
        self._r1_checked: set[tuple[str, int]] = set()
        #: How many of the world's told Events E1 has checked.
        self._told_checked = 0
        #: I16 orders an admit and a take-back by when each happened in the schedule, not by the
        #: clock: many events share one instant (the clock only moves on a wait), and an admit that
        #: read the node just after a person took it back, at the same instant, decided anew.
        self._happened = 0
        #: Execution -> (when its last admit returned, its place in the schedule) (I16).
        self._admitted_at: dict[str, tuple[datetime, int]] = {}
        #: Node uid -> (when a person took it back, its place in the schedule, the executions of
        #: the node running then) (I16).
        self._taken_back: dict[str, tuple[datetime, int, frozenset[str]]] = {}

    # -- reporting ---------------------------------------------------------------------------------

    def fail(self, invariant: str, detail: str) -> None:
        violation = Violation(invariant, self.sim.clock, self.sim.points, detail)
        self.violations.append(violation)
        self.sim.log(f"VIOLATION {violation.render()}")
        raise InvariantViolated(violation)

    # -- hooks the simulation calls ------------------------------------------------------------------

    def execution_started(self, execution: SimExecution, delivery: Any) -> None:
        name, key = execution.run.name, execution.key
        self.check_i5_names(name, key)
        kind = delivery.kind if delivery is not None else "operator"
        if kind in NEVER_START:
            self.fail("I6 dropped events mutate nothing", f"a {kind} event started execution {name}")

    def ingested(self, delivery: Any, result: Mapping[str, Any] | None) -> None:
        """After ingest answered a delivery: a refused kind must be dropped (not taken for a
        duplicate of a genuine transition), and a duplicate's name must be its transition's (I5)."""
        if delivery.kind in NEVER_START and (result or {}).get("status") != "dropped":
            self.fail(
                "I6 dropped events mutate nothing",
                f"a {delivery.kind} event was answered {(result or {}).get('status')!r}, not dropped",
            )
        if result is not None and result.get("status") == "duplicate":
            self.check_i5_names(str(result["execution"]), transition_key(delivery.envelope["detail"]))

    def check_i5_names(self, name: str, key: tuple[str, ...]) -> None:
        known = self._names.get(name)
        if known is not None and known != key:
            self.fail("I5 one name per transition", f"{name} names two transitions: {known} and {key}")
        other = self._keys.get(key)
        if other is not None and other != name:
            self.fail("I5 one name per transition", f"transition {key} got two names: {other} and {name}")
        self._names[name] = key
        self._keys[key] = name

    def operator_changed(self, kind: str) -> None:
        if kind == "breaker-reset":
            self._operator_closed = True

    # -- what NodeHeal has seen of each condition (I8 holds it to the worst of that) -----------------

    def _saw(
        self,
        episode: tuple[str, str, str],
        condition: Mapping[str, Any],
        labels: Mapping[str, str],
        *,
        known: bool = True,
    ) -> None:
        if condition.get("type") == "Ready" or not is_bad_status(
            str(condition["type"]), str(condition["status"])
        ):
            return
        since = condition.get("lastTransitionTime")
        if not since:
            return
        bad_since = parse_timestamp(str(since), "lastTransitionTime")
        action = classify(dict(condition), self.sim.settings, labels)
        confirm = confirm_seconds(dict(condition), self.sim.settings, labels)
        clears = self._clear_times.get((episode[1], str(condition["type"])), ())
        if any(bad_since <= cleared < bad_since + timedelta(seconds=confirm) for cleared in clears):
            return  # a flap, reported late (an event admit read after the condition cleared)
        confirmed_at = bad_since + timedelta(seconds=confirm)
        for memory in (self._seen_worst, self._known_worst) if known else (self._seen_worst,):
            seen = memory.setdefault(episode, {}).setdefault(str(condition["type"]), {})
            earlier = seen.get(action)
            if earlier is None or confirmed_at < earlier[0] + timedelta(seconds=earlier[1]):
                seen[action] = (bad_since, confirm, earlier[2] if earlier is not None else self.sim.clock)

    @staticmethod
    def _episode_of(node: Mapping[str, Any], instance: str) -> tuple[str, str, str]:
        return instance, str(node["metadata"]["uid"]), str(node["status"]["nodeInfo"].get("bootID", ""))

    @staticmethod
    def _wholly_healthy(node: Mapping[str, Any]) -> bool:
        """What ends an episode when NodeHeal reads it (D19): Ready, and nothing else bad."""
        conditions = node["status"]["conditions"]
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return ready and not any(
            c["type"] != "Ready" and is_bad_status(str(c["type"]), str(c["status"])) for c in conditions
        )

    def saw_node(self, node: Mapping[str, Any]) -> None:
        """A step read the Node: NodeHeal has seen each of its conditions' current message, and a
        read of the whole node healthy ends the instance's episode."""
        instance = str(node["spec"].get("providerID", "")).rsplit("/", 1)[-1]
        episode = self._episode_of(node, instance)
        if self._wholly_healthy(node):
            self._seen_worst.pop(episode, None)
            self._known_worst.pop(episode, None)
            self._worst.pop(instance, None)
            return
        for condition in node["status"]["conditions"]:
            self._saw(episode, condition, node["metadata"]["labels"])

    def _admitted_event(self, execution: str) -> None:
        """Admit of ``execution`` returned: the condition its event reported is known to NodeHeal
        (D19: admission remembers what the event reported)."""
        sim_execution = self.sim.executions.get(execution)
        if sim_execution is None:
            return
        try:
            event = NodeConditionEvent.from_detail(sim_execution.run.input.get("event"))
        except (InvalidEventError, AttributeError, TypeError):
            return  # a malformed event, which admit refuses before reading anything
        self.saw_event(event, known=True)

    def saw_event(self, event: Any, *, known: bool = False) -> None:
        """The exporter shipped this condition (``known``: and admit read it): NodeHeal sees it in
        the event, on the boot the event names (the live node's when it names none)."""
        node = self.sim.world.nodes.get(event.node.name)
        labels = node["metadata"]["labels"] if node is not None else dict(event.node.labels)
        boot = event.node.boot_id or (
            str(node["status"]["nodeInfo"].get("bootID", "")) if node is not None else ""
        )
        instance = event.node.instance_id or (self.sim.world.instance_of(event.node.name) if node else "")
        self._saw((instance, event.node.uid, boot), event.condition.to_api(), labels, known=known)

    def invocation_started(self, invocation: Invocation) -> None:
        self._track_conditions()
        if invocation.function in (DRAIN.name, FORCE_DRAIN.name):
            node = str(invocation.admitted.get("name", ""))
            refused = [pod for pod in self.sim.world.pods_on(node) if self._refuse_class(pod)]
            if refused:
                self._refused_at_start[invocation.number] = [str(p["metadata"]["name"]) for p in refused]
        instance = str(invocation.admitted.get("instanceId", ""))
        invocation.worst_at_start = max(
            (action for _, action in self._worst.get(instance, {}).values()),
            key=lambda action: SEVERITY.get(action, 0),
            default="none",
        )

    def invocation_ended(self, invocation: Invocation) -> None:
        invocation.claimed.clear()

    def mutation(self, mutation: Mutation) -> None:
        self.journal.append(mutation)
        invocation: Invocation | None = mutation.caller
        if invocation is None or not invocation.execution:
            self.fail(
                "I1 only the admitted node", f"{mutation.kind} of {mutation.node} outside any execution"
            )
            return
        self.check_i1_identity(mutation, invocation)
        self.check_i16_taken_back(mutation, invocation)
        self.check_i14_refuse_evicts_nothing(mutation, invocation)
        self.check_i7_mode_and_pause(mutation, invocation)
        self.check_i8_still_bad(mutation, invocation)
        self.check_i9_one_mutator(mutation, invocation)
        self.check_i12_breaker(mutation, invocation)
        if mutation.kind == "cordon":
            self.check_i3_budgets(mutation, invocation)
        if mutation.kind == "terminate":
            self.check_i17_capacity_block(mutation, invocation)
            self.check_i18_scarce_pool(mutation, invocation)
        self.check_i19_counted_execution_acts_on_its_instance(mutation, invocation)

    def state_entered(self, execution: SimExecution) -> None:
        run = execution.run
        if run.done and run.error == "States.DataLimitExceeded":
            self.fail("I11 payload bound", f"{run.name} hit States.DataLimitExceeded: {run.cause}")
        if not run.done:
            size = run.size
            if size > STATE_BOUND_BYTES:
                self.fail(
                    "I11 payload bound",
                    f"{run.name} state at {run.current} is {size} bytes (bound {STATE_BOUND_BYTES})",
                )
        entry = (run.name, len(run.entered))
        if run.current == "Record failure" and not run.done and entry not in self._r1_checked:
            # Once per entry, as it is entered: a retry of Record failure itself changes the state
            # the last error came from, which is not the state whose error was caught.
            self._r1_checked.add(entry)
            failure = (run.data or {}).get("failure") or {}
            error = str(failure.get("Error", ""))
            injected = max(execution.transient.values(), default=0)
            if (
                error in TRANSIENT_ERRORS
                and 0 < injected <= 1
                and not self._not_retried_by_design(execution, error)
            ):
                self.fail(
                    "R1 retries absorb a transient fault",
                    f"{run.name} failed with {error} at {execution.last_error_state} "
                    "after one injected transient fault",
                )

    def _not_retried_by_design(self, execution: SimExecution, error: str) -> bool:
        """A reboot is not retried after a Lambda timeout: the lost answer may hide a reboot that
        happened, and a second one is not harmless (nodeheal.worst_case.NOT_IDEMPOTENT_TASKS). The
        remediation ends failed, cordoned, with a person told: that is its designed answer."""
        state = self.sim.machine.states.get(execution.last_error_state, {})
        function = self.sim.template.functions.get(str(state.get("Resource", "")))
        lambda_timeouts = ("Sandbox.Timedout", "Lambda.Unknown")
        return function is not None and function.name in NOT_IDEMPOTENT_TASKS and error in lambda_timeouts

    def after_step(self) -> None:
        self._track_conditions()
        self.check_i12_breaker_closed_only_by_a_person()
        self.check_i2_decided(final=False)
        self.check_i13_decided_as_severe(final=False)
        self.check_e1_events()

    def at_end(self) -> None:
        self._track_conditions()
        self.check_i4_accounted()
        self.check_i2_decided(final=True)
        self.check_i13_decided_as_severe(final=True)
        self.check_i15_recorded_what_happened()
        self.check_e1_events()

    def task_returned(self, function: str, execution: str, result: Any) -> None:
        """A handler returned (its result reaches the state machine unless the run stopped)."""
        if function == RECORD.name and execution and isinstance(result, Mapping) and result.get("outcome"):
            self._recorded_by_step[execution] = str(result["outcome"])
        if function == ADMIT.name and execution:
            self._happened += 1
            self._admitted_at[execution] = (self.sim.clock, self._happened)
            self._admitted_event(execution)

    def taken_back(self, node_uid: str, at: datetime, executions: Iterable[str]) -> None:
        """A person took the node back from NodeHeal (uncordoned it, removed its taint) at ``at``."""
        self._happened += 1
        self._taken_back[node_uid] = (at, self._happened, frozenset(executions))

    def check_i16_taken_back(self, mutation: Mutation, invocation: Invocation) -> None:
        """I16: once a person takes a node back, no execution that admitted it before acts on it
        again (an execution that admits it afresh decides anew). Undoing a cordon the person
        undid already is no harm, so an uncordon does not count."""
        if mutation.kind == "uncordon":
            return
        uid = mutation.pod_node_uid if mutation.pod else mutation.node_uid
        taken = self._taken_back.get(uid)
        if taken is None:
            return
        at, taken_place, executions = taken
        execution = invocation.execution
        admitted = self._admitted_at.get(execution)
        if execution in executions and (admitted is None or admitted[1] < taken_place):
            self.fail(
                "I16 a node a person took back is left alone",
                f"{mutation.kind} of {mutation.pod or mutation.node} by {execution}, admitted "
                f"{admitted[0] if admitted else None} before a person took the node back at {at}",
            )

    # -- the checks ----------------------------------------------------------------------------------

    def check_e1_events(self) -> None:
        """E1: every Event a step tells names its execution (note and annotation), is written by
        the function that ran (reportingInstance), fits the API server's limits and sits in the
        namespace the API server requires; and no step's Events failed to be built."""
        world = self.sim.world
        if world.untold:
            self.fail("E1 every step's Events are told", world.untold[0])
        for invocation, body in world.told[self._told_checked :]:
            note = str(body.get("note", ""))
            regarding = body.get("regarding") or {}
            execution = getattr(invocation, "execution", "")
            function = str(getattr(invocation, "function", "")).replace("_", "-")
            problems = [
                f"{label}: {value!r}"
                for label, ok, value in (
                    ("told outside a workflow invocation", bool(execution), invocation),
                    (
                        "note does not end with the execution",
                        note.endswith(f"(execution {execution})"),
                        note[-120:],
                    ),
                    (
                        "annotation names another execution",
                        body["metadata"].get("annotations", {}).get(ANNOTATION_EXECUTION) == execution,
                        body["metadata"].get("annotations"),
                    ),
                    (
                        "reportingInstance is not the invoked function",
                        body.get("reportingInstance") == REPORTING_INSTANCE_PREFIX + function,
                        body.get("reportingInstance"),
                    ),
                    ("note longer than 1 KiB", len(note.encode()) <= NOTE_MAX_BYTES, len(note.encode())),
                    (
                        "namespace is not the object's (default for a Node)",
                        body["metadata"]["namespace"] == (regarding.get("namespace") or "default"),
                        body["metadata"]["namespace"],
                    ),
                )
                if not ok
            ]
            if problems:
                self.fail("E1 every Event names its execution and its writer", f"{body['reason']} {problems}")
        self._told_checked = len(world.told)

    def check_i1_identity(self, mutation: Mutation, invocation: Invocation) -> None:
        admitted = invocation.admitted
        if not admitted:
            self.fail(
                "I1 only the admitted node", f"{mutation.kind} by {invocation.execution} before any admission"
            )
        if mutation.kind in ("reboot", "terminate"):
            if mutation.instance_id != admitted.get("instanceId"):
                self.fail(
                    "I1 only the admitted node",
                    f"{mutation.kind} of instance {mutation.instance_id}, "
                    f"admitted {admitted.get('instanceId')}",
                )
            owned = self.sim.world.instances[mutation.instance_id].tags
            if not any(k.startswith("kubernetes.io/cluster/") for k in owned):
                self.fail(
                    "I1 only the admitted node", f"{mutation.kind} of an instance the cluster does not own"
                )
            return
        uid = mutation.pod_node_uid if mutation.pod else mutation.node_uid
        if uid != admitted.get("uid") or mutation.instance_id != admitted.get("instanceId"):
            self.fail(
                "I1 only the admitted node",
                f"{mutation.kind} of {mutation.pod or mutation.node} (node uid {uid}, instance "
                f"{mutation.instance_id}) by {invocation.execution}, "
                f"which admitted uid {admitted.get('uid')} "
                f"instance {admitted.get('instanceId')}",
            )

    def check_i7_mode_and_pause(self, mutation: Mutation, invocation: Invocation) -> None:
        allowed = ALLOWED_BY_MODE.get(invocation.mode or "full", ALLOWED_BY_MODE["full"])
        if mutation.kind not in allowed:
            self.fail(
                "I7 pause and mode stop mutations",
                f"{mutation.kind} by {invocation.execution} in a step that started in {invocation.mode} mode",
            )
        state = self.sim.ledger.observed_state(self.sim.world.cluster)
        if invocation.paused and state is not None and state.paused:
            self.fail(
                "I7 pause and mode stop mutations",
                f"{mutation.kind} by {invocation.execution} in a step that started while NodeHeal was paused",
            )

    def _counted_still_over(self, invocation: Invocation, mutation: Mutation) -> bool:
        """A counted signal's condition is bad while its window (every count in it proven the
        instance's by I19) still reaches the rule's count on the boot the node runs."""
        counted = (self.sim.executions.get(invocation.execution) or None) and (
            self.sim.executions[invocation.execution].run.input.get("event") or {}
        ).get("countedSignal")
        windows = getattr(self.sim.ledger, "windows", None)
        if not isinstance(counted, Mapping) or windows is None:
            return True  # a ledger whose windows the simulation cannot read without a call
        signal = str(counted.get("signal", ""))
        stored = windows.get((self.sim.world.cluster, mutation.instance_id, signal))
        node = self.sim.world.nodes.get(mutation.node)
        boot = str(node["status"]["nodeInfo"].get("bootID", "")) if node is not None else ""
        rule = self.sim.settings.policy.counted_rule(signal)
        window = stored[0] if stored is not None and stored[1] > invocation.started_at else None
        return still_over(window, rule, boot_id=boot, now=invocation.started_at) is not None

    def _was_bad_during(self, node_uid: str, condition_type: str, node: str, since: datetime) -> bool:
        if self.sim.world.node_uid(node) == node_uid and self.sim.world.is_bad(node, condition_type):
            return True
        cleared = self._cleared_at.get((node_uid, condition_type))
        return cleared is not None and cleared >= since

    def check_i8_still_bad(self, mutation: Mutation, invocation: Invocation) -> None:
        if mutation.kind not in DESTRUCTIVE:
            return
        condition_type = invocation.condition_type
        admitted_uid = str(invocation.admitted.get("uid", ""))
        if condition_type == COUNTED_CONDITION_TYPE:
            bad = self._counted_still_over(invocation, mutation)
        else:
            bad = self._was_bad_during(admitted_uid, condition_type, mutation.node, invocation.started_at)
        displaced = str(
            ((((invocation.payload or {}).get("admission") or {}).get("displaced")) or {}).get(
                "conditionType", ""
            )
        )
        if not bad and displaced and displaced != "Ready":
            # It took the node from a holder whose fault it finishes (D2): that fault counts.
            bad = self._was_bad_during(admitted_uid, displaced, mutation.node, invocation.started_at)
        escalation = ((invocation.payload or {}).get("recovery") or {}).get("status") == "failed"
        if not bad and escalation and mutation.kind == "terminate":
            bad = self.sim.world.is_bad(mutation.node, "Ready") or mutation.node not in self.sim.world.nodes
        if not bad:
            invariant = (
                "I10 nothing forced past a PDB on a healthy node"
                if mutation.kind == "force-delete" and not mutation.pod_terminating
                else "I8 still bad at every destructive step"
            )
            self.fail(
                invariant,
                f"{mutation.kind} of {mutation.pod or mutation.node} by {invocation.execution}: "
                f"{condition_type} was no longer bad when the step began",
            )
        # What was confirmed when the step began: a fault appearing during the step is the next
        # step's to see (as a condition clearing during it is).
        worst = invocation.worst_at_start
        if mutation.kind == "reboot" and SEVERITY[worst] > SEVERITY["reboot"]:
            self.fail(
                "I8 severity only rises",
                f"reboot of {mutation.node} by {invocation.execution} although a fault calling for {worst} "
                "was seen on this instance in this episode",
            )

    def check_i17_capacity_block(self, mutation: Mutation, invocation: Invocation) -> None:
        """D12's Capacity Block promise: NodeHeal gives up an instance in a Capacity Block only when
        its replacement would still be useful for ``replace.minBlockRemainingMinutes`` after
        ``replace.launchMinutes``. The block's usable end is EC2's end date less its termination
        lead (60 min for UltraServer types, else 30) and Karpenter's 10-minute drain; at the
        terminate call it must be at least launchMinutes + minBlockRemainingMinutes away. The rule
        decided before the cordon, counting the drain's worst case, so any terminate it allowed
        still meets this when it comes. Read from the world's reservations, not NodeHeal's record.

        Every terminate is held to it, a reboot that turned into a replacement included (the node
        did not recover, or the reboot step met a worse fault): the terminate step checks the block
        again then, its drain over. Before it did, seeds 414, 613, 654, 812, 852 and 983
        terminated a block instance that way within the 80 minutes; they are kept as regression
        seeds."""
        block = self.sim.world.block_end(mutation.instance_id)
        if block is None:
            return
        end, instance_type = block
        usable = block_usable_until(
            CapacityContext(
                lifecycle=CAPACITY_BLOCK,
                reservation_type=CAPACITY_BLOCK,
                reservation_end=end,
                instance_type=instance_type,
            )
        )
        assert usable is not None  # an end date is known, so is the usable end
        replace = self.sim.settings.replace
        needed = timedelta(minutes=replace.launch_minutes + replace.min_block_remaining_minutes)
        if usable - mutation.at < needed:
            self.fail(
                "I17 no replacement into a Capacity Block about to reclaim it",
                f"terminate of {mutation.instance_id} ({mutation.node}, {instance_type}) by "
                f"{invocation.execution}: its Capacity Block ends {format_timestamp(end)}, usable until "
                f"{format_timestamp(usable)}, {int((usable - mutation.at).total_seconds() // 60)} min away; "
                f"a replacement needs launchMinutes + minBlockRemainingMinutes = "
                f"{int(needed.total_seconds() // 60)} min",
            )

    def check_i18_scarce_pool(self, mutation: Mutation, invocation: Invocation) -> None:
        """D12's scarce-pool promise: an on-demand instance with no reservation, in a pool
        ``replace.scarcePools`` names, is not given up for a fault a reboot may still fix. It is
        terminated only by an execution that rebooted it first (the reboot did not recover it),
        by the reboot step's own escalation on a worse fault, or for a fault that itself calls for
        replacement (confirmed when the step began, or the decision's planned action by the
        episode's memory, D19); never by a decision that escalated a reboot straight to replace
        (rebootEscalationHours). The instance's capacity and pool come from the world."""
        instance = self.sim.world.instances.get(mutation.instance_id)
        node = self.sim.world.nodes.get(mutation.node)
        if instance is None or node is None or instance.lifecycle or instance.reservation_id:
            return
        replace = self.sim.settings.replace
        pool = node["metadata"]["labels"].get(self.sim.settings.policy.node_pool_label)
        if not replace.is_scarce(pool):
            return
        rebooted = any(
            earlier.kind == "reboot"
            and earlier.instance_id == mutation.instance_id
            and getattr(earlier.caller, "execution", None) == invocation.execution
            for earlier in self.journal
        )
        payload = invocation.payload or {}
        worse_fault = bool((payload.get("instance") or {}).get("escalateTo"))
        decision = (payload.get("admission") or {}).get("decision") or {}
        replace_class = invocation.worst_at_start == "replace" or decision.get("plannedAction") == "replace"
        if not (rebooted or worse_fault or replace_class):
            self.fail(
                "I18 a scarce pool's on-demand instance is rebooted, not replaced",
                f"terminate of {mutation.instance_id} ({mutation.node}, scarce pool {pool!r}, on-demand, "
                f"no reservation) by {invocation.execution}, which never rebooted it, for a fault calling "
                f"for {invocation.worst_at_start} (decision {decision.get('action')}, planned "
                f"{decision.get('plannedAction')}, escalated {decision.get('escalated')})",
            )

    # -- I19, I20: counted signals (Warning Events, issue 31) -------------------------------------

    def counted(self, delivery: Any, result: Any) -> None:
        """The counting function returned on a delivered Node Event: every window it may have
        written is checked (windows change nowhere else)."""
        windows = getattr(self.sim.ledger, "windows", None)
        if windows is None:
            return  # the DynamoDB ledger: reading its windows would be a call of its own
        for (_cluster, instance_id, signal), (window, _expires) in windows.items():
            self.check_i19_no_count_for_another_instance(instance_id, signal, window)
            self.check_i20_window_bounded(instance_id, signal, window)

    def check_i19_no_count_for_another_instance(self, instance_id: str, signal: str, window: Any) -> None:
        """I19 (D1, D10): every Event counted into the window of instance X was written by a
        recorder about the Node object whose instance was X when it wrote it, and with a count it
        wrote. The ground truth is the recorder's (``WarningEvents.written``), not the exporter's
        attribution: a Node name outlives its instance, so an Event of an earlier Node of that name
        that ships after a new one joined must count for no instance."""
        written = self.sim.warnings.written
        for uid, (count, _at) in window.events.items():
            truth = written.get(uid)
            if truth is None:
                self.fail(
                    "I19 no count attributed to another instance",
                    f"the {signal} window of {instance_id} counts Event {uid}, which no recorder wrote",
                )
                return
            if truth.instance_id != instance_id:
                self.fail(
                    "I19 no count attributed to another instance",
                    f"the {signal} window of {instance_id} counts Event {uid}, which the recorder wrote "
                    f"about instance {truth.instance_id} (Node uid {truth.node_uid})",
                )
            if count > truth.count:
                self.fail(
                    "I19 no count attributed to another instance",
                    f"the {signal} window of {instance_id} holds count {count} of Event {uid}; the "
                    f"recorder wrote at most {truth.count}",
                )

    def check_i19_counted_execution_acts_on_its_instance(
        self, mutation: Mutation, invocation: Invocation
    ) -> None:
        """I19 at the mutation: an execution a counted crossing started acts only on the instance
        whose window crossed (I1 holds it to the admitted Node; this to the count behind it)."""
        execution = self.sim.executions.get(invocation.execution)
        if execution is None or execution.started_by not in NODE_EVENT_DELIVERIES:
            return
        counted = (execution.run.input.get("event") or {}).get("countedSignal") or {}
        if mutation.instance_id and mutation.instance_id != counted.get("instanceId"):
            self.fail(
                "I19 no count attributed to another instance",
                f"{mutation.kind} of {mutation.pod or mutation.node} (instance {mutation.instance_id}) by "
                f"{invocation.execution}, started by a count of instance {counted.get('instanceId')}",
            )

    def check_i20_window_bounded(self, instance_id: str, signal: str, window: Any) -> None:
        """I20: no window item grows without bound, however noisy the node: at most MAX_SOURCES
        sources, the rule's count of times per source, MAX_EVENTS_REMEMBERED Event counters, and
        a serialized size under :func:`window_item_bound` (a DynamoDB item is 400 KB at most)."""
        rule = self.sim.settings.policy.counted_rule(signal)
        where = f"the {signal} window of {instance_id}"
        if len(window.occurrences) > MAX_SOURCES:
            self.fail(
                "I20 no window item grows without bound",
                f"{where} keeps {len(window.occurrences)} sources (at most {MAX_SOURCES})",
            )
        for source, times in window.occurrences.items():
            if len(json.dumps(source).encode()) > WINDOW_SOURCE_BYTES:
                self.fail(
                    "I20 no window item grows without bound",
                    f"{where} keeps a source under a key of {len(source)} characters "
                    f"(at most {MAX_FIELD_CHARS}, {WINDOW_SOURCE_BYTES} bytes escaped): {source[:60]}...",
                )
            if len(times) > max(rule.count, 1):
                self.fail(
                    "I20 no window item grows without bound",
                    f"{where} keeps {len(times)} times of {source} (the rule's count is {rule.count})",
                )
        if len(window.events) > MAX_EVENTS_REMEMBERED:
            self.fail(
                "I20 no window item grows without bound",
                f"{where} remembers {len(window.events)} Events (at most {MAX_EVENTS_REMEMBERED})",
            )
        size = len(json.dumps(window_to_item(window)).encode())
        if size > window_item_bound(rule.count):
            self.fail(
                "I20 no window item grows without bound",
                f"{where} is {size} bytes (bound "
                f"{window_item_bound(rule.count)} for a count of {rule.count})",
            )

    def check_i9_one_mutator(self, mutation: Mutation, invocation: Invocation) -> None:
        subject = mutation.instance_id or mutation.node_uid
        for other in self.sim.stack:
            if (
                other is not invocation
                and other.execution
                and other.execution != invocation.execution
                and subject in other.claimed
            ):
                self.fail(
                    "I9 one execution mutates a node at a time",
                    f"{invocation.execution} mutates {mutation.node} while "
                    f"{other.execution}'s {other.function} is still at it",
                )
        invocation.claimed.add(subject)
        history = self._mutators.setdefault(subject, [])
        if history and history[-1] != invocation.execution and invocation.execution in history:
            self.fail(
                "I9 one execution mutates a node at a time",
                f"{invocation.execution} mutates {mutation.node} again after {history[-1]} took it over",
            )
        if not history or history[-1] != invocation.execution:
            history.append(invocation.execution)

    def check_i12_breaker(self, mutation: Mutation, invocation: Invocation) -> None:
        if mutation.kind != "cordon" or self._breaker_open_since is None:
            return
        admitted_at = str(((invocation.payload or {}).get("admission") or {}).get("at", ""))
        if admitted_at and parse_timestamp(admitted_at, "admission.at") >= self._breaker_open_since:
            self.fail(
                "I12 breaker open: nothing new starts",
                f"{invocation.execution} was admitted while the breaker was open",
            )

    def check_i12_breaker_closed_only_by_a_person(self) -> None:
        state = self.sim.ledger.observed_state(self.sim.world.cluster)
        is_open = bool(state and state.breaker.open)
        if is_open and self._breaker_open_since is None:
            self._breaker_open_since = state.breaker.opened_at if state else None
        elif not is_open and self._breaker_open_since is not None:
            if not self._operator_closed:
                self.fail(
                    "I12 breaker open: nothing new starts", "the breaker closed without a person resetting it"
                )
            self._breaker_open_since = None
        self._operator_closed = False

    def check_i3_budgets(self, mutation: Mutation, invocation: Invocation) -> None:
        settings = self.sim.settings.budgets
        now = self.sim.clock
        self._first_cordon.setdefault(mutation.instance_id, now)
        # In flight: executions that have mutated a node and may still do so, which takes holding
        # its lock (every mutation claims it; only admission, before any mutation, takes one). An
        # execution whose lock expired in an outage, or was taken over by a more severe one for the
        # same instance, fails its next claim and ends without mutating again.
        holders = {lock.execution for _, lock in self.sim.ledger.observed_locks(self.sim.world.cluster)}
        mutated: dict[str, str] = {}
        for m in self.journal:
            if m.caller is not None and m.caller.execution:
                mutated.setdefault(m.caller.execution, m.instance_id)
        active = {
            instance
            for execution, instance in mutated.items()
            if execution in holders
            and not self.sim.executions[execution].run.done
            and not self._ended(execution)
        }
        if len(active) > settings.max_in_flight:
            self.fail(
                "I3 budgets",
                f"{len(active)} nodes remediated at once "
                f"(maxInFlight {settings.max_in_flight}): {sorted(active)}",
            )
        started = {i for i, at in self._first_cordon.items() if now - at < timedelta(hours=1)}
        if len(started) > settings.max_per_hour:
            self.fail(
                "I3 budgets",
                f"{len(started)} nodes started within an hour (maxPerHour {settings.max_per_hour})",
            )
        world = self.sim.world
        node = world.nodes.get(mutation.node)
        if node is None:
            return
        pool = world.pool_of(node)
        members = [n for n in world.nodes.values() if world.pool_of(n) == pool]
        unhealthy = [
            n["metadata"]["name"]
            for n in members
            if any(t.get("key") == "nodeheal.io/unhealthy" for t in n["spec"].get("taints") or [])
        ]
        allowance = pool_allowance(PoolHealth(pool[1], len(members), frozenset()), settings)
        if len(unhealthy) > allowance:
            self.fail(
                "I3 budgets",
                f"{len(unhealthy)} of {len(members)} nodes of {pool[0]} pool "
                f"{pool[1] or '(unlabelled)'} are cordoned "
                f"by NodeHeal; the allowance is {allowance}",
            )

    def _ended(self, execution: str) -> bool:
        return bool(self.sim.ledger.observed_ended(self.sim.world.cluster, execution))

    def check_i4_accounted(self) -> None:
        ledger = self.sim.ledger
        cluster = self.sim.world.cluster
        records = ledger.observed_records(cluster)
        recorded = {r.execution for r in records}
        for name, execution in sorted(self.sim.executions.items()):
            if not execution.run.done:
                continue
            if name not in recorded or not ledger.observed_ended(cluster, name):
                self.fail(
                    "I4 every execution accounted for",
                    f"{name} ended {execution.run.status} with no ledger record",
                )
        for subject, lock in ledger.observed_locks(cluster):
            holder = self.sim.executions.get(lock.execution)
            if holder is not None and holder.run.done and lock.expires_at > self.sim.clock:
                self.fail(
                    "I4 every execution accounted for",
                    f"{lock.execution} ended but still holds the lock of {subject}",
                )
        state = ledger.observed_state(cluster)
        for subject, slot in state.in_flight.items() if state else ():
            holder = self.sim.executions.get(slot.execution)
            if holder is not None and holder.run.done and slot.expires_at > self.sim.clock:
                self.fail(
                    "I4 every execution accounted for",
                    f"{slot.execution} ended but still holds a budget slot ({subject})",
                )

    # -- I13, I14, I15: no fault dropped below its severity; refuse; what is recorded happened -------

    def check_i13_decided_as_severe(self, *, final: bool) -> None:
        """I13: within an episode of an instance (D19), every fault NodeHeal saw reaches, within the
        remediation bound after it was confirmed and seen, a recorded decision at least as severe
        as its own (a decision lowered by a budget, the mode or the attempt cap keeps what it
        planned; a superseded or skipped record decides nothing while the episode goes on)."""
        now = self.sim.clock
        records = None
        for name, node in self.sim.world.nodes.items():
            instance = self.sim.world.instance_of(name)
            episode_key = self._episode_of(node, instance)
            seen = self._seen_worst.get(episode_key)
            if not seen or self._wholly_healthy(node):
                continue
            faults = [
                (SEVERITY.get(action, 0), action, condition_type, since, confirm, seen_at)
                for condition_type, actions in seen.items()
                for action, (since, confirm, seen_at) in actions.items()
            ]
            if not faults:
                continue  # every message seen of its conditions was a flap (_forget_flaps)
            start = min(fault[5] for fault in faults)
            if self._person_decided(node["metadata"]["uid"], start):
                continue
            for severity, action, condition_type, since, confirm, seen_at in sorted(faults, reverse=True):
                if severity <= SEVERITY["none"]:
                    break
                due_from = max(since + timedelta(seconds=confirm), seen_at)
                outage = sum(
                    (
                        min(at + d, now) - max(at, due_from)
                        for at, d in self.outages
                        if at + d > due_from and at < now
                    ),
                    timedelta(),
                )
                if now < due_from + self.bound + outage:
                    break  # not due yet (a lesser fault's due time is no earlier to matter)
                if records is None:
                    records = self.sim.ledger.observed_records(self.sim.world.cluster)
                if not any(self._decides_at_least(record, node, start, severity) for record in records):
                    self.fail(
                        "I13 no fault decided below its severity",
                        f"{condition_type} on {name.split('.')[0]} showed a fault calling for {action} "
                        f"(seen {seen_at:%H:%M:%S}), and no decision of this episode is as severe",
                    )
                break  # the worst decides for the lesser ones

    @staticmethod
    def _decides_at_least(record: Any, node: Mapping[str, Any], start: datetime, severity: int) -> bool:
        if record.node_uid != node["metadata"]["uid"] or record.finished_at < start:
            return False
        if record.outcome in (Outcome.SUPERSEDED, Outcome.SKIPPED):
            return False
        return max(SEVERITY[record.action.value], SEVERITY[record.planned_action.value]) >= severity

    def _refuse_class(self, pod: Mapping[str, Any]) -> bool:
        """A pod a refuse setting protects, by kubectl drain's own facts (pkg/drain/filters.go) and
        NodeHeal's documented exclusions, independent of the drain policy's code: running, not
        terminating, not a mirror pod, not a DaemonSet's, not opted out, not in a never-drained
        namespace; with an emptyDir under ``emptyDir: refuse`` or with no controller under
        ``unmanagedPods: refuse``."""
        drain = self.sim.settings.drain
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or metadata.get("deletionTimestamp"):
            return False
        annotations = metadata.get("annotations") or {}
        if (
            "kubernetes.io/config.mirror" in annotations
            or annotations.get("nodeheal.io/skip-drain") == "true"
        ):
            return False
        namespace = str(metadata.get("namespace", ""))
        if any(fnmatch.fnmatchcase(namespace, glob) for glob in drain.never_drain_namespaces):
            return False
        controller = next((o for o in metadata.get("ownerReferences") or () if o.get("controller")), None)
        if controller is not None and (controller.get("apiVersion"), controller.get("kind")) == (
            "apps/v1",
            "DaemonSet",
        ):
            return False
        empty_dir = any("emptyDir" in volume for volume in spec.get("volumes") or ())
        return (empty_dir and drain.empty_dir == "refuse") or (
            controller is None and drain.unmanaged_pods == "refuse"
        )

    def check_i14_refuse_evicts_nothing(self, mutation: Mutation, invocation: Invocation) -> None:
        """I14: a drain whose node holds a pod a refuse setting protects moves no pod at all, as
        kubectl drain refuses before it evicts anything, whatever holds the other pods."""
        if mutation.kind not in ("evict", "force-delete"):
            return
        refused = self._refused_at_start.get(invocation.number)
        if refused:
            self.fail(
                "I14 refuse evicts nothing",
                f"{mutation.kind} of {mutation.pod} by {invocation.execution} while {refused[0]} on the "
                "node is one a refuse setting protects",
            )

    def check_i15_recorded_what_happened(self) -> None:
        """I15: an execution whose Record outcome step ran to its end keeps the outcome that step
        recorded, in its record and its end marker, whatever the finalizer wrote meanwhile."""
        ledger = self.sim.ledger
        cluster = self.sim.world.cluster
        records = {r.execution: r for r in ledger.observed_records(cluster)}
        for execution, outcome in sorted(self._recorded_by_step.items()):
            record = records.get(execution)
            end = ledger.observed_end(cluster, execution)
            kept = record.outcome.value if record is not None else "none"
            ended = end.outcome if end is not None else "none"
            if kept != outcome or ended != outcome:
                self.fail(
                    "I15 what is recorded is what happened",
                    f"{execution}: Record outcome recorded {outcome}; the record says {kept} and the end "
                    f"marker {ended}",
                )

    # -- I2: every bad condition reaches a recorded decision ---------------------------------------------

    def _track_conditions(self) -> None:
        world = self.sim.world
        now = self.sim.clock
        live: set[tuple[str, str, str]] = set()

        for name, node in world.nodes.items():
            rv = str(node["metadata"].get("resourceVersion", ""))
            cached = self._node_scans.get(name)
            if cached is None or cached[0] != rv or cached[1] != node["metadata"]["uid"]:
                cached = (
                    rv,
                    node["metadata"]["uid"],
                    self._scan(name, node, now),
                    self._wholly_healthy(node),
                )
                self._node_scans[name] = cached
            bad, healthy = cached[2], cached[3]
            instance = world.instance_of(name)
            episode_key = self._episode_of(node, instance)
            for key, _, _ in bad:
                live.add(key)
            if healthy:
                # The world's episode is over (NodeHeal may not have read it yet, and then holds
                # on to the worse decision: never a violation of I8, which only looks down).
                self._seen_worst.pop(episode_key, None)
                self._known_worst.pop(episode_key, None)
                self._worst.pop(instance, None)
                continue
            # A fault counts once NodeHeal saw it in this episode (same instance, Node object and
            # boot) and it is confirmed: bad for the confirmation time of the message that called
            # for it, from the transition time it was seen with (a holder still confirming may be
            # preempted by a lesser fault that acts sooner, D2). A lesser message since, even with
            # a new reason and transition time (NPD rewrites both), does not lower it (D19).
            worst: dict[str, tuple[str, str]] = {}
            for condition_type, seen in self._known_worst.get(episode_key, {}).items():
                confirmed = [
                    action
                    for action, (since, confirm, _) in seen.items()
                    if now - since >= timedelta(seconds=confirm)
                ]
                if confirmed:
                    worst[condition_type] = ("", max(confirmed, key=lambda a: SEVERITY.get(a, 0)))
            self._worst[instance] = worst
        for key, episode in self.episodes.items():
            if episode.ended_at is None and key not in live:
                episode.ended_at = now

    def _forget_flaps(self, episode: tuple[str, str, str], condition_type: str, now: datetime) -> None:
        """The condition cleared: a message of it that had not stayed bad for its confirmation time
        was a flap, on which NodeHeal acts nowhere (admission remembers only a confirmed report,
        and a confirming holder stops when it reads the condition healthy), so neither I8 nor I13
        holds a decision to it; :meth:`_saw` leaves out such a message reported after the clear.
        A confirmed one stays for the rest of the episode (D19).
        Seed 15013547: a KernelDeadlock (replace after 600 s) cleared 91 s in, while the node's
        AcceleratedHardwareReady stayed bad; I8 took the replace as confirmed once 600 s had gone
        by and failed the reboot that a later Xid 48 called for."""
        for memory in (self._seen_worst, self._known_worst):
            seen = memory.get(episode, {}).get(condition_type)
            if not seen:
                continue
            for action, (since, confirm, _) in list(seen.items()):
                if now - since < timedelta(seconds=confirm):
                    del seen[action]
            if not seen:
                del memory[episode][condition_type]

    def _scan(
        self, name: str, node: Mapping[str, Any], now: datetime
    ) -> list[tuple[tuple[str, str, str], Any, Episode]]:
        """The node's bad conditions and their episodes, noting when each condition last cleared."""
        uid = node["metadata"]["uid"]
        bad_conditions = []
        for condition in node["status"]["conditions"]:
            condition_type = condition["type"]
            bad = is_bad_status(condition_type, condition["status"])
            signature = (condition["status"], condition.get("reason", ""), condition.get("message", ""))
            seen_key = (uid, condition_type)
            if self._seen_conditions.get(seen_key) != signature:
                self._seen_conditions[seen_key] = signature
                if not bad:
                    self._cleared_at[seen_key] = now
                    self._clear_times.setdefault(seen_key, []).append(now)
                    self._forget_flaps(
                        self._episode_of(node, self.sim.world.instance_of(name)), condition_type, now
                    )
            if not bad:
                continue
            key = (uid, condition_type, str(condition["lastTransitionTime"]))
            if key not in self.episodes:
                self.episodes[key] = Episode(
                    name,
                    uid,
                    self.sim.world.instance_of(name),
                    condition_type,
                    parse_timestamp(condition["lastTransitionTime"], "lastTransitionTime"),
                    confirm_seconds(condition, self.sim.settings, node["metadata"]["labels"]),
                )
            bad_conditions.append((key, dict(condition), self.episodes[key]))
        return bad_conditions

    def _acted(self, execution: str) -> bool:
        return any(
            m.kind in ("reboot", "terminate") and m.caller is not None and m.caller.execution == execution
            for m in self.journal
        )

    def check_i2_decided(self, *, final: bool) -> None:
        now = self.sim.clock
        for episode in self.episodes.values():
            end = episode.ended_at or now
            # Time NodeHeal was down (an outage longer than the lock TTL) does not count.
            outage = sum(
                (
                    min(at + d, end) - max(at, episode.since)
                    for at, d in self.outages
                    if at + d > episode.since and at < end
                ),
                timedelta(),
            )
            stayed = end - episode.since - outage
            if stayed < timedelta(seconds=episode.confirm_seconds + 60):
                continue  # it never stayed bad past its confirmation time (plus delivery)
            if self.sim.world.condition(episode.node, episode.condition_type) is None and not final:
                continue
            # The decision is due within the bound of NodeHeal's running time: an outage after the
            # bad period ended (its execution still going) delays it too, as I13 counts it.
            down = sum(
                (
                    min(at + d, now) - max(at, episode.since)
                    for at, d in self.outages
                    if at + d > episode.since and at < now
                ),
                timedelta(),
            )
            due = episode.since + timedelta(seconds=episode.confirm_seconds) + self.bound + down
            if not final and now < due:
                continue
            if not self._decided(episode):
                self.fail(
                    "I2 no bad condition dropped",
                    f"{episode.condition_type} on {episode.node} (uid {episode.node_uid}) bad since "
                    f"{episode.since:%H:%M:%S} for {int(stayed.total_seconds())}s has no recorded decision",
                )

    def _person_decided(self, node_uid: str, since: datetime) -> bool:
        """A person took the node back after the fault began: the fault is theirs to decide (a
        remediation that went on would fight them; I16)."""
        taken = self._taken_back.get(node_uid)
        return taken is not None and taken[0] >= since

    def _decided(self, episode: Episode) -> bool:
        if self._person_decided(episode.node_uid, episode.since):
            return True
        ledger = self.sim.ledger
        stamp = episode.since.strftime("%Y%m%dT%H%M%SZ")
        mine = {
            name
            for name, execution in self.sim.executions.items()
            if execution.key[2] == episode.node_uid
            and execution.key[3] == episode.condition_type
            and execution.key[6] == stamp
        }
        superseded_at: datetime | None = None
        records = ledger.observed_records(self.sim.world.cluster)
        for record in records:
            if record.execution in mine:
                # "skipped" decides only an episode that is over (the node gone or replaced, the
                # condition cleared): on a condition still bad on the same Node it is what a fault
                # dropped behind another execution's lock looked like.
                if record.outcome is not Outcome.SUPERSEDED and (
                    record.outcome is not Outcome.SKIPPED or episode.ended_at is not None
                ):
                    return True
                if record.outcome is Outcome.SUPERSEDED and self._acted(record.execution):
                    return True  # it rebooted or replaced before it was superseded: acted on
                superseded_at = (
                    record.finished_at if superseded_at is None else min(superseded_at, record.finished_at)
                )
        if superseded_at is not None:
            # Handed over: the execution that took the node over must reach a decision.
            return any(
                r.node_uid == episode.node_uid
                and r.outcome is not Outcome.SUPERSEDED
                and (r.outcome is not Outcome.SKIPPED or episode.ended_at is not None)
                and r.finished_at >= superseded_at
                for r in records
            )
        return False
