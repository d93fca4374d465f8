"""The issue's scenario list, each a full run: fault on a simulated Node -> real exporter -> moto bus
and rule -> ingest -> state machine -> cluster, EC2, ledger. ``run.problems`` holds every mismatch
the scenario's own check found; the assertions below add what each test is specifically about."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from nodeheal.actions import Action
from nodeheal.commands.demo import CliOperator
from nodeheal.kube_views import ANNOTATION_EXECUTION
from nodeheal.sim.local_pipeline.scenarios.play import ScenarioRun, task_outputs
from nodeheal.sim.local_pipeline.scenarios.scenario_index import SCENARIOS
from nodeheal.sim.local_pipeline.wiring import LocalPipeline
from nodeheal.sim.stack.process_templates import synthesized
from nodeheal.sim.timeline import short_node
from nodeheal.workflow.records import Outcome

pytestmark = pytest.mark.slow


def kinds_in_order(run: ScenarioRun) -> list[str]:
    """Kinds by when they happened (the timeline lists them as their threads reported them: the rule
    can report an event matched before the exporter's PutEvents call has returned)."""
    return [event.kind for event in sorted(run.pipeline.timeline.events(), key=lambda event: event.at)]


def test_xid_79_travels_the_whole_pipeline_and_the_node_is_replaced(play) -> None:
    run = play("xid79")

    assert run.problems == []
    kinds = kinds_in_order(run)
    path = [
        "fault",
        "transition",
        "published",
        "matched",
        "started",
        "decision",
        "cordoned",
        "drained",
        "terminated",
    ]
    positions = [kinds.index(kind) for kind in path]
    assert positions == sorted(positions), kinds
    # After the terminate call two things run at once: the workflow records the outcome, and
    # Karpenter brings up a replacement for the pods. Each follows the terminate; neither waits for
    # the other, so on a busy machine the new node can be Ready before the record is written.
    terminated = kinds.index("terminated")
    assert terminated < kinds.index("recorded"), kinds
    assert terminated < kinds.index("node-ready") < kinds.index("workload-running"), kinds
    record = run.pipeline.records(run.subject)[0]
    assert record.execution.startswith(f"training-on-eks-{short_node(run.subject)}-GPUProblem-")
    for stage in ("published", "ingested", "started", "admitted", "cordoned", "drained", "instanceAction"):
        assert stage in record.stage_seconds, stage
    assert record.stage_seconds["faultToCordon"] <= record.stage_seconds["faultToInstanceAction"] < 30
    states = run.pipeline.state_names(record.execution)
    assert states[:3] == ["Load settings", "Admit", "Admitted?"]
    assert "Terminate instance" in states and "Reboot instance" not in states
    # The event that started it came through the rule, not a direct call.
    deliveries = run.pipeline.condition_deliveries()
    assert [d.result["status"] for d in deliveries] == ["started"]
    assert deliveries[0].envelope["source"] == run.pipeline.event_source


def test_xid_79_replaced_through_karpenter_deletes_the_nodeclaim() -> None:
    """replace.method delete-nodeclaim in the whole pipeline: NodeHeal deletes the NodeClaim, the
    simulated Karpenter's finalizer terminates the instance, removes Node and NodeClaim and brings
    up a replacement with a NodeClaim of its own."""
    scenario = SCENARIOS["xid79"]
    context = {**scenario.context, "replace": {"method": "delete-nodeclaim"}}
    with LocalPipeline(synthesized(context), layout=scenario.layout) as pipeline:
        claims_before = {
            claim["status"]["nodeName"]: claim["metadata"]["name"]
            for claim in pipeline.store.list_objects("nodeclaims")[0]
        }
        run = scenario.run(pipeline)

        assert run.problems == []
        kinds = kinds_in_order(run)
        assert kinds.index("drained") < kinds.index("nodeclaim-deleting") < kinds.index("node-deleted")
        assert kinds.index("nodeclaim-deleting") < kinds.index("node-ready") < kinds.index("workload-running")
        record = pipeline.records(run.subject)[0]
        assert record.outcome is Outcome.REPLACED
        assert f"NodeClaim {claims_before[run.subject]} deleted" in record.summary
        claims_after = {
            claim["status"]["nodeName"]: claim["metadata"]["name"]
            for claim in pipeline.store.list_objects("nodeclaims")[0]
        }
        assert run.subject not in claims_after
        assert len(claims_after) == len(claims_before)


def test_xid_63_touches_nothing(play) -> None:
    run = play("xid63")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    assert record.outcome is Outcome.RECORDED and record.xid == 63 and record.action.value == "none"
    assert "Cordon" not in run.pipeline.state_names(record.execution)


def test_dcgm_error_alerts_and_touches_nothing(play) -> None:
    run = play("dcgm")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    assert record.action.value == "alert" and record.condition["reason"] == "DCGMError"


def test_xid_48_reboots_recovers_and_uncordons(play) -> None:
    run = play("xid48")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    assert record.outcome is Outcome.REBOOTED
    assert {"instanceAction", "recovered", "uncordoned"} <= set(record.stage_seconds)
    states = run.pipeline.state_names(record.execution)
    assert "Reboot instance" in states and "Uncordon" in states and "Terminate instance" not in states
    node = run.pipeline.cluster.node(run.subject)
    assert node is not None and ANNOTATION_EXECUTION not in node["metadata"].get("annotations", {})
    # The evicted worker came back onto the same, healed node.
    assert any(p["metadata"]["namespace"] == "training" for p in run.pipeline.cluster.pods_on(run.subject))


def test_xid_48_again_after_the_reboot_escalates_to_replace(play) -> None:
    run = play("xid48-repeat")

    assert run.problems == []
    first, second = run.pipeline.records(run.subject)
    assert first.execution != second.execution
    assert second.planned_action.value == "reboot" and second.action.value == "replace" and second.escalated


def test_pdb_blocked_drain_waits_its_bound_then_forces(play) -> None:
    run = play("pdb-force")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    rounds = task_outputs(run, record.execution, "Evict pods")
    assert len(rounds) >= 2 and all(r["drain"]["lastBlocked"] for r in rounds[:-1])
    assert rounds[-1]["drain"]["timedOut"] is True


def test_pdb_blocked_drain_aborts_when_configured(play) -> None:
    run = play("pdb-abort")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    assert record.error == "DrainAbortedError"
    states = run.pipeline.state_names(record.execution)
    assert (
        "Drain aborted" in states
        and "Terminate instance" not in states
        and states[-1] == "Remediation failed"
    )


def test_do_not_disrupt_pod_is_held_back_for_the_configured_wait(play) -> None:
    run = play("do-not-disrupt")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    held = [r["drain"]["heldBackDoNotDisrupt"] for r in task_outputs(run, record.execution, "Evict pods")]
    assert held[0] == 1 and held[-1] == 0  # held while waiting, then let go


def test_flapping_condition_remediates_at_most_once(play) -> None:
    run = play("flapping")

    assert run.problems == []
    cleared = run.pipeline.records(run.facts["cleared"])
    assert cleared and all("no longer bad" in r.summary for r in cleared)
    flapping = run.pipeline.records(run.facts["flapping"])
    assert Counter(r.outcome for r in flapping) == {Outcome.SKIPPED: 1, Outcome.REPLACED: 1}
    assert len({r.execution for r in flapping}) == 2  # two transitions, two names, one remediation


def test_storm_budgets_hold_breaker_opens_nothing_is_replayed_and_the_real_reset_heals_the_rest(
    tmp_path: Path,
) -> None:
    scenario = SCENARIOS["storm"]
    with LocalPipeline(synthesized(scenario.context), layout=scenario.layout) as pipeline:
        run = scenario.run(pipeline, operator=CliOperator(pipeline, tmp_path))

        assert run.problems == []
        faulted: list[str] = run.facts["faulted"]
        assert len(faulted) == 6  # 40% of the 15 GPU nodes
        records = run.pipeline.records()
        refused = [r for r in records if r.outcome is Outcome.REFUSED]
        assert any("circuit breaker is open" in r.reason for r in refused)
        assert any("budget:" in r.reason for r in refused)
        # The close-only reset replayed nothing and left the refused nodes schedulable on dead GPUs;
        # the timeline says so, and that the real reset re-evaluates them.
        left = run.facts["left_schedulable"]
        assert sorted(left) == sorted(r.node for r in refused) and len(left) == 4
        texts = list(run.pipeline.timeline_texts())
        assert any(t.startswith("4 node(s) still have GPUProblem=True and stay schedulable") for t in texts)
        assert any("nodeheal breaker reset --cluster training-on-eks" in t for t in texts)
        # The real reset's -r<N> executions handled all four: every faulted node was replaced.
        reevaluated = {r.node: r for r in records if r.execution in run.facts["reevaluations"].values()}
        assert sorted(reevaluated) == sorted(left)
        assert all(r.outcome is Outcome.REPLACED for r in reevaluated.values())
        assert all(re.search(r"-r\d+$", name) for name in run.facts["reevaluations"].values())
        started = [t for t in texts if t.startswith("re-evaluation started: ")]
        assert len(started) == 4
        # Six nodes at once: every line about one of them names it and the instance behind the name.
        instances: dict[str, str] = run.facts["instances"]
        about_faulted = [e for e in run.pipeline.timeline.events() if e.node in instances]
        assert {e.node for e in about_faulted} == set(instances)
        assert all(e.instance == instances[e.node] for e in about_faulted), [
            (e.kind, e.node, e.instance) for e in about_faulted if e.instance != instances[e.node]
        ]
        launched = run.pipeline.timeline.events("instance-launched")
        assert launched and all(e.instance and not e.node for e in launched)


def test_two_detectors_one_fault_one_replacement_one_notification(play) -> None:
    """NPD and the node monitoring agent both report one Xid 79: each condition is its own
    transition, so two executions and two records; one replaces the node, the other waits behind
    its lock and finds the node gone; one notification, about the replacement."""
    run = play("two-detectors")

    assert run.problems == []
    records = run.pipeline.records(run.subject)
    by_condition = {r.condition["type"]: r for r in records}
    assert set(by_condition) == {"GPUProblem", "AcceleratedHardwareReady"}
    assert sorted(r.outcome.value for r in records) == ["replaced", "skipped"]
    assert all(r.xid == 79 for r in records if r.outcome is Outcome.REPLACED)
    (skipped,) = [r for r in records if r.outcome is Outcome.SKIPPED]
    assert "no longer exists" in skipped.summary
    # The one that was skipped had waited behind the other's lock before it looked again.
    waited = [
        e
        for e in run.pipeline.timeline.events("decision")
        if e.execution == skipped.execution and e.text.startswith("waiting behind another remediation")
    ]
    assert waited, [(e.text, e.execution) for e in run.pipeline.timeline.events("decision")]
    assert run.terminate_calls() == 1
    assert run.expected.startswith("two detectors, one fault: 2 executions, 2 ledger records")
    assert "1 notification" in run.expected


def test_a_subscriber_of_the_topic_reads_each_notification_as_sns_delivered_it() -> None:
    scenario = SCENARIOS["dcgm"]
    with LocalPipeline(
        synthesized(scenario.context), layout=scenario.layout, read_notifications=True
    ) as pipeline:
        run = ScenarioRun(pipeline)
        scenario.play(run)
        pipeline.wait_settled()
        # The probe, another subscriber of the same topic, got the very same message.
        probe = pipeline.aws.notifications()
        received = pipeline.notifications
        assert [(n.subject, n.message, dict(n.attributes)) for n in received] == [
            (m["subject"], m["message"], m["attributes"]) for m in probe
        ]
        (notification,) = received
        record = pipeline.records(run.subject)[0]
        assert notification.subject.startswith(f"NodeHeal alerted: {run.subject} (training-on-eks) ")
        assert notification.attributes["severity"] == "action-required"
        assert f"Execution: {record.execution}" in notification.message.splitlines()
        (line,) = pipeline.timeline.events("notified")
        assert (line.source, line.node, line.instance) == ("sns", run.subject, run.facts["instance"])
        assert line.text == f"notification (action-required): {notification.subject}"


def test_same_event_twenty_times_and_exporter_restart_make_one_remediation(play) -> None:
    run = play("duplicates")

    assert run.problems == []
    duplicates = [d for d in run.pipeline.condition_deliveries() if d.result.get("status") == "duplicate"]
    assert {d.result["execution"] for d in duplicates} == {run.pipeline.records(run.subject)[0].execution}
    assert any(p.detail.get("resync") for p in run.pipeline.publications), (
        "the restarted exporter re-sent nothing"
    )


def test_forged_event_for_a_healthy_node_is_refused_by_the_live_check(play) -> None:
    run = play("forged")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    assert record.stage_seconds.get("admitted") is not None
    assert run.pipeline.state_names(record.execution)[-2:] == ["Record outcome", "Done"]


def test_foreign_stale_and_malformed_events_are_dropped_with_a_record(play) -> None:
    run = play("bad-events")

    assert run.problems == []
    by_category = {d.category: d for d in run.pipeline.dropped_events()}
    assert "someone-elses-cluster" in by_category["foreign-cluster"].reason
    assert "older than" in by_category["stale"].reason
    assert "invalid event" in by_category["malformed"].reason


def test_node_deleted_mid_flow_leaves_nothing_half_done(play) -> None:
    run = play("node-deleted")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    assert record.outcome is Outcome.SKIPPED and record.summary.startswith("node gone")
    assert task_outputs(run, record.execution, "Terminate instance") == []


def test_instance_already_gone_counts_as_replaced(play) -> None:
    run = play("instance-gone")

    assert run.problems == []
    record = run.pipeline.records(run.subject)[0]
    assert record.stage_seconds.get("instanceAction") is not None


def test_api_server_outage_is_ridden_out_by_the_exporter_and_fails_the_workflow_cleanly(play) -> None:
    run = play("api-outage")

    assert run.problems == []
    failed = run.pipeline.records(run.facts["second"])[0]
    states = run.pipeline.state_names(failed.execution)
    assert states[-2:] == ["Record failure", "Remediation failed"]
    arn = next(e["executionArn"] for e in run.pipeline.executions() if e["name"] == failed.execution)
    failures = [e for e in run.pipeline.aws.history(arn) if e["type"] == "LambdaFunctionFailed"]
    retry = run.pipeline.remediation_settings.retry
    assert len(failures) == retry.max_attempts + 1  # the first try and every retry, then caught
    assert "node left cordoned for a person" in failed.summary
    # The first fault landed while the API server was down; the exporter still published it.
    first = run.facts["first"]
    assert any(
        p.detail["node"]["name"] == first and p.detail["condition"]["status"] == "True"
        for p in run.pipeline.publications
    )


def test_a_gateway_unreachable_goes_from_the_condition_to_its_decision(play) -> None:
    """A network fault NodeHeal's NPD plugin reports: GatewayUnreachable, decided by its condition
    rule after its confirmation: the shipped default alerts and leaves the node as it is."""
    run = play("gateway-unreachable")

    assert run.problems == []
    kinds = kinds_in_order(run)
    path = ["fault", "transition", "published", "matched", "started", "decision", "recorded"]
    positions = [kinds.index(kind) for kind in path]
    assert positions == sorted(positions), kinds
    assert "cordoned" not in kinds and "terminated" not in kinds, kinds
    (record,) = run.pipeline.records(run.subject)
    assert record.planned_action is Action.ALERT and record.outcome is Outcome.ALERTED
    assert record.execution.startswith(f"training-on-eks-{short_node(run.subject)}-GatewayUnreachable-")
    assert "GatewayUnreachable=True (reason GatewayNotAnswering)" in record.reason
    assert "once it has stayed bad for 5 s" in record.reason
