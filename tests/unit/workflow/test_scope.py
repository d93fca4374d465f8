"""Defect 9: the rule's scope (conditions with statuses, node labels) is checked on the LIVE node.

The EventBridge rule only sees what the event claims; admit re-reads the node and must stop,
before any lock or mutation, when the node itself is out of scope.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from nodeheal.conditions import Condition
from nodeheal.config import RemediationSettings, ScopeCondition, ScopeSettings
from nodeheal.workflow.admission import PROCEED, STOP, admit
from nodeheal.workflow.scope import out_of_scope
from tests.unit.workflow.fakes import (
    CLUSTER,
    NOW,
    FakeLedger,
    FakeNodes,
    gpu_problem,
    kube,
    live_node,
    workflow_state,
)

GPU_SCOPE = ScopeSettings(node_labels=MappingProxyType({"gpu": ("true",)}))


def condition(type_: str = "GPUProblem", status: str = "True") -> Condition:
    return Condition.from_api({"type": type_, "status": status, "reason": "R"})


@pytest.mark.parametrize(
    ("scope", "labels", "live", "note"),
    [
        (ScopeSettings(), {}, condition(), ""),
        (GPU_SCOPE, {"gpu": "true"}, condition(), ""),
        (GPU_SCOPE, {}, condition(), "node lacks label gpu=true"),
        (GPU_SCOPE, {"gpu": "false"}, condition(), "node label gpu=false, the rule wants gpu=true"),
        (
            ScopeSettings(node_labels=MappingProxyType({"pool": ("gpu", "gpu-spot")})),
            {},
            condition(),
            "node lacks label pool in (gpu, gpu-spot)",
        ),
        (ScopeSettings(), {}, condition("Ready", "Unknown"), ""),
        (
            ScopeSettings(conditions=(ScopeCondition("Ready", ("False",)),)),
            {},
            condition("Ready", "Unknown"),
            "live Ready=Unknown is not one of the rule's statuses (False)",
        ),
        (
            ScopeSettings(),
            {},
            condition("NvidiaSomethingNew"),
            "condition NvidiaSomethingNew is not one of the rule's conditions",
        ),
    ],
)
def test_out_of_scope(scope: ScopeSettings, labels: dict[str, str], live: Condition, note: str) -> None:
    assert out_of_scope(scope, labels, live) == note


def test_defect_9_event_claiming_the_scope_on_a_node_without_the_label_mutates_nothing() -> None:
    live = live_node(condition=gpu_problem())
    assert "gpu" not in live.labels
    nodes, ledger = FakeNodes({live.name: live}), FakeLedger()
    # The event's own labels claim the scope (so the rule matched it); the live node has no such label.
    claimed = replace(live, labels={**live.labels, "gpu": "true"})
    state = workflow_state(claimed, settings=replace(RemediationSettings(), scope=GPU_SCOPE))
    assert state.event.node.labels["gpu"] == "true"

    admission = admit(state, kube(nodes), ledger, NOW)

    assert admission.verdict == STOP
    assert admission.note == "out-of-scope: node lacks label gpu=true"
    assert admission.decision is None and not admission.lock_held
    assert ledger.locks == {}
    assert ledger.read_admission_state(CLUSTER).in_flight == {}
    assert nodes.nodes[live.name] == live  # not cordoned, not tainted


def test_defect_9_a_node_that_has_the_label_live_is_admitted() -> None:
    live = live_node(condition=gpu_problem(), extra_labels={"gpu": "true"})
    nodes, ledger = FakeNodes({live.name: live}), FakeLedger()
    state = workflow_state(live, settings=replace(RemediationSettings(), scope=GPU_SCOPE))
    assert admit(state, kube(nodes), ledger, NOW).verdict == PROCEED


def test_defect_9_the_scope_travels_in_the_execution_settings() -> None:
    settings = replace(RemediationSettings(), scope=GPU_SCOPE)
    serialized = settings.to_json()
    assert serialized["scope"]["nodeLabels"] == {"gpu": ["true"]}
    assert {"type": "Ready", "statuses": ["False", "Unknown"]} in serialized["scope"]["conditions"]
    assert RemediationSettings.from_json(serialized).scope == GPU_SCOPE
    # Settings of an execution started before the scope existed parse to the default scope.
    del serialized["scope"]
    assert RemediationSettings.from_json(serialized).scope == ScopeSettings()
