"""Adjustments on top of the classification: escalation, attempt cap, opt-out, modes, pools."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodeheal.actions import Action, Mode
from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.errors import InvalidEventError
from nodeheal.policy.decide import Decision, NodeHistory, decide
from tests.clock import NOW
from tests.unit.policy.helpers import nma, npd, policy_from

XID_48 = npd(
    "NVRM: Xid (PCI:0000:c9:00): 48, pid=18812, name=train.py, An uncorrectable double bit error (DBE)"
)
XID_79 = npd("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
XID_13 = npd("NVRM: Xid (PCI:0000:cb:00): 13, pid=1, name=python, Graphics SM Warp Exception")


def run(
    condition: Condition,
    *,
    labels: dict[str, str] | None = None,
    history: NodeHistory | None = None,
    policy: PolicySettings | None = None,
    mode: Mode = Mode.FULL,
) -> Decision:
    return decide(
        condition,
        labels=labels or {},
        history=history or NodeHistory(),
        policy=policy or PolicySettings(),
        mode=mode,
        now=NOW,
    )


def test_plain_decision_carries_the_classification() -> None:
    decision = run(XID_79)
    assert decision.action is decision.planned_action is Action.REPLACE
    assert (decision.xid, decision.signal, decision.confirm_seconds, decision.escalated) == (
        79,
        "xid:79",
        0,
        False,
    )


def test_confirmation_time_is_passed_on() -> None:
    decision = run(Condition("KernelDeadlock", "True", "DockerHung"))
    assert (decision.action, decision.confirm_seconds) == (Action.REPLACE, 600)


# Escalation.
def test_reboot_after_a_recent_reboot_escalates_to_replace() -> None:
    decision = run(XID_48, history=NodeHistory(attempts_in_window=1, last_reboot_at=NOW - timedelta(hours=3)))
    assert (decision.action, decision.planned_action, decision.escalated) == (
        Action.REPLACE,
        Action.REBOOT,
        True,
    )
    assert "escalated to replace" in decision.reason and "3.0 h" in decision.reason


def test_reboot_long_after_the_last_reboot_stays_a_reboot() -> None:
    decision = run(XID_48, history=NodeHistory(last_reboot_at=NOW - timedelta(hours=25)))
    assert (decision.action, decision.escalated) == (Action.REBOOT, False)


def test_escalation_window_comes_from_the_policy() -> None:
    history = NodeHistory(last_reboot_at=NOW - timedelta(hours=30))
    assert run(XID_48, history=history, policy=policy_from({"rebootEscalationHours": 48})).escalated
    disabled = run(
        XID_48, history=NodeHistory(last_reboot_at=NOW), policy=policy_from({"rebootEscalationHours": 0})
    )
    assert (disabled.action, disabled.escalated) == (Action.REBOOT, False)


def test_only_reboot_decisions_escalate() -> None:
    history = NodeHistory(last_reboot_at=NOW - timedelta(hours=1))
    assert run(XID_13, history=history).action is Action.NONE
    assert run(XID_79, history=history).escalated is False


# Attempt cap.
@pytest.mark.parametrize("condition", [XID_48, XID_79], ids=["reboot", "replace"])
def test_attempt_cap_turns_remediation_into_alert(condition: Condition) -> None:
    decision = run(condition, history=NodeHistory(attempts_in_window=3))
    assert decision.action is Action.ALERT
    assert decision.planned_action is not Action.ALERT
    assert "contact support / RMA" in decision.reason


def test_below_the_cap_remediation_proceeds() -> None:
    assert run(XID_79, history=NodeHistory(attempts_in_window=2)).action is Action.REPLACE


def test_cap_comes_from_the_policy_and_spares_cheap_actions() -> None:
    policy = policy_from({"maxAttemptsPerNode": 1})
    assert run(XID_79, history=NodeHistory(attempts_in_window=1), policy=policy).action is Action.ALERT
    assert run(XID_13, history=NodeHistory(attempts_in_window=9), policy=policy).action is Action.NONE


def test_capped_escalation_is_alert() -> None:
    history = NodeHistory(attempts_in_window=3, last_reboot_at=NOW - timedelta(hours=1))
    decision = run(XID_48, history=history)
    assert (decision.action, decision.escalated) == (Action.ALERT, True)


# Opt-out.
@pytest.mark.parametrize("value", ["true", "True", "TRUE"])
def test_opted_out_node_gets_alert_only(value: str) -> None:
    decision = run(XID_79, labels={"nodeheal.io/disabled": value})
    assert (decision.action, decision.planned_action) == (Action.ALERT, Action.REPLACE)
    assert "opted out" in decision.reason


def test_opt_out_label_must_say_true() -> None:
    assert run(XID_79, labels={"nodeheal.io/disabled": "false"}).action is Action.REPLACE


def test_opt_out_does_not_invent_an_alert() -> None:
    assert run(XID_13, labels={"nodeheal.io/disabled": "true"}).action is Action.NONE


def test_opt_out_label_name_comes_from_the_policy() -> None:
    policy = policy_from({"optOutLabel": "example.com/no-heal"})
    assert run(XID_79, labels={"example.com/no-heal": "true"}, policy=policy).action is Action.ALERT
    assert run(XID_79, labels={"nodeheal.io/disabled": "true"}, policy=policy).action is Action.REPLACE


# Modes.
@pytest.mark.parametrize("condition", [XID_79, XID_48, nma("DCGMError")], ids=["replace", "reboot", "alert"])
def test_dry_run_does_nothing_and_says_what_it_would_do(condition: Condition) -> None:
    full = run(condition)
    decision = run(condition, mode=Mode.DRY_RUN)
    assert decision.action is Action.NONE
    assert decision.planned_action is full.planned_action
    assert f"would have done {full.action.value}" in decision.reason


def test_dry_run_reports_the_adjusted_action() -> None:
    history = NodeHistory(last_reboot_at=NOW - timedelta(hours=1))
    decision = run(XID_48, history=history, mode=Mode.DRY_RUN)
    assert (decision.action, decision.planned_action, decision.escalated) == (
        Action.NONE,
        Action.REBOOT,
        True,
    )
    assert "would have done replace" in decision.reason


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (XID_79, Action.CORDON),
        (XID_48, Action.CORDON),
        (nma("DCGMError"), Action.ALERT),
        (XID_13, Action.NONE),
    ],
    ids=["replace", "reboot", "alert", "none"],
)
def test_cordon_only_stops_at_cordon(condition: Condition, expected: Action) -> None:
    decision = run(condition, mode=Mode.CORDON_ONLY)
    assert decision.action is expected
    if expected is Action.CORDON:
        assert "cordon-only" in decision.reason


# Pools.
def test_pool_overrides_follow_the_node_pool_label() -> None:
    policy = policy_from({"nodePools": {"inference": {"xidActions": {"13": "cordon"}}}})
    decision = run(XID_13, labels={"karpenter.sh/nodepool": "inference"}, policy=policy)
    assert decision.action is Action.CORDON
    assert "node pool 'inference' overrides applied" in decision.reason
    assert run(XID_13, labels={"karpenter.sh/nodepool": "training"}, policy=policy).action is Action.NONE


def test_pool_label_name_comes_from_the_policy() -> None:
    policy = policy_from(
        {"nodePoolLabel": "example.com/pool", "nodePools": {"a": {"xidActions": {"13": "alert"}}}}
    )
    assert run(XID_13, labels={"example.com/pool": "a"}, policy=policy).action is Action.ALERT
    assert run(XID_13, labels={"karpenter.sh/nodepool": "a"}, policy=policy).action is Action.NONE


def test_unknown_action_comes_from_the_policy() -> None:
    decision = run(Condition("NVLinkProblem", "True"), policy=policy_from({"unknownAction": "none"}))
    assert (decision.action, decision.signal) == (Action.NONE, "unknown")


def test_healthy_condition_decides_none() -> None:
    decision = run(Condition("GPUProblem", "False", "GPUHealthy"), history=NodeHistory(attempts_in_window=99))
    assert decision.action is Action.NONE
    assert "condition is healthy" in decision.reason


# Serialisation.
def test_decision_json_round_trip() -> None:
    decision = run(XID_48, history=NodeHistory(last_reboot_at=NOW - timedelta(hours=1)))
    body = decision.to_json()
    assert body == {
        "action": "replace",
        "plannedAction": "reboot",
        "reason": decision.reason,
        "xid": 48,
        "signal": "xid:48",
        "confirmSeconds": 0,
        "escalated": True,
    }
    assert Decision.from_json(body) == decision


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"action": "terminate"}, "decision.action must be one of"),
        ({"plannedAction": None}, "decision.plannedAction must be one of"),
        ({"xid": "79"}, "decision.xid"),
        ({"xid": True}, "decision.xid"),
        ({"confirmSeconds": -1}, "decision.confirmSeconds"),
        ({"escalated": "yes"}, "decision.escalated"),
        ({"signal": ""}, "decision.reason and decision.signal"),
    ],
)
def test_malformed_decision_json_is_rejected(change: dict[str, Any], message: str) -> None:
    body = {**run(XID_79).to_json(), **change}
    with pytest.raises(InvalidEventError, match=message):
        Decision.from_json(body)


def test_decision_json_must_be_an_object() -> None:
    with pytest.raises(InvalidEventError, match="decision must be an object"):
        Decision.from_json(["replace"])
