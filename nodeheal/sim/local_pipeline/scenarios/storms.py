"""Many signals at once: a flapping condition, a storm of faults that opens the circuit breaker,
and one fault seen by two detectors."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from nodeheal.kube_views import UNHEALTHY_TAINT_KEY
from nodeheal.sim.cluster.layout import ClusterLayout
from nodeheal.sim.cluster.simulated_cluster import (
    XID_79,
    Fault,
)
from nodeheal.sim.detectors import detector_of
from nodeheal.sim.local_pipeline.scenarios.play import (
    Scenario,
    ScenarioRun,
    ScenarioTimeoutError,
    taint_keys,
)
from nodeheal.sim.local_pipeline.wiring import (
    align_to_second,
    wait_until,
)
from nodeheal.sim.timeline import short_node
from nodeheal.workflow.budget import BreakerState
from nodeheal.workflow.records import Outcome, RemediationRecord


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


STORMS_SCENARIOS: tuple[Scenario, ...] = (
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
)
