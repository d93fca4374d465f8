"""How a scenario of the local pipeline is played: the run it acts on (the pipeline, the subject
node, the expectations it collects), the scenario itself (a stimulus and a check), and a summary
of records for a printed line. The scenarios are in the modules beside this one, one per family;
:mod:`nodeheal.sim.local_pipeline.scenarios.scenario_index` lists them all."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodeheal.kube_views import UNHEALTHY_TAINT_KEY
from nodeheal.sim.cluster.layout import ClusterLayout
from nodeheal.sim.cluster.simulated_cluster import (
    Fault,
)
from nodeheal.sim.local_aws import iter_task_results
from nodeheal.sim.local_pipeline.wiring import (
    LocalPipeline,
    PipelineStoppedError,
    align_to_second,
)
from nodeheal.sim.timeline import short_node
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


def describe(records: list[RemediationRecord]) -> str:
    """``replaced x2, refused x4`` for a summary line."""
    counts = Counter(r.outcome.value for r in records)
    return (
        ", ".join(f"{outcome} x{n}" if n > 1 else outcome for outcome, n in sorted(counts.items()))
        or "no remediation records"
    )
