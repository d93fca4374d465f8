"""Scenarios of the local pipeline: a stimulus, and the outcome that must follow.

``nodeheal demo --scenario NAME`` plays one and exits non-zero when its expectations fail; the
end-to-end tests play the same ones and add their own assertions. Each scenario:

* ``play`` injects faults (or events) the way the real world would and waits for the pipeline to
  react; the runner then waits until nothing is in flight;
* ``check`` compares the final cluster, EC2, ledger and execution state with what must be true,
  adding one readable problem per mismatch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Protocol

from nodeheal.actions import Action
from nodeheal.events import cluster_source
from nodeheal.kube_views import UNHEALTHY_TAINT_KEY
from nodeheal.sim.cluster.layout import ClusterLayout
from nodeheal.sim.cluster.simulated_cluster import (
    DCGM_ERROR,
    GATEWAY_UNREACHABLE,
    NOTEBOOK_NAMESPACE,
    XID_48,
    XID_63,
    XID_79,
    Fault,
)
from nodeheal.sim.detectors import detector_of
from nodeheal.sim.local_aws import Invocation, iter_task_results
from nodeheal.sim.local_pipeline.wiring import (
    LocalPipeline,
    PipelineStoppedError,
    align_to_second,
    wait_until,
)
from nodeheal.sim.timeline import short_node
from nodeheal.timeutil import utc_now
from nodeheal.workflow.budget import BreakerState
from nodeheal.workflow.records import Outcome, RemediationRecord

GONE_STATES = ("shutting-down", "terminated")


class ScenarioTimeoutError(Exception):
    """The pipeline did not get where the scenario needs it (a wait timed out)."""


class Operator(Protocol):
    """A person at a terminal during a scenario, running the real ``nodeheal`` commands against the
    pipeline. The simulation does not import the CLI: ``nodeheal demo`` and the tests hand one to
    :meth:`Scenario.run` (nodeheal.commands.demo.CliOperator)."""

    def breaker_reset(self, cluster: str) -> Mapping[str, Any]:
        """``nodeheal breaker reset --cluster CLUSTER --yes --json``: the document it printed."""
        ...


@dataclass
class ScenarioRun:
    """One play of a scenario: the pipeline, what it is about, and what went wrong."""

    pipeline: LocalPipeline
    #: The node the story is about (the demo's summary line describes its last record).
    subject: str = ""
    problems: list[str] = field(default_factory=list)
    #: Facts ``play`` captured for ``check`` (instance ids before replacement, counts...).
    facts: dict[str, Any] = field(default_factory=dict)
    #: Multiplies every wait: a demo at low speed takes longer in wall-clock time.
    patience: float = 1.0
    #: What the scenario expected once the decision was known, for people (the demo prints it).
    expected: str = ""
    #: The person who runs commands, for the scenarios that need one (storm: ``breaker reset``).
    operator: Operator | None = None
    _faulted: bool = False

    def seconds(self, timeout: float) -> float:
        return timeout * self.patience

    # -- stimulus ----------------------------------------------------------------------------------

    def inject(self, node: str, fault: Fault, *, align: bool = True) -> None:
        """Set the fault just after a whole second (see :func:`align_to_second`)."""
        if align:
            align_to_second()
        if not self._faulted:
            self.pipeline.timeline.mark_origin()
            self._faulted = True
        self.pipeline.cluster.inject(node, fault)

    def await_records(
        self, count: int, node: str | None = None, timeout: float = 60.0
    ) -> list[RemediationRecord]:
        try:
            return self.pipeline.wait_for_records(count, node=node, timeout=self.seconds(timeout))
        except TimeoutError as exc:
            where = f" for {short_node(node)}" if node else ""
            raise ScenarioTimeoutError(f"expected {count} remediation record(s){where}: {exc}") from exc

    def await_event(
        self, kind: str, *, node: str | None = None, count: int = 1, timeout: float = 60.0
    ) -> None:
        try:
            self.pipeline.wait_for(kind, node=node, count=count, timeout=self.seconds(timeout))
        except TimeoutError as exc:
            raise ScenarioTimeoutError(str(exc)) from exc

    # -- expectations ------------------------------------------------------------------------------

    def expect(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok

    def only_record(self, node: str) -> RemediationRecord | None:
        records = self.pipeline.records(node)
        if not self.expect(
            len(records) == 1,
            f"{short_node(node)}: expected one record, found {[r.outcome.value for r in records]}",
        ):
            return None
        return records[0]

    def expect_outcome(self, record: RemediationRecord | None, outcome: Outcome) -> None:
        if record is not None:
            self.expect(
                record.outcome is outcome,
                f"{short_node(record.node)}: outcome {record.outcome.value}, expected {outcome.value} "
                f"({record.summary})",
            )

    def expect_instance(self, instance_id: str, *, gone: bool) -> None:
        state = self.pipeline.aws.instance_state(instance_id)
        if gone:
            self.expect(state in GONE_STATES, f"instance {instance_id} is {state}, expected terminated")
        else:
            self.expect(
                state == "running", f"instance {instance_id} is {state}, expected running (untouched)"
            )

    def expect_untouched(self, node: str, instance_id: str) -> None:
        obj = self.pipeline.cluster.node(node)
        if not self.expect(obj is not None, f"{short_node(node)} was deleted"):
            return
        assert obj is not None
        self.expect(not obj["spec"].get("unschedulable"), f"{short_node(node)} is cordoned")
        self.expect(
            UNHEALTHY_TAINT_KEY not in taint_keys(obj), f"{short_node(node)} carries {UNHEALTHY_TAINT_KEY}"
        )
        self.expect_instance(instance_id, gone=False)

    def expect_cordoned(self, node: str) -> None:
        obj = self.pipeline.cluster.node(node)
        self.expect(
            obj is not None and bool(obj["spec"].get("unschedulable")),
            f"{short_node(node)} should be left cordoned",
        )

    def expect_replaced(self, node: str, instance_id: str) -> None:
        cluster = self.pipeline.cluster
        self.expect_instance(instance_id, gone=True)
        self.expect(
            cluster.node(node) is None, f"{short_node(node)} still exists after its instance was terminated"
        )
        replacement = cluster.replacements.get(node)
        if self.expect(replacement is not None, f"no replacement Node for {short_node(node)}"):
            assert replacement is not None
            obj = cluster.node(replacement)
            self.expect(
                obj is not None and not obj["spec"].get("unschedulable"),
                f"replacement {replacement} is not schedulable",
            )

    def expect_workload_running(self) -> None:
        cluster = self.pipeline.cluster
        self.expect(
            cluster.workload_healthy(),
            f"workload not running again: {cluster.running_workers()}/{cluster.layout.workers} "
            "training workers Running",
        )

    def expect_lock_free(self, node: str) -> None:
        holder = self.pipeline.ledger.node_lock_holder(self.pipeline.cluster_name, node)
        self.expect(holder is None, f"{short_node(node)} is still locked by {holder}")

    def expect_executions(self, count: int) -> None:
        executions = self.pipeline.executions()
        self.expect(
            len(executions) == count,
            f"{len(executions)} executions, expected {count}: {[e['name'] for e in executions]}",
        )
        running = [e["name"] for e in executions if e["status"] == "RUNNING"]
        self.expect(not running, f"executions still running: {running}")

    def expect_notifications(self, severities: list[str]) -> list[dict[str, Any]]:
        messages = self.pipeline.aws.notifications()
        found = sorted(m["attributes"].get("severity", "") for m in messages)
        self.expect(found == sorted(severities), f"notifications {found}, expected {sorted(severities)}")
        return messages

    def terminate_calls(self) -> int:
        """EC2 terminations the workflow performed (not counting "already gone")."""
        return sum(
            1
            for e in self.pipeline.timeline.events("terminated")
            if e.text.startswith("EC2 TerminateInstances")
        )


def taint_keys(node: Mapping[str, Any]) -> set[str]:
    return {t["key"] for t in node.get("spec", {}).get("taints") or []}


def task_outputs(run: ScenarioRun, execution: str, state: str) -> list[Any]:
    """Outputs of every ``state`` the execution exited, in order (from its history)."""
    for summary in run.pipeline.executions():
        if summary["name"] == execution:
            history = run.pipeline.aws.history(summary["executionArn"])
            return [output for name, output in iter_task_results(history) if name == state]
    return []


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    title: str
    play: Callable[[ScenarioRun], None]
    check: Callable[[ScenarioRun], None]
    #: cdk context overrides this scenario needs (merged over the base context).
    context: Mapping[str, Any] = field(default_factory=dict)
    layout: ClusterLayout = field(default_factory=ClusterLayout)

    def run(
        self,
        pipeline: LocalPipeline,
        *,
        settle_timeout: float = 60.0,
        patience: float = 1.0,
        operator: Operator | None = None,
    ) -> ScenarioRun:
        """Play, wait until nothing is in flight, check. Problems are in ``run.problems``."""
        run = ScenarioRun(pipeline, patience=patience, operator=operator)
        try:
            self.play(run)
            pipeline.wait_settled(timeout=settle_timeout)
        except (ScenarioTimeoutError, TimeoutError, PipelineStoppedError) as exc:
            run.problems.append(str(exc))
            return run
        self.check(run)
        errors = pipeline.cluster.clock.errors
        run.expect(not errors, f"simulation steps failed: {errors}")
        return run


# -- the scenarios ----------------------------------------------------------------------------------


def _replace_play(fault: Fault) -> Callable[[ScenarioRun], None]:
    def play(run: ScenarioRun) -> None:
        node = run.subject = run.pipeline.cluster.gpu_nodes[0]
        run.facts["instance"] = run.pipeline.cluster.instance_of(node)
        run.facts["pods"] = sorted(p["metadata"]["name"] for p in run.pipeline.cluster.pods_on(node))
        run.inject(node, fault)
        record = run.await_records(1, node)[-1]
        # The workload is disrupted, and so comes back, only when the node was drained: a
        # configuration that decides less (xidActions {"79": "cordon"}) leaves it where it is.
        if record.action.mutates_instance:
            run.await_event("workload-running")

    return play


#: What a decision that drains nothing leaves: (outcome, notification severities).
_UNDRAINED = {
    Action.NONE: (Outcome.RECORDED, []),
    Action.ALERT: (Outcome.ALERTED, ["action-required"]),
    Action.CORDON: (Outcome.CORDONED, ["action-required"]),
}


def _xid79_check(run: ScenarioRun) -> None:
    """Xid 79 is replaced by default; a configuration that decides otherwise (``policy.xidActions``)
    is checked against what that decision must leave, not against a replacement."""
    node, instance = run.subject, run.facts["instance"]
    record = run.only_record(node)
    run.expect_executions(1)
    if record is None:
        return
    run.expect(record.xid == 79, f"record has xid {record.xid}")
    action = record.action
    if action is Action.REPLACE:
        run.expected = "expected after a replace: the worker evicted, the instance terminated, a new node"
        run.expect_outcome(record, Outcome.REPLACED)
        run.expect(
            record.pods_evicted == 1, f"{record.pods_evicted} pods evicted, expected the training worker"
        )
        run.expect_replaced(node, instance)
        run.expect_workload_running()
        run.expect_notifications(["info"])
    elif action is Action.REBOOT:
        run.expected = "expected after a reboot: the worker evicted, the instance rebooted and back"
        run.expect_outcome(record, Outcome.REBOOTED)
        run.expect_untouched(node, instance)
        run.expect_workload_running()
        run.expect_lock_free(node)
    else:
        outcome, severities = _UNDRAINED[action]
        run.expected = (
            f"expected after {'an' if action is Action.ALERT else 'a'} {action.value} (the policy's "
            f"decision): outcome {outcome.value}, "
            + ("the node cordoned, " if action is Action.CORDON else "the node untouched, ")
            + "its pods left in place, the instance running"
        )
        run.expect_outcome(record, outcome)
        if action is Action.CORDON:
            run.expect_cordoned(node)
            run.expect_instance(instance, gone=False)
        else:
            run.expect_untouched(node, instance)
        pods = sorted(p["metadata"]["name"] for p in run.pipeline.cluster.pods_on(node))
        run.expect(
            pods == run.facts["pods"], f"pods on {short_node(node)} changed: {run.facts['pods']} -> {pods}"
        )
        run.expect_notifications(severities)


#: The demo's confirmation for GatewayUnreachable: the default (five minutes, so a brief loss is
#: not a replacement) is what a deployment waits; the demo shows the same path in seconds.
GATEWAY_DEMO_CONFIRM_SECONDS = 5


def _gateway_check(run: ScenarioRun) -> None:
    """From the condition to its decision: the gateway rule of the policy, confirmed, then replace."""
    node, instance = run.subject, run.facts["instance"]
    record = run.only_record(node)
    run.expect_executions(1)
    if record is None:
        return
    run.expected = (
        "expected for a gateway that stays unreachable: the condition confirmed for "
        f"{GATEWAY_DEMO_CONFIRM_SECONDS} s, then replace: the worker evicted, the instance "
        "terminated, a new node"
    )
    run.expect(
        record.signal == "condition:GatewayUnreachable",
        f"decided by {record.signal!r}, expected the GatewayUnreachable condition rule",
    )
    run.expect(record.xid is None, f"record has xid {record.xid}")
    run.expect(
        record.planned_action is Action.REPLACE, f"planned {record.planned_action.value}, expected replace"
    )
    run.expect_outcome(record, Outcome.REPLACED)
    run.expect_replaced(node, instance)
    run.expect_workload_running()
    run.expect_notifications(["info"])


def _no_action_play(fault: Fault) -> Callable[[ScenarioRun], None]:
    def play(run: ScenarioRun) -> None:
        node = run.subject = run.pipeline.cluster.gpu_nodes[0]
        run.facts["instance"] = run.pipeline.cluster.instance_of(node)
        run.facts["pods"] = sorted(p["metadata"]["name"] for p in run.pipeline.cluster.pods_on(node))
        run.inject(node, fault)
        run.await_records(1, node)

    return play


def _untouched_check(outcome: Outcome, severities: list[str]) -> Callable[[ScenarioRun], None]:
    def check(run: ScenarioRun) -> None:
        node = run.subject
        run.expect_outcome(run.only_record(node), outcome)
        run.expect_untouched(node, run.facts["instance"])
        pods = sorted(p["metadata"]["name"] for p in run.pipeline.cluster.pods_on(node))
        run.expect(
            pods == run.facts["pods"], f"pods on {short_node(node)} changed: {run.facts['pods']} -> {pods}"
        )
        run.expect_workload_running()
        run.expect_executions(1)
        run.expect_notifications(severities)

    return check


def _xid48_play(run: ScenarioRun) -> None:
    cluster = run.pipeline.cluster
    node = run.subject = cluster.gpu_nodes[0]
    run.facts["instance"] = cluster.instance_of(node)
    run.facts["boot"] = (cluster.node(node) or {})["status"]["nodeInfo"]["bootID"]
    run.inject(node, XID_48)
    run.await_records(1, node)
    run.await_event("workload-running")


def _xid48_check(run: ScenarioRun) -> None:
    node = run.subject
    run.expect_outcome(run.only_record(node), Outcome.REBOOTED)
    run.expect_untouched(node, run.facts["instance"])
    obj = run.pipeline.cluster.node(node) or {}
    run.expect(
        obj.get("status", {}).get("nodeInfo", {}).get("bootID") != run.facts["boot"],
        "the node was not rebooted (same boot ID)",
    )
    run.expect_workload_running()
    run.expect_lock_free(node)
    run.expect_executions(1)


def _xid48_repeat_play(run: ScenarioRun) -> None:
    _xid48_play(run)
    run.pipeline.wait_settled(timeout=run.seconds(60))
    run.inject(run.subject, XID_48)
    run.await_records(2, run.subject)
    run.await_event("workload-running", count=2)


def _xid48_repeat_check(run: ScenarioRun) -> None:
    node = run.subject
    records = run.pipeline.records(node)
    run.expect(
        [r.outcome for r in records] == [Outcome.REBOOTED, Outcome.REPLACED],
        f"outcomes {[r.outcome.value for r in records]}, expected rebooted then replaced",
    )
    if len(records) == 2:
        second = records[1]
        run.expect(
            second.escalated and second.planned_action.value == "reboot",
            f"second remediation was not an escalation: {second.reason}",
        )
    run.expect_replaced(node, run.facts["instance"])
    run.expect_workload_running()
    run.expect_executions(2)


def _pdb_play(run: ScenarioRun) -> None:
    run.pipeline.cluster.block_drains()
    _replace_play(XID_79)(run)


def _pdb_play_abort(run: ScenarioRun) -> None:
    run.pipeline.cluster.block_drains()
    _no_action_play(XID_79)(run)


def _pdb_force_check(run: ScenarioRun) -> None:
    node = run.subject
    record = run.only_record(node)
    run.expect_outcome(record, Outcome.REPLACED)
    settings = run.pipeline.remediation_settings.drain
    if record is not None:
        run.expect(
            record.pdb_blocked >= 1 and record.pods_forced == 1 and record.pods_evicted == 0,
            f"drain: {record.pdb_blocked} PDB refusals, {record.pods_forced} forced, "
            f"{record.pods_evicted} evicted",
        )
        waited = record.stage_seconds.get("drained", 0.0)
        run.expect(
            waited >= settings.timeout_seconds,
            f"drain gave up after {waited:.1f}s, before its {settings.timeout_seconds}s timeout",
        )
        run.expect(
            "Force-delete remaining pods" in run.pipeline.state_names(record.execution),
            "no forced deletion in the execution history",
        )
    run.expect_replaced(node, run.facts["instance"])
    run.expect_workload_running()


def _pdb_abort_check(run: ScenarioRun) -> None:
    node = run.subject
    record = run.only_record(node)
    run.expect_outcome(record, Outcome.DRAIN_ABORTED)
    run.expect_cordoned(node)
    run.expect_instance(run.facts["instance"], gone=False)
    pods = sorted(p["metadata"]["name"] for p in run.pipeline.cluster.pods_on(node))
    run.expect(
        pods == run.facts["pods"], f"pods moved although the drain was aborted: {run.facts['pods']} -> {pods}"
    )
    run.expect_lock_free(node)
    executions = run.pipeline.executions()
    run.expect(
        [e["status"] for e in executions] == ["FAILED"],
        f"execution statuses {[e['status'] for e in executions]}, expected one FAILED",
    )
    run.expect_notifications(["action-required"])


def _do_not_disrupt_play(run: ScenarioRun) -> None:
    cluster = run.pipeline.cluster
    node = run.subject = cluster.notebook_node
    run.facts["instance"] = cluster.instance_of(node)
    run.inject(node, XID_79)
    run.await_records(1, node)
    run.await_event("workload-running")


def _do_not_disrupt_check(run: ScenarioRun) -> None:
    node = run.subject
    record = run.only_record(node)
    run.expect_outcome(record, Outcome.REPLACED)
    wait = run.pipeline.remediation_settings.drain.do_not_disrupt_wait_seconds
    if record is not None:
        drained = record.stage_seconds.get("drained", 0.0)
        run.expect(
            drained >= wait,
            f"the do-not-disrupt pod was evicted after {drained:.1f}s, before its {wait}s wait",
        )
        rounds = task_outputs(run, record.execution, "Evict pods")
        held = [r["drain"].get("heldBackDoNotDisrupt", 0) for r in rounds]
        run.expect(
            bool(held) and held[0] == 1,
            f"first eviction round held back {held[:1]} pods, expected the notebook",
        )
        run.expect(record.pods_evicted == 1, f"{record.pods_evicted} pods evicted, expected the notebook")
    run.expect_replaced(node, run.facts["instance"])
    notebooks = [
        p
        for p in run.pipeline.cluster.pods(NOTEBOOK_NAMESPACE)
        if p.get("status", {}).get("phase") == "Running"
    ]
    run.expect(len(notebooks) == 1, "the notebook is not running again")


def _flapping_play(run: ScenarioRun) -> None:
    cluster = run.pipeline.cluster
    cleared, flapping = cluster.gpu_nodes[0], cluster.gpu_nodes[1]
    run.subject = flapping
    run.facts.update(
        cleared=cleared,
        flapping=flapping,
        cleared_instance=cluster.instance_of(cleared),
        instance=cluster.instance_of(flapping),
    )
    # Bad and good again within milliseconds: gone before any admit can look.
    run.inject(cleared, XID_79)
    cluster.clear(cleared, XID_79.condition_type)
    # Bad, good, bad again a second later: two transitions, one remediation.
    run.inject(flapping, XID_79, align=False)
    cluster.clear(flapping, XID_79.condition_type)
    run.inject(flapping, XID_79)
    run.await_records(2, flapping)
    run.await_event("workload-running")


def _flapping_check(run: ScenarioRun) -> None:
    cleared, flapping = run.facts["cleared"], run.facts["flapping"]
    cleared_records = run.pipeline.records(cleared)
    run.expect(
        all(r.outcome is Outcome.SKIPPED for r in cleared_records),
        f"{short_node(cleared)} cleared before admit but got {[r.outcome.value for r in cleared_records]}",
    )
    run.expect_untouched(cleared, run.facts["cleared_instance"])
    outcomes = Counter(r.outcome for r in run.pipeline.records(flapping))
    run.expect(
        outcomes[Outcome.REPLACED] == 1
        and sum(outcomes.values()) == outcomes[Outcome.REPLACED] + outcomes[Outcome.SKIPPED],
        f"{short_node(flapping)} outcomes {dict(outcomes)}, expected one replaced, the rest skipped",
    )
    run.expect_replaced(flapping, run.facts["instance"])
    run.expect(run.terminate_calls() == 1, f"{run.terminate_calls()} EC2 terminations, expected 1")


STORM_SHARE = 0.4


def _storm_play(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    cluster = pipeline.cluster
    faulted = cluster.gpu_nodes[: round(len(cluster.gpu_nodes) * STORM_SHARE)]
    run.facts["faulted"] = faulted
    run.facts["instances"] = {node: cluster.instance_of(node) for node in faulted}
    run.subject = faulted[0]
    align_to_second()
    for node in faulted:
        run.inject(node, XID_79, align=False)
    run.await_records(len(faulted), timeout=90)
    pipeline.wait_settled(timeout=run.seconds(60))
    run.facts["breaker"] = pipeline.ledger.read_admission_state(pipeline.cluster_name).breaker
    run.facts["storm_records"] = pipeline.records()
    run.facts["notifications"] = pipeline.aws.notifications()
    # 1. A person closes the breaker only (the ledger item, as `nodeheal breaker reset
    #    --no-reevaluate` writes it), then the exporter restarts and re-sends every condition
    #    still bad: nothing may be replayed (docs/architecture.md, D13, invariant 5).
    ledger = pipeline.ledger
    state = ledger.read_admission_state(pipeline.cluster_name)
    ledger.write_admission_state(replace(state, breaker=BreakerState(), recent_refusals=()))
    pipeline.timeline.emit(
        "operator",
        "breaker-reset",
        "circuit breaker closed by a person, without re-evaluation (breaker reset --no-reevaluate)",
    )
    still_bad = [node for node in faulted if cluster.node(node) is not None]
    run.facts["deliveries_before_restart"] = before = len(pipeline.condition_deliveries())
    pipeline.restart_exporter()
    wait_until(
        lambda: len(pipeline.condition_deliveries()) >= before + len(still_bad),
        timeout=run.seconds(30),
        what="the restarted exporter's resync",
    )
    pipeline.wait_settled(timeout=run.seconds(60))
    run.facts["executions_after_close"] = len(pipeline.executions())
    run.facts["records_after_close"] = len(pipeline.records())
    run.facts["late_deliveries"] = pipeline.condition_deliveries()[before:]
    run.facts["left_schedulable"] = [node for node in still_bad if _schedulable(run, node)]
    condition = f"{XID_79.condition_type}={XID_79.status}"
    pipeline.timeline.emit(
        "operator",
        "still-bad",
        f"{len(still_bad)} node(s) still have {condition} and stay schedulable, their pods on a "
        "dead GPU: the resync was a duplicate and a close-only reset re-evaluates nothing. "
        "`nodeheal breaker reset` without --no-reevaluate re-reads them and starts -r<N> executions",
    )
    # 2. The real reset: it reads the live nodes and re-evaluates the ones still bad, as many as the
    #    budgets have room for now; a person runs it again for the rest once those have ended.
    _reevaluate_until_done(run, still_bad)


def _schedulable(run: ScenarioRun, node: str) -> bool:
    obj = run.pipeline.cluster.node(node) or {}
    return (
        not obj.get("spec", {}).get("unschedulable")
        and UNHEALTHY_TAINT_KEY not in taint_keys(obj)
        and run.pipeline.aws.instance_state(run.facts["instances"][node]) == "running"
    )


def _reevaluate_until_done(run: ScenarioRun, nodes: list[str]) -> None:
    """``nodeheal breaker reset`` until no node of ``nodes`` waits for budget room, waiting after each
    for the executions it started; each on the timeline."""
    pipeline, operator = run.pipeline, run.operator
    if operator is None:
        raise ScenarioTimeoutError(
            "this scenario needs a person to run `nodeheal breaker reset` (an operator)"
        )
    reevaluations: dict[str, str] = run.facts.setdefault("reevaluations", {})
    for _ in nodes:
        document = operator.breaker_reset(pipeline.cluster_name)
        (view,) = document["clusters"]
        started = [n for n in view["nodes"] if n["started"]]
        waiting = sorted({n["node"] for n in view["nodes"] if n["plan"] == "later"})
        pipeline.timeline.emit(
            "operator",
            "breaker-reset",
            f"nodeheal breaker reset --cluster {pipeline.cluster_name}: breaker "
            f"{'closed' if view['closed'] else 'already closed'}; {len(started)} re-evaluation(s) started"
            + (f", {len(waiting)} node(s) wait for budget room (the next reset)" if waiting else ""),
        )
        for entry in started:
            reevaluations[entry["node"]] = entry["execution"]
            pipeline.timeline.emit(
                "operator",
                "reevaluation-started",
                f"re-evaluation started: {entry['execution']}",
                node=entry["node"],
                execution=entry["execution"],
            )
        for entry in started:
            done = [r for r in pipeline.records(entry["node"]) if r.execution == entry["execution"]]
            if not done:
                run.await_records(len(pipeline.records(entry["node"])) + 1, entry["node"])
        pipeline.wait_settled(timeout=run.seconds(60))
        if not started or not waiting:
            return


def _storm_check(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    faulted: list[str] = run.facts["faulted"]
    instances: dict[str, str] = run.facts["instances"]
    budgets = pipeline.remediation_settings.budgets
    allowed = min(budgets.max_in_flight, budgets.max_per_hour)
    # 1. The storm: the budgets let `allowed` through, the breaker opened, the rest were refused.
    storm: list[RemediationRecord] = run.facts["storm_records"]
    outcomes = Counter(r.outcome for r in storm)
    run.expect(
        outcomes[Outcome.REPLACED] == allowed,
        f"{outcomes[Outcome.REPLACED]} replaced, expected exactly {allowed} (budgets)",
    )
    run.expect(
        outcomes[Outcome.REFUSED] == len(faulted) - allowed,
        f"{outcomes[Outcome.REFUSED]} refused, expected {len(faulted) - allowed}",
    )
    run.expect(len(storm) == len(faulted), f"{len(storm)} records for {len(faulted)} faults")
    breaker: BreakerState = run.facts["breaker"]
    run.expect(breaker.open, "the circuit breaker did not open")
    severities = Counter(m["attributes"].get("severity") for m in run.facts["notifications"])
    run.expect(
        severities["action-required"] == len(faulted) - allowed,
        f"alerts {dict(severities)}: every refused node must be alerted",
    )
    refused = sorted(r.node for r in storm if r.outcome is Outcome.REFUSED)
    for record in storm:
        if record.outcome is Outcome.REFUSED:
            run.expect(
                record.planned_action.value == "replace" and record.action.value == "alert",
                f"{short_node(record.node)} refused as {record.action.value}",
            )
    # 2. The close-only reset and the exporter's resync: no new execution, every resync a duplicate,
    #    and the refused nodes left as they were, schedulable.
    run.expect(
        run.facts["executions_after_close"] == len(storm),
        f"executions grew from {len(storm)} to {run.facts['executions_after_close']} after the "
        "close-only reset: an event was replayed",
    )
    late = run.facts["late_deliveries"]
    run.expect(
        all(d.result.get("status") == "duplicate" for d in late),
        f"after the reset: {[d.result.get('status') for d in late]}",
    )
    run.expect(
        run.facts["records_after_close"] == len(storm), "new ledger records after the close-only reset"
    )
    run.expect(
        sorted(run.facts["left_schedulable"]) == refused,
        f"after the close-only reset {run.facts['left_schedulable']} were schedulable, expected {refused}",
    )
    # 3. The real reset re-evaluated each of them under a -r<N> name, and each was replaced.
    reevaluations: dict[str, str] = run.facts.get("reevaluations", {})
    run.expect(sorted(reevaluations) == refused, f"re-evaluated {sorted(reevaluations)}, expected {refused}")
    outcome_of = {r.execution: r.outcome.value for r in pipeline.records()}
    for execution in sorted(reevaluations.values()):
        found = outcome_of.get(execution, "no record")
        run.expect(found == Outcome.REPLACED.value, f"re-evaluation {execution}: {found}, expected replaced")
    for node in faulted:
        run.expect_replaced(node, instances[node])
    run.expect(
        run.terminate_calls() == len(faulted),
        f"{run.terminate_calls()} EC2 terminations, expected {len(faulted)}",
    )
    run.expect(
        not pipeline.ledger.read_admission_state(pipeline.cluster_name).breaker.open,
        "the circuit breaker opened again",
    )
    run.expect_workload_running()


#: The node monitoring agent's report of the Xid 79 that node-problem-detector reports as
#: :data:`XID_79`: a Fatal finding of its DCGM monitor (``NvidiaXID79Error``) sets
#: AcceleratedHardwareReady=False with the agent's own message, no kernel line.
XID_79_AGENT = Fault(
    "Xid 79 (GPU has fallen off the bus), as the EKS node monitoring agent reports it",
    "AcceleratedHardwareReady",
    "False",
    "NvidiaXID79Error",
    "detected XID-79 on the instance, review kernel logs for additional information.",
)


def _two_detectors_play(run: ScenarioRun) -> None:
    """One GPU falls off the bus and both detectors EKS clusters commonly run report it, each on
    its own condition, within the same second."""
    cluster = run.pipeline.cluster
    node = run.subject = cluster.gpu_nodes[0]
    run.facts["instance"] = cluster.instance_of(node)
    run.inject(node, XID_79)
    run.inject(node, XID_79_AGENT, align=False)
    records = run.await_records(2, node)
    if any(record.action.mutates_instance for record in records):
        run.await_event("workload-running")


def _two_detectors_check(run: ScenarioRun) -> None:
    """Two conditions are two transitions: two executions and two records, and one remediation.
    Whichever admits first replaces the node; the other waits behind its lock and, re-reading the
    live node when it ends, finds it gone (skipped). Only the replacement is notified."""
    pipeline, node = run.pipeline, run.subject
    run.expect_executions(2)
    records = pipeline.records(node)
    outcomes = sorted(r.outcome.value for r in records)
    run.expect(
        outcomes == [Outcome.REPLACED.value, Outcome.SKIPPED.value],
        f"{short_node(node)} outcomes {outcomes}, expected one replaced and one skipped",
    )
    run.expect(
        sorted(r.condition.get("type", "") for r in records)
        == sorted([XID_79.condition_type, XID_79_AGENT.condition_type]),
        f"records of {[r.condition.get('type') for r in records]}, expected one per detector's condition",
    )
    notifications = run.expect_notifications(["info"])
    run.expect_replaced(node, run.facts["instance"])
    run.expect(run.terminate_calls() == 1, f"{run.terminate_calls()} EC2 terminations, expected 1")
    run.expect_lock_free(node)
    run.expect_workload_running()
    # The answer a person asks for, from what happened.
    waited = {
        event.execution
        for event in pipeline.timeline.events("decision")
        if event.text.startswith("waiting behind another remediation")
    }
    lines = [
        f"two detectors, one fault: {len(pipeline.executions())} executions, {len(records)} ledger "
        f"records, {len(notifications)} notification(s)"
    ]
    for record in sorted(records, key=lambda r: r.finished_at):
        condition = str(record.condition.get("type", ""))
        behind = "waited behind the other execution, then " if record.execution in waited else ""
        detector = detector_of(condition).value
        lines.append(f"  {condition} ({detector}): {behind}{record.outcome.value} - {record.summary}")
    lines += [f"  notification: {message['subject']}" for message in notifications]
    run.expected = "\n".join(lines)


def _duplicates_play(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    node = run.subject = pipeline.cluster.gpu_nodes[0]
    run.facts["instance"] = pipeline.cluster.instance_of(node)
    run.inject(node, XID_79)
    run.await_event("started", node=node)
    run.facts["running_at_restart"] = pipeline.running_executions()
    pipeline.restart_exporter()
    original = next(
        p for p in pipeline.publications if p.detail["node"]["name"] == node and not p.detail.get("resync")
    )
    for _ in range(20):
        pipeline.aws.put_events(original.entry)
    pipeline.timeline.emit(
        "sim", "redelivered", f"the exporter's event for {short_node(node)} put on the bus 20 more times"
    )
    run.await_records(1, node)
    run.await_event("workload-running")


def _duplicates_check(run: ScenarioRun) -> None:
    pipeline, node = run.pipeline, run.subject
    run.expect(run.facts["running_at_restart"] == 1, "the exporter was not restarted while the execution ran")
    run.expect_outcome(run.only_record(node), Outcome.REPLACED)
    run.expect_executions(1)
    statuses = Counter(d.result.get("status") for d in pipeline.condition_deliveries())
    run.expect(
        statuses["started"] == 1 and statuses["duplicate"] >= 21,
        f"deliveries {dict(statuses)}: expected 1 started and >= 21 duplicates",
    )
    run.expect(run.terminate_calls() == 1, f"{run.terminate_calls()} EC2 terminations, expected 1")
    run.expect_replaced(node, run.facts["instance"])


def _forged_play(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    node = run.subject = pipeline.cluster.gpu_nodes[1]
    run.facts["instance"] = pipeline.cluster.instance_of(node)
    detail = pipeline.event_detail(node, XID_79.condition_type)
    detail["condition"].update(status=XID_79.status, reason=XID_79.reason, message=XID_79.message)
    pipeline.timeline.mark_origin()
    pipeline.timeline.emit(
        "sim", "forged", f"a forged Xid 79 event for healthy {short_node(node)} put on the bus"
    )
    pipeline.publish(detail)
    run.await_records(1, node)


def _forged_check(run: ScenarioRun) -> None:
    node = run.subject
    record = run.only_record(node)
    run.expect_outcome(record, Outcome.SKIPPED)
    if record is not None:
        run.expect("no longer bad" in record.summary, f"record does not say why: {record.summary}")
    run.expect_untouched(node, run.facts["instance"])
    run.expect_executions(1)


def _bad_events_play(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    node = run.subject = pipeline.cluster.gpu_nodes[0]
    run.facts["instance"] = pipeline.cluster.instance_of(node)
    timeline = pipeline.timeline
    timeline.mark_origin()

    def bad(**kwargs: Any) -> dict[str, Any]:
        detail = pipeline.event_detail(node, XID_79.condition_type, **kwargs)
        detail["condition"].update(status=XID_79.status, reason=XID_79.reason, message=XID_79.message)
        return detail

    foreign = bad(cluster="someone-elses-cluster")
    # Sent as that cluster's own exporter would (its own Source), so only the cluster is foreign.
    foreign_source = cluster_source(pipeline.event_source_prefix, "someone-elses-cluster")
    timeline.emit("sim", "published", "an event for cluster someone-elses-cluster put on the bus")
    pipeline.publish(foreign, source=foreign_source)
    stale = bad(observed_at=utc_now() - timedelta(hours=2))
    timeline.emit("sim", "published", "an event observed 2 hours ago put on the bus")
    pipeline.publish(stale)
    malformed = {"cluster": pipeline.cluster_name, "condition": {"type": "GPUProblem", "status": "True"}}
    timeline.emit("sim", "published", "a malformed event (no node, no schemaVersion) put on the bus")
    pipeline.publish(malformed)
    wait_until(
        lambda: len(pipeline.condition_deliveries()) >= 2 and pipeline.pump.idle(),
        timeout=run.seconds(30),
        what="the rule's deliveries",
    )
    run.facts["matched"] = [d.envelope["detail"].get("cluster") for d in pipeline.condition_deliveries()]
    if pipeline.cluster_name in run.facts["matched"] and "someone-elses-cluster" not in run.facts["matched"]:
        timeline.emit(
            "eventbridge",
            "not-matched",
            "rule did not match the foreign cluster's event (its pattern lists this deployment's clusters)",
        )
    # An archive replay through a broader rule, or a rule edited by hand, would still hand it to
    # ingest: the function must refuse it on its own.
    timeline.emit("sim", "replayed", "the foreign event delivered straight to ingest (as a replay would)")
    pipeline.aws.deliver(pipeline.aws.event_envelope(foreign, source=foreign_source))
    wait_until(
        lambda: len(pipeline.dropped_events()) >= 3, timeout=run.seconds(30), what="3 dropped-event records"
    )


def _bad_events_check(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    run.expect(
        "someone-elses-cluster" not in run.facts["matched"], "the rule forwarded an event for another cluster"
    )
    dropped = pipeline.dropped_events()
    categories = sorted(d.category for d in dropped)
    run.expect(categories == ["foreign-cluster", "malformed", "stale"], f"dropped categories {categories}")
    for record in dropped:
        run.expect(
            bool(record.reason) and bool(record.excerpt),
            f"dropped {record.category} record lacks a reason or excerpt",
        )
    run.expect_executions(0)
    run.expect(pipeline.records() == [], "a remediation was recorded for a dropped event")
    run.expect_untouched(run.subject, run.facts["instance"])


def _node_deleted_play(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    node = run.subject = pipeline.cluster.gpu_nodes[0]
    run.facts["instance"] = pipeline.cluster.instance_of(node)
    deleted: list[str] = []

    def delete_node(pod: Mapping[str, Any]) -> None:
        if not deleted and pod.get("spec", {}).get("nodeName") == node:
            deleted.append(node)
            pipeline.store.remove("nodes", node)
            pipeline.timeline.emit(
                "sim",
                "node-deleted",
                f"someone deleted Node {short_node(node)} mid-drain (kubectl delete node)",
                node=node,
            )

    pipeline.store.on("pod_evicted", delete_node)
    run.inject(node, XID_79)
    run.await_records(1, node)


def _node_deleted_check(run: ScenarioRun) -> None:
    node = run.subject
    record = run.only_record(node)
    run.expect_outcome(record, Outcome.SKIPPED)
    if record is not None:
        run.expect("deleted" in record.summary, f"record does not say the node was deleted: {record.summary}")
    # Never terminate an instance the live cluster can no longer vouch for.
    run.expect_instance(run.facts["instance"], gone=False)
    run.expect(run.terminate_calls() == 0, "an instance was terminated for a deleted node")
    run.expect_lock_free(node)
    run.expect_executions(1)


def _instance_gone_play(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    node = run.subject = pipeline.cluster.gpu_nodes[0]
    instance = run.facts["instance"] = pipeline.cluster.instance_of(node)
    with pipeline.cluster.karpenter.paused():
        pipeline.timeline.mark_origin()
        pipeline.aws.client("ec2").terminate_instances(InstanceIds=[instance])
        pipeline.timeline.emit(
            "sim",
            "terminated",
            f"{instance} terminated outside NodeHeal (Karpenter has not reacted yet)",
            node=node,
        )
        run.inject(node, XID_79)
        run.await_records(1, node)
    run.await_event("workload-running")


def _instance_gone_check(run: ScenarioRun) -> None:
    node = run.subject
    record = run.only_record(node)
    run.expect_outcome(record, Outcome.REPLACED)
    if record is not None:
        run.expect(
            "already gone" in record.summary, f"record does not say the instance was gone: {record.summary}"
        )
    run.expect_replaced(node, run.facts["instance"])
    run.expect_lock_free(node)
    run.expect_workload_running()


def _outage_seconds(run: ScenarioRun) -> float:
    """Longer than every retry the deployed state machine makes of a transient API error."""
    retry = run.pipeline.remediation_settings.retry
    return sum(retry.interval_seconds * retry.backoff_rate**i for i in range(retry.max_attempts)) + 3.0


def _api_outage_play(run: ScenarioRun) -> None:
    pipeline = run.pipeline
    cluster = pipeline.cluster
    faults = pipeline.server.faults
    first, second = cluster.gpu_nodes[0], cluster.gpu_nodes[1]
    run.subject = first
    run.facts.update(
        first=first,
        second=second,
        first_instance=cluster.instance_of(first),
        second_instance=cluster.instance_of(second),
    )
    # 1. The API server answers 500 to everyone for a while and the exporter's watch breaks; the
    #    fault lands meanwhile. The exporter must catch up once the server is back.
    align_to_second()
    pipeline.timeline.mark_origin()
    faults.fail_for(1.5, status=500)
    faults.drop_watches()
    pipeline.timeline.emit(
        "sim", "outage", "API server answers 500 to every request for 1.5s; open watches dropped"
    )
    run.inject(first, XID_79, align=False)
    run.await_records(1, first)
    run.await_event("workload-running")
    pipeline.wait_settled(timeout=run.seconds(60))
    # 2. The API server fails again right after the cordon, longer than the workflow retries:
    #    the remediation must end recorded, the node cordoned, the lock released.
    outage = _outage_seconds(run)

    def outage_after_cordon(invocation: Invocation) -> None:
        payload = invocation.payload if isinstance(invocation.payload, Mapping) else {}
        target = ((payload.get("event") or {}).get("node") or {}).get("name")
        if (
            invocation.handler == "lambdas.cordon.handler"
            and target == second
            and not run.facts.get("outage")
        ):
            run.facts["outage"] = True
            faults.fail_for(outage, status=500, path="/pods")
            pipeline.timeline.emit(
                "sim", "outage", f"API server answers 500 to every pod request for {outage:.0f}s", node=second
            )

    pipeline.aws.on_invocation.append(outage_after_cordon)
    run.inject(second, XID_79)
    run.await_records(1, second, timeout=outage + 60)
    faults.clear()


def _api_outage_check(run: ScenarioRun) -> None:
    first, second = run.facts["first"], run.facts["second"]
    run.expect_outcome(run.only_record(first), Outcome.REPLACED)
    run.expect_replaced(first, run.facts["first_instance"])
    record = run.only_record(second)
    run.expect_outcome(record, Outcome.FAILED)
    if record is not None:
        run.expect(record.error == "KubernetesApiUnavailableError", f"failure recorded as {record.error}")
    run.expect_cordoned(second)
    run.expect_instance(run.facts["second_instance"], gone=False)
    run.expect_lock_free(second)
    run.expect_notifications(["action-required", "info"])


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "xid79",
            "Xid 79 (GPU fallen off the bus) -> cordon, drain, terminate, Karpenter replaces",
            _replace_play(XID_79),
            _xid79_check,
        ),
        # A fault decided none as a real detector writes it: NPD's shipped config makes an
        # application Xid such as 13 a Node Event only, so it never starts a remediation; the node
        # monitoring agent sets AcceleratedHardwareReady=False for Xid 63, which NodeHeal records.
        Scenario(
            "xid63",
            "Xid 63 (row remapping event, from the node monitoring agent) -> recorded, nothing touched",
            _no_action_play(XID_63),
            _untouched_check(Outcome.RECORDED, []),
        ),
        Scenario(
            "dcgm",
            "DCGMError (the monitor failed, not the GPU) -> alert only",
            _no_action_play(DCGM_ERROR),
            _untouched_check(Outcome.ALERTED, ["action-required"]),
        ),
        Scenario(
            "xid48", "Xid 48 (double-bit ECC) -> reboot, recovers, uncordoned", _xid48_play, _xid48_check
        ),
        Scenario(
            "gateway-unreachable",
            "default gateway unreachable (NPD check_gateway.sh) -> confirmed, cordon, drain, terminate, "
            "Karpenter replaces",
            _replace_play(GATEWAY_UNREACHABLE),
            _gateway_check,
            context={
                "policy": {
                    "conditionRules": {
                        "GatewayUnreachable": {
                            "action": "replace",
                            "confirmSeconds": GATEWAY_DEMO_CONFIRM_SECONDS,
                        }
                    }
                }
            },
        ),
        Scenario(
            "xid48-repeat",
            "Xid 48, rebooted, faults again within 24h -> escalated to replace",
            _xid48_repeat_play,
            _xid48_repeat_check,
        ),
        Scenario(
            "pdb-force",
            "a PDB blocks the drain -> bounded wait, then force (drain.onTimeout=force)",
            _pdb_play,
            _pdb_force_check,
        ),
        Scenario(
            "pdb-abort",
            "a PDB blocks the drain -> bounded wait, then abort: node stays cordoned, alert",
            _pdb_play_abort,
            _pdb_abort_check,
            context={"drain": {"onTimeout": "abort"}},
        ),
        Scenario(
            "do-not-disrupt",
            "a karpenter.sh/do-not-disrupt notebook -> held back as configured, then evicted",
            _do_not_disrupt_play,
            _do_not_disrupt_check,
            context={"drain": {"doNotDisruptWaitSeconds": 2}},
        ),
        Scenario(
            "flapping",
            "bad/good/bad within a second -> one remediation; bad/good -> none",
            _flapping_play,
            _flapping_check,
        ),
        Scenario(
            "storm",
            "40% of GPU nodes fault at once -> budgets hold, breaker opens; a close-only reset "
            "replays nothing, the real reset re-evaluates the rest",
            _storm_play,
            _storm_check,
            # Room within the hour for every faulted node, so the real reset can heal them all;
            # maxInFlight alone trips the breaker.
            context={"budgets": {"maxInFlight": 2, "maxPerHour": 6}},
            layout=ClusterLayout(gpu_nodes=15),
        ),
        Scenario(
            "two-detectors",
            "NPD and the node monitoring agent both report one Xid 79 -> two executions, one "
            "replaces, the other finds the node gone; one notification",
            _two_detectors_play,
            _two_detectors_check,
        ),
        Scenario(
            "duplicates",
            "the same event 20 more times and an exporter restart mid-flow -> one remediation",
            _duplicates_play,
            _duplicates_check,
        ),
        Scenario(
            "forged",
            "a forged event for a healthy node -> refused by the live re-check, recorded",
            _forged_play,
            _forged_check,
        ),
        Scenario(
            "bad-events",
            "events for another cluster, stale, malformed -> dropped with a record",
            _bad_events_play,
            _bad_events_check,
        ),
        Scenario(
            "node-deleted",
            "the Node is deleted mid-drain -> skipped, instance left alone",
            _node_deleted_play,
            _node_deleted_check,
        ),
        Scenario(
            "instance-gone",
            "the instance is already terminated -> success, Karpenter replaces",
            _instance_gone_play,
            _instance_gone_check,
        ),
        Scenario(
            "api-outage",
            "API server 500s: the exporter catches up; mid-drain the workflow fails cleanly",
            _api_outage_play,
            _api_outage_check,
        ),
    )
}


def describe(records: list[RemediationRecord]) -> str:
    """``replaced x2, refused x4`` for a summary line."""
    counts = Counter(r.outcome.value for r in records)
    return (
        ", ".join(f"{outcome} x{n}" if n > 1 else outcome for outcome, n in sorted(counts.items()))
        or "no remediation records"
    )
