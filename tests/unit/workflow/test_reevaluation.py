"""Which still-bad conditions a breaker reset re-evaluates now (nodeheal.workflow.reevaluation)."""

from __future__ import annotations

from datetime import timedelta

from nodeheal.actions import Mode
from nodeheal.config import BudgetSettings, RemediationSettings, ScopeCondition, ScopeSettings
from nodeheal.sim.apiserver import make_node
from nodeheal.workflow.budget import ClusterAdmissionState, InFlight
from nodeheal.workflow.reevaluation import plan, still_bad
from tests.clock import NOW

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
GPU = {"type": "GPUProblem", "status": "True", "reason": "GPUFellOffBus", "message": XID_79}
DEADLOCK = {"type": "KernelDeadlock", "status": "True", "reason": "DockerHung", "message": "task hung"}
SETTINGS = RemediationSettings(mode=Mode.FULL, budgets=BudgetSettings(max_in_flight=2))


def node(name: str, *conditions: dict[str, str], pool: str = "gpu") -> dict[str, object]:
    return make_node(
        name, instance_id="i-" + name[-1] * 17, node_pool=pool, extra_conditions=list(conditions)
    )


def test_a_node_with_two_bad_conditions_takes_one_slot() -> None:
    nodes = [node("gpu-a", GPU, DEADLOCK), node("gpu-b", GPU), node("gpu-c", GPU)]
    candidates = still_bad("c1", nodes, SETTINGS, locks={}, now=NOW)
    assert [(c.node, c.event.condition.type) for c in candidates] == [
        ("gpu-a", "GPUProblem"),
        ("gpu-a", "KernelDeadlock"),
        ("gpu-b", "GPUProblem"),
        ("gpu-c", "GPUProblem"),
    ]
    state = ClusterAdmissionState(
        "c1", in_flight={"i-x": InFlight("exec-x", "gpu", NOW, NOW + timedelta(hours=9))}
    )
    chosen = plan(candidates, state, SETTINGS, now=NOW)
    assert chosen.room == 1
    assert [(c.node, c.event.condition.type) for c in chosen.start] == [
        ("gpu-a", "GPUProblem"),
        ("gpu-a", "KernelDeadlock"),
    ]
    assert [c.node for c in chosen.deferred] == ["gpu-b", "gpu-c"]


def test_only_conditions_in_the_deployed_scope_and_labels_count() -> None:
    scope = ScopeSettings(
        conditions=(ScopeCondition("GPUProblem", ("True",)),), node_labels={"karpenter.sh/nodepool": ("gpu",)}
    )
    settings = RemediationSettings(scope=scope)
    nodes = [node("gpu-a", GPU, DEADLOCK), node("cpu-b", GPU, pool="general")]
    candidates = still_bad("c1", nodes, settings, locks={"gpu-a": "exec-a"}, now=NOW)
    assert [(c.node, c.event.condition.type, c.held_by) for c in candidates] == [
        ("gpu-a", "GPUProblem", "exec-a")
    ]
    chosen = plan(candidates, ClusterAdmissionState("c1"), settings, now=NOW)
    assert chosen.start == () and chosen.deferred == () and len(chosen.busy) == 1


def test_expired_slots_and_old_starts_free_room() -> None:
    old = NOW - timedelta(hours=2)
    state = ClusterAdmissionState(
        "c1", in_flight={"i-x": InFlight("exec-x", "gpu", old, NOW - timedelta(minutes=1))}
    )
    candidates = still_bad("c1", [node("gpu-a", GPU), node("gpu-b", GPU)], SETTINGS, locks={}, now=NOW)
    assert plan(candidates, state, SETTINGS, now=NOW).room == 2
