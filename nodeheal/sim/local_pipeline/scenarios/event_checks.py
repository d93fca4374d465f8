"""Events that must start nothing: duplicate deliveries, forged sources, and stale, future-dated
or malformed events."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from nodeheal.events import cluster_source
from nodeheal.sim.cluster.simulated_cluster import (
    XID_79,
)
from nodeheal.sim.local_pipeline.scenarios.play import (
    Scenario,
    ScenarioRun,
)
from nodeheal.sim.local_pipeline.wiring import (
    wait_until,
)
from nodeheal.sim.timeline import short_node
from nodeheal.timestamps import utc_now
from nodeheal.workflow.records import Outcome


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


EVENT_CHECKS_SCENARIOS: tuple[Scenario, ...] = (
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
)
