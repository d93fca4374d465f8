"""The decision for one bad condition on one node: classification, then every adjustment. Pure.

Order of adjustments, each recorded in the explanation:

1. **Escalation**: a reboot for a node already rebooted for a GPU fault within
   ``reboot_escalation_hours`` becomes a replacement; the reboot evidently did not fix it.
2. **Attempt cap**: a node remediated ``max_attempts_per_node`` times in the window gets an alert
   instead of another reboot/replace; it needs a person or an RMA, not a loop.
3. **Opt-out**: a node labelled ``<opt_out_label>=true`` is never touched (at most an alert).
4. **Mode**: dry-run acts on nothing; cordon-only stops at cordon.

Budgets and the circuit breaker need the ledger's cluster-wide view and are applied by the
workflow's admit step after this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodeheal.actions import Action, Mode, action_at
from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.counted_signals import COUNTED_CONDITION_TYPE
from nodeheal.errors import InvalidEventError
from nodeheal.policy.classify import classify
from nodeheal.policy.counted_signals import classify_counted


@dataclass(frozen=True, slots=True)
class NodeHistory:
    #: Remediations (reboot/replace) of this node within ``policy.attempt_window_hours``.
    attempts_in_window: int = 0
    #: The last reboot remediation of this node for a GPU fault.
    last_reboot_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    #: What the workflow does now (after escalation, cap, opt-out and mode).
    action: Action
    #: What the classification alone asked for.
    planned_action: Action
    #: Full explanation: the classification and every adjustment made to it.
    reason: str
    xid: int | None
    signal: str
    confirm_seconds: int
    escalated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "plannedAction": self.planned_action.value,
            "reason": self.reason,
            "xid": self.xid,
            "signal": self.signal,
            "confirmSeconds": self.confirm_seconds,
            "escalated": self.escalated,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Decision:
        """Read back :meth:`to_json` (a decision travels through the state machine's state)."""
        if not isinstance(raw, Mapping):
            raise InvalidEventError(f"decision must be an object, got {type(raw).__name__}")
        action = action_at(raw, "action", where="decision")
        planned = action_at(raw, "plannedAction", where="decision")
        reason = raw.get("reason")
        signal = raw.get("signal")
        if not isinstance(reason, str) or not isinstance(signal, str) or not signal:
            raise InvalidEventError("decision.reason and decision.signal must be strings")
        xid = raw.get("xid")
        if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int)):
            raise InvalidEventError(f"decision.xid must be an integer or null, got {xid!r}")
        confirm = raw.get("confirmSeconds", 0)
        if isinstance(confirm, bool) or not isinstance(confirm, int) or confirm < 0:
            raise InvalidEventError(
                f"decision.confirmSeconds must be a non-negative integer, got {confirm!r}"
            )
        escalated = raw.get("escalated", False)
        if not isinstance(escalated, bool):
            raise InvalidEventError("decision.escalated must be a boolean")
        return cls(
            action=action,
            planned_action=planned,
            reason=reason,
            xid=xid,
            signal=signal,
            confirm_seconds=confirm,
            escalated=escalated,
        )


def decide(
    condition: Condition,
    *,
    labels: Mapping[str, str],
    history: NodeHistory,
    policy: PolicySettings,
    mode: Mode,
    now: datetime,
    worst_seen: Decision | None = None,
) -> Decision:
    """Decide for ``condition``. ``worst_seen`` is the decision made earlier in this episode of the
    node (an earlier admit of the same execution, or the lock holder it takes over): severity only
    rises (docs/architecture.md, D2), because NPD keeps only the latest message and a lesser fault
    overwriting a worse one does not mean the worse one healed."""
    pool = labels.get(policy.node_pool_label)
    classification = (
        classify_counted(condition, policy)
        if condition.type == COUNTED_CONDITION_TYPE
        else classify(condition, policy.for_pool(pool), policy.unknown_action)
    )
    planned = classification.action
    xid, signal, confirm_seconds = classification.xid, classification.signal, classification.confirm_seconds
    notes: list[str] = []
    if worst_seen is not None and worst_seen.planned_action.cost > planned.cost:
        notes.append(
            f"severity only rises within an episode: the condition now reads as {planned.value} "
            f"({signal}), but {worst_seen.signal} ({worst_seen.planned_action.value}) was seen first "
            "and still decides"
        )
        planned, xid, signal = worst_seen.planned_action, worst_seen.xid, worst_seen.signal
        confirm_seconds = worst_seen.confirm_seconds
    action = planned
    escalated = False

    if action is Action.REBOOT and history.last_reboot_at is not None and policy.reboot_escalation_hours > 0:
        since = now - history.last_reboot_at
        if since < timedelta(hours=policy.reboot_escalation_hours):
            action = Action.REPLACE
            escalated = True
            notes.append(
                f"escalated to replace: the node was already rebooted for a GPU fault "
                f"{_hours(since)} ago (within rebootEscalationHours={policy.reboot_escalation_hours}), "
                "so another reboot is unlikely to help"
            )

    if action.mutates_instance and history.attempts_in_window >= policy.max_attempts_per_node:
        notes.append(
            f"{action.value} withheld: the node has had {history.attempts_in_window} remediation(s) in the "
            f"last {policy.attempt_window_hours} h (maxAttemptsPerNode={policy.max_attempts_per_node}); "
            "alert only - contact support / RMA the instance"
        )
        action = Action.ALERT

    if labels.get(policy.opt_out_label, "").strip().lower() == "true" and action.cost > Action.ALERT.cost:
        notes.append(
            f"opted out: the node carries {policy.opt_out_label}=true, so {action.value} becomes alert"
        )
        action = Action.ALERT

    if mode is Mode.DRY_RUN and action is not Action.NONE:
        notes.append(f"dry-run mode: would have done {action.value}; nothing is changed")
        action = Action.NONE
    elif mode is Mode.CORDON_ONLY and action.cost > Action.CORDON.cost:
        notes.append(f"cordon-only mode: {action.value} is reduced to cordon")
        action = Action.CORDON

    if pool and pool in policy.node_pools:
        notes.insert(0, f"node pool {pool!r} overrides applied")
    reason = classification.reason + "".join(f". {note}" for note in notes)
    return Decision(
        action=action,
        planned_action=planned,
        reason=reason,
        xid=xid,
        signal=signal,
        confirm_seconds=confirm_seconds,
        escalated=escalated,
    )


def _hours(delta: timedelta) -> str:
    hours = max(delta.total_seconds(), 0) / 3600
    return f"{hours:.1f} h"
