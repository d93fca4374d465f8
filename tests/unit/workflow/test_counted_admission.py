"""Admit and the guard with an execution a counted signal started: the instance is proven as for
every fault (D1), and instead of a bad condition on the Node, the window in the ledger must still be
over its threshold on the boot the node runs now (D19)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from nodeheal.actions import Action, Mode
from nodeheal.config import PolicySettings, RemediationSettings
from nodeheal.counted_signals import COUNTED_CONDITION_TYPE, CountedRule
from nodeheal.errors import ConditionClearedError
from nodeheal.events import DETAIL_TYPE_NODE_EVENT
from nodeheal.kube_views import LiveNode
from nodeheal.workflow import guard
from nodeheal.workflow.admission import PROCEED, STOP, admit
from nodeheal.workflow.counting import count_node_event
from nodeheal.workflow.ingest import IngestSettings
from nodeheal.workflow.state import WorkflowState
from tests.unit.workflow.fakes import CLUSTER, NOW, FakeLedger, FakeNodes, kube, live_node

XID_92 = "NVRM: Xid (PCI:0000:53:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC error rate"
XID_63 = (
    "NVRM: Xid (PCI:0000:53:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: reset gpu to activate."
)
INGEST = IngestSettings(
    clusters=frozenset({CLUSTER}), stale_after=timedelta(minutes=15), event_source="nodeheal.exporter"
)


class Starter:
    def __init__(self) -> None:
        self.started: dict[str, dict[str, Any]] = {}

    def start(self, name: str, payload: Any) -> str:
        self.started[name] = json.loads(json.dumps(payload))
        return name


def delivery(node: LiveNode, index: int, message: str, minutes_ago: int) -> dict[str, Any]:
    at = (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "id": f"d-{index}",
        "source": f"nodeheal.exporter.{CLUSTER}",
        "detail-type": DETAIL_TYPE_NODE_EVENT,
        "detail": {
            "schemaVersion": "1.1",
            "cluster": CLUSTER,
            "node": {
                "name": node.name,
                "uid": node.uid,
                "instanceID": node.instance_id,
                "bootID": node.boot_id,
            },
            "event": {
                "uid": f"event-{index}",
                "type": "Warning",
                "reason": "GPUInformationalXid",
                "message": message,
                "count": 1,
                "source": "gpu-monitor",
                "firstTimestamp": at,
                "lastTimestamp": at,
            },
            "observedAt": at,
        },
    }


def crossed(
    node: LiveNode, ledger: FakeLedger, settings: RemediationSettings, message: str = XID_92, times: int = 10
) -> WorkflowState:
    """Count ``times`` Events of ``node`` and return the state of the execution the crossing starts."""
    starter = Starter()
    for index in range(times):
        minutes_ago = times - index
        count_node_event(
            delivery(node, index, message, minutes_ago),
            settings=INGEST,
            policy=settings.policy,
            windows=ledger,
            starter=starter,
            ledger=ledger,
            now=NOW - timedelta(minutes=minutes_ago),
        )
    [(name, payload)] = starter.started.items()
    return WorkflowState.parse(
        {
            **payload,
            "settings": settings.to_json(),
            "execution": {
                "name": name,
                "id": f"arn:aws:states:::execution:sm:{name}",
                "startedAt": "2026-11-21T10:04:59Z",
            },
        }
    )


FULL = RemediationSettings(mode=Mode.FULL)


def test_a_crossed_window_is_admitted_with_its_rule_and_named_count() -> None:
    node = live_node()
    nodes, ledger = FakeNodes({node.name: node}), FakeLedger()
    state = crossed(node, ledger, FULL)
    assert state.condition_type == COUNTED_CONDITION_TYPE
    admission = admit(state, kube(nodes), ledger, NOW)
    assert admission.verdict == PROCEED
    assert admission.decision is not None and admission.decision.action is Action.ALERT
    assert admission.decision.signal == "counted:xid-92"
    assert "seen 10 times within 24h" in admission.decision.reason
    assert not admission.lock_held  # an alert touches nothing and takes no lock


def test_a_window_that_no_longer_holds_stops_the_execution() -> None:
    node = live_node()
    nodes, ledger = FakeNodes({node.name: node}), FakeLedger()
    state = crossed(node, ledger, FULL)
    # A day later the oldest occurrences have left the window.
    admission = admit(state, kube(nodes), ledger, NOW + timedelta(hours=24))
    assert admission.verdict == STOP and "no longer bad" in admission.note


def test_a_new_boot_of_the_instance_ends_the_window() -> None:
    node = live_node()
    nodes, ledger = FakeNodes({node.name: node}), FakeLedger()
    state = crossed(node, ledger, FULL)
    nodes.nodes[node.name] = replace(node, boot_id="rebooted-since")
    admission = admit(state, kube(nodes), ledger, NOW)
    assert admission.verdict == STOP and "no longer bad" in admission.note


def test_another_instance_under_the_same_name_is_not_acted_on() -> None:
    node = live_node()
    nodes, ledger = FakeNodes({node.name: node}), FakeLedger()
    state = crossed(node, ledger, FULL)
    nodes.nodes[node.name] = live_node(instance_id="i-0fff1234def567890")
    admission = admit(state, kube(nodes), ledger, NOW)
    assert admission.verdict == STOP


def test_a_reboot_for_a_counted_signal_is_re_proven_before_each_mutation() -> None:
    # Xid 63 twice within a day: a reboot activates the pending row remaps. The guard before the
    # cordon proves the window again; once the instance booted again, the next step stops.
    node = live_node()
    nodes, ledger = FakeNodes({node.name: node}), FakeLedger()
    settings = replace(
        FULL, policy=PolicySettings(counted_signals={"xid-63": CountedRule(2, 24, Action.REBOOT)})
    )
    state = crossed(node, ledger, settings, message=XID_63, times=2)
    admission = admit(state, kube(nodes), ledger, NOW)
    assert admission.verdict == PROCEED and admission.decision is not None
    assert admission.decision.action is Action.REBOOT and admission.lock_held
    admitted = WorkflowState.parse({**state.raw, "admission": admission.to_json()})
    live = guard.before_mutation(
        admitted,
        kube(nodes),
        ledger,
        live_mode=Mode.FULL,
        allowed=(Mode.FULL,),
        step="cordon",
        require_taint=False,
        now=NOW,
    )
    assert live.name == node.name
    nodes.nodes[node.name] = replace(node, boot_id="rebooted-since")
    with pytest.raises(ConditionClearedError, match=COUNTED_CONDITION_TYPE):
        guard.before_mutation(
            admitted,
            kube(nodes),
            ledger,
            live_mode=Mode.FULL,
            allowed=(Mode.FULL,),
            step="drain",
            require_taint=False,
            now=NOW,
        )


def test_ingest_refuses_an_event_that_claims_to_be_counted() -> None:
    from nodeheal.workflow.ingest import ingest

    node = live_node()
    ledger = FakeLedger()
    state = crossed(node, ledger, FULL)
    payload = {
        "id": "forged-1",
        "source": f"nodeheal.exporter.{CLUSTER}",
        "detail-type": "Node Condition Changed",
        "detail": {**state.raw["event"], "schemaVersion": "1.1"},
    }
    result = ingest(payload, settings=INGEST, starter=Starter(), ledger=ledger, now=NOW)
    assert (result.status, result.category) == ("dropped", "malformed")
    assert "countedSignal" in result.reason
