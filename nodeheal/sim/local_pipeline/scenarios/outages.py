"""The world changing under a remediation: the Node deleted, the instance gone, the API server
failing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeheal.sim.cluster.simulated_cluster import (
    XID_79,
)
from nodeheal.sim.local_aws import Invocation
from nodeheal.sim.local_pipeline.scenarios.play import (
    Scenario,
    ScenarioRun,
)
from nodeheal.sim.local_pipeline.wiring import (
    align_to_second,
)
from nodeheal.sim.timeline import short_node
from nodeheal.workflow.records import Outcome


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


OUTAGES_SCENARIOS: tuple[Scenario, ...] = (
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
