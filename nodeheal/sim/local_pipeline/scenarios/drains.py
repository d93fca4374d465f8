"""Drains that cannot finish: a PodDisruptionBudget that blocks them (forced or aborted at the
timeout) and pods that ask not to be disrupted."""

from __future__ import annotations

from nodeheal.sim.cluster.simulated_cluster import (
    NOTEBOOK_NAMESPACE,
    XID_79,
)
from nodeheal.sim.local_pipeline.scenarios.gpu_faults import no_action_play, replace_play
from nodeheal.sim.local_pipeline.scenarios.play import (
    Scenario,
    ScenarioRun,
    task_outputs,
)
from nodeheal.workflow.records import Outcome


def _pdb_play(run: ScenarioRun) -> None:
    run.pipeline.cluster.block_drains()
    replace_play(XID_79)(run)


def _pdb_play_abort(run: ScenarioRun) -> None:
    run.pipeline.cluster.block_drains()
    no_action_play(XID_79)(run)


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


DRAINS_SCENARIOS: tuple[Scenario, ...] = (
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
)
