from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from nodeheal.actions import Action, Mode
from nodeheal.conditions import Condition
from nodeheal.config import BudgetSettings, RemediationSettings
from nodeheal.kube_views import LiveNode
from nodeheal.workflow.admission import CONFIRM, PROCEED, STOP, WAIT, admit
from nodeheal.workflow.budget import BreakerState, ClusterAdmissionState
from nodeheal.workflow.locks import LockClaim
from tests.unit.workflow.fakes import (
    CLUSTER,
    INSTANCE,
    NOW,
    FakeLedger,
    FakeNodes,
    gpu_problem,
    kube,
    live_node,
    workflow_state,
)


def setup(condition: dict | None = None, **node_kwargs: object) -> tuple[FakeNodes, FakeLedger]:
    node = live_node(condition=condition or gpu_problem(), **node_kwargs)  # type: ignore[arg-type]
    return FakeNodes({node.name: node}), FakeLedger()


def test_bad_live_condition_is_admitted_with_the_lock_and_a_budget_slot() -> None:
    nodes, ledger = setup()
    admission = admit(workflow_state(nodes.nodes["gpu-a"]), kube(nodes), ledger, NOW)
    assert admission.verdict == PROCEED
    assert admission.decision is not None and admission.decision.action is Action.REPLACE
    assert admission.decision.xid == 79
    assert admission.lock_held and ledger.lock_holder(CLUSTER, INSTANCE) == "exec-1"
    assert INSTANCE in ledger.read_admission_state(CLUSTER).in_flight
    assert admission.node is not None and admission.node.instance_id == "i-0abc1234def567890"


def test_missing_node_stops() -> None:
    nodes, ledger = setup()
    state = workflow_state(nodes.nodes.pop("gpu-a"))
    admission = admit(state, kube(nodes), ledger, NOW)
    assert admission.verdict == STOP and "no longer exists" in admission.note
    assert ledger.locks == {}


def test_recreated_node_with_the_same_name_stops() -> None:
    nodes, ledger = setup()
    state = workflow_state(nodes.nodes["gpu-a"])
    nodes.nodes["gpu-a"] = replace(nodes.nodes["gpu-a"], uid="another-uid")
    admission = admit(state, kube(nodes), ledger, NOW)
    assert admission.verdict == STOP and "new object" in admission.note


def test_condition_healthy_on_the_live_node_stops_even_if_the_event_says_bad() -> None:
    nodes, ledger = setup(condition=gpu_problem(status="False", message="ok"))
    admission = admit(workflow_state(nodes.nodes["gpu-a"], condition=gpu_problem()), kube(nodes), ledger, NOW)
    assert admission.verdict == STOP and "no longer bad" in admission.note
    assert ledger.locks == {}


def test_classification_uses_the_live_condition_not_an_earlier_events() -> None:
    xid13 = "NVRM: Xid (PCI:0000:53:00): 13, pid=1, name=python3, Graphics SM Warp Exception"
    nodes, ledger = setup(condition=gpu_problem(message=xid13))
    # The event reported Xid 79 in an earlier bad period of the condition (it recovered since).
    earlier = gpu_problem(at="2026-11-21T09:00:00Z")
    admission = admit(workflow_state(nodes.nodes["gpu-a"], condition=earlier), kube(nodes), ledger, NOW)
    assert admission.decision is not None and admission.decision.xid == 13
    assert admission.decision.action is Action.NONE and not admission.lock_held


def test_a_worse_message_the_event_saw_still_decides_in_the_same_bad_period() -> None:
    """NPD keeps only the latest message: the exporter saw Xid 79, the live condition (same
    transition time, never recovered) now reads Xid 13. The dead GPU is still dead (D2)."""
    xid13 = "NVRM: Xid (PCI:0000:53:00): 13, pid=1, name=python3, Graphics SM Warp Exception"
    nodes, ledger = setup(condition=gpu_problem(message=xid13))
    admission = admit(workflow_state(nodes.nodes["gpu-a"]), kube(nodes), ledger, NOW)
    assert admission.decision is not None and admission.decision.action is Action.REPLACE
    assert admission.decision.xid == 79 and "still decides" in admission.decision.reason


def test_an_equally_severe_holder_that_mutated_makes_the_newcomer_wait_not_stop() -> None:
    nodes, ledger = setup()
    holder_claim = LockClaim("gpu-a", "GPUProblem", Action.REPLACE, NOW)
    ledger.acquire_lock(CLUSTER, INSTANCE, "exec-other", timedelta(hours=1), holder_claim)
    ledger.claim_mutation(CLUSTER, INSTANCE, "exec-other", step="drain", busy_for=timedelta(0))
    admission = admit(workflow_state(nodes.nodes["gpu-a"]), kube(nodes), ledger, NOW)
    assert admission.verdict == WAIT and "exec-other" in admission.note
    assert admission.wait_seconds == RemediationSettings().lock_wait_poll_seconds
    assert admission.waiting_since == NOW
    assert ledger.lock_holder(CLUSTER, INSTANCE) == "exec-other"


