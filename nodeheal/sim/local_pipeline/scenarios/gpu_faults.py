"""One GPU fault as a detector reports it, and the decision and outcome it must get: a replacement,
a reboot that recovers, an escalation, or a record or an alert that touches nothing."""

from __future__ import annotations

from collections.abc import Callable

from nodeheal.actions import Action
from nodeheal.policy.classify import DEFAULT_CONDITION_RULES
from nodeheal.sim.cluster.simulated_cluster import (
    DCGM_ERROR,
    GATEWAY_UNREACHABLE,
    XID_48,
    XID_63,
    XID_79,
    Fault,
)
from nodeheal.sim.local_pipeline.scenarios.play import (
    Scenario,
    ScenarioRun,
)
from nodeheal.sim.timeline import short_node
from nodeheal.workflow.records import Outcome


def replace_play(fault: Fault) -> Callable[[ScenarioRun], None]:
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
#: not a page) is what a deployment waits; the demo shows the same path in seconds.
GATEWAY_DEMO_CONFIRM_SECONDS = 5
#: The shipped decision for GatewayUnreachable (alert: ICMP to the gateway failing on one node is
#: a person's call; nodeheal/policy/classify.py says why), which the demo plays unchanged.
GATEWAY_ACTION = DEFAULT_CONDITION_RULES["GatewayUnreachable"].action


def _gateway_check(run: ScenarioRun) -> None:
    """From the condition to its decision: the gateway rule of the policy, confirmed, then alert."""
    node, instance = run.subject, run.facts["instance"]
    record = run.only_record(node)
    run.expect_executions(1)
    if record is None:
        return
    outcome, severities = _UNDRAINED[GATEWAY_ACTION]
    run.expected = (
        "expected for a gateway that stays unreachable: the condition confirmed for "
        f"{GATEWAY_DEMO_CONFIRM_SECONDS} s, then {GATEWAY_ACTION.value}: outcome {outcome.value}, the "
        "node untouched, its pods left in place, the instance running"
    )
    run.expect(
        record.signal == "condition:GatewayUnreachable",
        f"decided by {record.signal!r}, expected the GatewayUnreachable condition rule",
    )
    run.expect(record.xid is None, f"record has xid {record.xid}")
    run.expect(
        record.planned_action is GATEWAY_ACTION,
        f"planned {record.planned_action.value}, expected {GATEWAY_ACTION.value}",
    )
    run.expect_outcome(record, outcome)
    run.expect_untouched(node, instance)
    pods = sorted(p["metadata"]["name"] for p in run.pipeline.cluster.pods_on(node))
    run.expect(
        pods == run.facts["pods"], f"pods on {short_node(node)} changed: {run.facts['pods']} -> {pods}"
    )
    run.expect_workload_running()
    run.expect_notifications(severities)


def no_action_play(fault: Fault) -> Callable[[ScenarioRun], None]:
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


GPU_FAULTS_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "xid79",
        "Xid 79 (GPU fallen off the bus) -> cordon, drain, terminate, Karpenter replaces",
        replace_play(XID_79),
        _xid79_check,
    ),
    # A fault decided none as a real detector writes it: NPD's shipped config makes an
    # application Xid such as 13 a Node Event only, so it never starts a remediation; the node
    # monitoring agent sets AcceleratedHardwareReady=False for Xid 63, which NodeHeal records.
    Scenario(
        "xid63",
        "Xid 63 (row remapping event, from the node monitoring agent) -> recorded, nothing touched",
        no_action_play(XID_63),
        _untouched_check(Outcome.RECORDED, []),
    ),
    Scenario(
        "dcgm",
        "DCGMError (the monitor failed, not the GPU) -> alert only",
        no_action_play(DCGM_ERROR),
        _untouched_check(Outcome.ALERTED, ["action-required"]),
    ),
    Scenario("xid48", "Xid 48 (double-bit ECC) -> reboot, recovers, uncordoned", _xid48_play, _xid48_check),
    Scenario(
        "gateway-unreachable",
        "default gateway unreachable after answering this boot (NPD check_gateway.sh) -> confirmed, "
        "alert; the node stays",
        no_action_play(GATEWAY_UNREACHABLE),
        _gateway_check,
        context={
            "policy": {
                "conditionRules": {
                    "GatewayUnreachable": {
                        "action": GATEWAY_ACTION.value,
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
)
