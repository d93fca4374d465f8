"""The preview ``nodeheal doctor --node`` shows is what Admit decides, and it writes nothing (D18).

Each case runs the preview first, checks the ledger did not change and saw reads only, then runs
Admit itself on the same node and ledger and compares: same decision, same verdict.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from nodeheal.actions import Action, Mode
from nodeheal.config import BudgetSettings, RemediationSettings, ScopeSettings
from nodeheal.kube_views import LiveNode
from nodeheal.workflow import budget
from nodeheal.workflow.admission import CONFIRM, PROCEED, STOP, WAIT, Admission, admit
from nodeheal.workflow.budget import BreakerState
from nodeheal.workflow.locks import LockClaim
from nodeheal.workflow.preview import NodePreview, preview
from nodeheal.workflow.records import Outcome, RemediationRecord
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

XID_48 = "NVRM: Xid (PCI:0000:53:00): 48, pid=2411, name=python3, DBE (double bit error)"
NO_XID = "nvidia-smi failed: Unable to determine the device handle for GPU 0000:53:00.0: Unknown Error"
#: What a preview may call on the ledger: Admit's reads, nothing that writes.
LEDGER_READS = {"instance_records", "sightings", "read_lock", "read_admission_state", "lock_holder"}


@dataclass
class Compared:
    preview: NodePreview
    admission: Admission


def compare(
    node: LiveNode,
    ledger: FakeLedger,
    *,
    settings: RemediationSettings | None = None,
    mode: Mode = Mode.FULL,
    nodes: FakeNodes | None = None,
    condition: dict[str, Any] | None = None,
) -> Compared:
    settings = settings or RemediationSettings()
    nodes = nodes or FakeNodes({node.name: node})
    before = copy.deepcopy((ledger.locks, ledger.states, ledger.records, ledger.remembered, ledger.ended))
    calls: list[str] = []
    ledger.on_call = calls.append
    seen = preview(CLUSTER, node, settings, mode=mode, ledger=ledger, nodes=nodes, now=NOW)
    ledger.on_call = lambda _: None
    assert set(calls) <= LEDGER_READS
    assert (ledger.locks, ledger.states, ledger.records, ledger.remembered, ledger.ended) == before
    state = workflow_state(node, settings=replace(settings, mode=mode), condition=condition or gpu_problem())
    admission = admit(state, kube(nodes), ledger, NOW, mode=mode)
    return Compared(seen, admission)


def only(compared: Compared) -> Any:
    assert len(compared.preview.conditions) == 1
    return compared.preview.conditions[0]


def test_a_fresh_fault_is_admitted_and_acted_on() -> None:
    node = live_node(condition=gpu_problem())
    compared = compare(node, FakeLedger())
    seen = only(compared)
    assert compared.admission.verdict == PROCEED and compared.admission.lock_held
    assert seen.decision == compared.admission.decision
    assert seen.decision.action is Action.REPLACE and seen.acts
    assert seen.outcome.startswith("admits it (within budget) and goes on to replace")
    assert compared.preview.subject == INSTANCE


def test_the_instance_history_escalates_a_reboot_as_admit_does() -> None:
    ledger = FakeLedger()
    at = NOW - timedelta(hours=2)
    ledger.put_record(
        RemediationRecord(
            cluster=CLUSTER,
            node="gpu-a",
            execution="earlier",
            started_at=at,
            finished_at=at,
            outcome=Outcome.REBOOTED,
            action=Action.REBOOT,
            planned_action=Action.REBOOT,
            reason="Xid 48",
            summary="",
            instance_id=INSTANCE,
        )
    )
    condition = gpu_problem(message=XID_48)
    compared = compare(live_node(condition=condition), ledger, condition=condition)
    seen = only(compared)
    assert seen.decision == compared.admission.decision
    assert seen.decision.escalated and seen.decision.action is Action.REPLACE


def test_a_fault_still_confirming_waits_as_admit_does() -> None:
    condition = gpu_problem(message=NO_XID, at="2026-11-21T10:04:30Z")
    compared = compare(live_node(condition=condition), FakeLedger(), condition=condition)
    seen = only(compared)
    assert compared.admission.verdict == CONFIRM
    assert seen.confirm_remaining == compared.admission.wait_seconds == 90
    assert seen.decision == compared.admission.decision and not seen.acts
    assert "waits 90s more" in seen.outcome


def test_a_node_another_execution_holds_is_waited_behind() -> None:
    ledger = FakeLedger()
    ledger.acquire_lock(
        CLUSTER,
        INSTANCE,
        "exec-other",
        timedelta(hours=1),
        LockClaim("gpu-a", "GPUProblem", Action.REPLACE, NOW),
    )
    ledger.claim_mutation(CLUSTER, INSTANCE, "exec-other", step="drain", busy_for=timedelta(0))
    compared = compare(live_node(condition=gpu_problem()), ledger)
    seen = only(compared)
    assert compared.admission.verdict == WAIT
    assert seen.decision == compared.admission.decision and not seen.acts
    assert "waits behind execution exec-other" in seen.outcome


@pytest.mark.parametrize(
    "change",
    [
        lambda state: replace(state, breaker=BreakerState(open=True, opened_at=NOW, reason="storm")),
        lambda state: budget.paused(state, "maintenance") or state,
    ],
    ids=["breaker-open", "paused"],
)
def test_what_the_budgets_refuse_is_shown_refused(change: Any) -> None:
    ledger = FakeLedger()
    ledger.operator_change(CLUSTER, change)
    compared = compare(live_node(condition=gpu_problem()), ledger)
    seen = only(compared)
    assert compared.admission.refused and seen.refused and not seen.acts
    assert compared.admission.decision is not None
    assert compared.admission.decision.planned_action is seen.decision.planned_action is Action.REPLACE
    assert compared.admission.note in seen.outcome


def test_the_pool_share_is_read_from_the_live_pool() -> None:
    node = live_node(condition=gpu_problem())
    other = live_node("gpu-b", instance_id="i-0bbb1234def567890")
    nodes = FakeNodes({node.name: node, other.name: other})
    nodes.taint("gpu-b")
    settings = RemediationSettings(budgets=BudgetSettings(max_unhealthy_pool_share=0.0, min_pool_allowance=1))
    compared = compare(node, FakeLedger(), settings=settings, nodes=nodes)
    assert compared.admission.refused and only(compared).refused


def test_dry_run_decides_and_touches_nothing() -> None:
    compared = compare(live_node(condition=gpu_problem()), FakeLedger(), mode=Mode.DRY_RUN)
    seen = only(compared)
    assert seen.decision == compared.admission.decision
    assert seen.decision.action is Action.NONE and seen.decision.planned_action is Action.REPLACE
    assert not seen.acts and seen.outcome == "records what it would do (replace); touches nothing"


def test_a_condition_outside_the_rule_is_listed_apart() -> None:
    settings = RemediationSettings(scope=ScopeSettings(node_labels={"karpenter.sh/nodepool": ("inference",)}))
    compared = compare(live_node(condition=gpu_problem()), FakeLedger(), settings=settings)
    assert compared.admission.verdict == STOP and "out-of-scope" in compared.admission.note
    assert compared.preview.conditions == ()
    [(condition, why)] = compared.preview.out_of_scope
    assert condition.type == "GPUProblem" and why in compared.admission.note


def test_a_healthy_node_has_nothing_to_decide() -> None:
    ledger = FakeLedger()
    calls: list[str] = []
    ledger.on_call = calls.append
    healthy = live_node(condition=gpu_problem(status="False", message="ok"))
    seen = preview(
        CLUSTER, healthy, RemediationSettings(), mode=Mode.FULL, ledger=ledger, nodes=FakeNodes(), now=NOW
    )
    assert seen.conditions == () and seen.out_of_scope == ()
    assert calls == []  # nothing to decide, nothing read