def test_confirmation_waits_out_the_remaining_time_holding_the_lock() -> None:
    no_xid = "nvidia-smi failed: Unable to determine the device handle for GPU 0000:53:00.0: Unknown Error"
    nodes, ledger = setup(condition=gpu_problem(message=no_xid, at="2026-11-21T10:04:30Z"))
    admission = admit(workflow_state(nodes.nodes["gpu-a"]), kube(nodes), ledger, NOW)
    assert admission.verdict == CONFIRM
    assert admission.wait_seconds == 90  # 120 s confirmation, bad for 30 s so far
    assert ledger.lock_holder(CLUSTER, INSTANCE) == "exec-1"
    assert ledger.read_admission_state(CLUSTER).in_flight == {}
    later = admit(workflow_state(nodes.nodes["gpu-a"]), kube(nodes), ledger, NOW + timedelta(seconds=90))
    assert later.verdict == PROCEED and later.decision is not None
    assert later.decision.action is Action.REPLACE


def test_budget_refusal_lowers_to_alert_and_releases_the_lock() -> None:
    nodes, ledger = setup()
    other = live_node("gpu-b", instance_id="i-0bbb1234def567890")
    nodes.nodes["gpu-b"] = other
    nodes.taint("gpu-b")  # already being remediated: the pool of 2 has no room
    settings = RemediationSettings(
        mode=Mode.FULL, budgets=BudgetSettings(max_unhealthy_pool_share=0.0, min_pool_allowance=1)
    )
    admission = admit(workflow_state(nodes.nodes["gpu-a"], settings=settings), kube(nodes), ledger, NOW)
    assert admission.verdict == PROCEED and admission.refused
    assert admission.decision is not None and admission.decision.action is Action.ALERT
    assert admission.decision.planned_action is Action.REPLACE
    assert "allowance is 1" in admission.decision.reason
    assert ledger.locks == {}


def test_open_breaker_refuses() -> None:
    nodes, ledger = setup()
    ledger.states[CLUSTER] = ClusterAdmissionState(
        CLUSTER, version=3, breaker=BreakerState(open=True, opened_at=NOW, reason="storm")
    )
    admission = admit(workflow_state(nodes.nodes["gpu-a"]), kube(nodes), ledger, NOW)
    assert admission.refused and "circuit breaker is open" in admission.note


def test_dry_run_takes_no_lock_and_no_budget() -> None:
    nodes, ledger = setup()
    settings = RemediationSettings(mode=Mode.DRY_RUN)
    admission = admit(workflow_state(nodes.nodes["gpu-a"], settings=settings), kube(nodes), ledger, NOW)
    assert admission.decision is not None
    assert admission.decision.action is Action.NONE and admission.decision.planned_action is Action.REPLACE
    assert ledger.locks == {} and ledger.states == {}


def test_opt_out_label_alerts_only() -> None:
    nodes, ledger = setup(extra_labels={"nodeheal.io/disabled": "true"})
    admission = admit(workflow_state(nodes.nodes["gpu-a"]), kube(nodes), ledger, NOW)
    assert admission.decision is not None and admission.decision.action is Action.ALERT
    assert ledger.locks == {}


def test_a_node_that_is_not_ready_yet_is_not_alerted_at_once() -> None:
    # Every joining node reports Ready=False for a few seconds: admit waits (without a lock) and
    # the live re-check after the wait finds it Ready.
    not_ready = {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "container runtime network not ready",
        "lastTransitionTime": "2026-11-21T10:04:50Z",
    }
    node = live_node(ready=False)
    node = replace(node, conditions={**node.conditions, "Ready": Condition.from_api(not_ready)})
    nodes, ledger = FakeNodes({node.name: node}), FakeLedger()
    state = workflow_state(node, condition=not_ready)
    admission = admit(state, kube(nodes), ledger, NOW)
    assert admission.verdict == CONFIRM and admission.wait_seconds == 590
    assert not admission.lock_held and ledger.locks == {}
    ready = live_node()
    nodes.nodes[node.name] = replace(ready, uid=node.uid)  # the same node, Ready now
    later = admit(state, kube(nodes), ledger, NOW + timedelta(seconds=590))
    assert later.verdict == STOP and "no longer bad" in later.note


def test_a_storm_refusal_does_not_list_the_pool() -> None:
    # maxInFlight is full: the refusal needs no pool health, so no node list reaches the API server.
    nodes, ledger = setup()
    listed: list[str | None] = []
    list_nodes = nodes.list

    def counting(label_selector: str | None = None) -> list[LiveNode]:
        listed.append(label_selector)
        return list_nodes(label_selector)

    nodes.list = counting  # type: ignore[method-assign]
    first = admit(workflow_state(nodes.nodes["gpu-a"]), kube(nodes), ledger, NOW)
    assert first.lock_held and listed == ["karpenter.sh/nodepool=gpu"]
    settings = RemediationSettings(mode=Mode.FULL, budgets=BudgetSettings(max_in_flight=1))
    other = live_node("gpu-b", condition=gpu_problem(), instance_id="i-0bbb1234def567890")
    nodes.nodes["gpu-b"] = other
    refused = admit(workflow_state(other, settings=settings, execution="exec-2"), kube(nodes), ledger, NOW)
    assert refused.refused and "maxInFlight 1" in refused.note
    assert listed == ["karpenter.sh/nodepool=gpu"]
