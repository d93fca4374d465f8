"""Admit: the gate between an event and any mutation.

The event is a hint, never the truth. Admit re-reads the live Node, stops if it is gone, replaced,
or the condition is no longer bad, classifies the LIVE condition, applies the node's history
(escalation, attempt cap), opt-out and mode, waits out the confirmation time, and for a mutating
action takes the per-node lock and a budget slot, tripping the circuit breaker on a storm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from nodeheal.actions import Action
from nodeheal.conditions import Condition
from nodeheal.kube.model import UNHEALTHY_TAINT_KEY, LiveNode
from nodeheal.policy.decide import Decision, decide
from nodeheal.timeutil import format_timestamp
from nodeheal.workflow import budget
from nodeheal.workflow.ports import KubeAccess, LedgerPort
from nodeheal.workflow.records import node_history
from nodeheal.workflow.scope import out_of_scope
from nodeheal.workflow.state import AdmittedNode, WorkflowState

# Verdicts the state machine branches on ("Admitted?").
PROCEED = "proceed"
CONFIRM = "confirm"
STOP = "stop"


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: str
    decision: Decision | None
    node: AdmittedNode | None
    condition: Condition | None
    at: datetime
    wait_seconds: int = 0
    lock_held: bool = False
    #: Why admit stopped, or what the budget said; shown in the record.
    note: str = ""
    #: The action was lowered to alert by a budget, the breaker or a pause.
    refused: bool = False
    breaker_opened: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "decision": self.decision.to_json() if self.decision else None,
            "node": self.node.to_json() if self.node else None,
            "condition": self.condition.to_api() if self.condition else None,
            "waitSeconds": self.wait_seconds,
            "lockHeld": self.lock_held,
            "note": self.note,
            "refused": self.refused,
            "breakerOpened": self.breaker_opened,
            "at": format_timestamp(self.at, millis=True),
        }


def admit(state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime) -> Admission:
    settings = state.settings
    node = kube.nodes.get(state.node_name)
    if node is None:
        return Admission(STOP, None, None, None, now, note="node no longer exists (live re-check)")
    if state.event.node.uid and node.uid != state.event.node.uid:
        return Admission(
            STOP,
            None,
            None,
            None,
            now,
            note=f"node {node.name} is a new object (uid {node.uid}, event had {state.event.node.uid})",
        )
    admitted_node = _admitted(node, settings.policy.node_pool_label)
    live = node.condition(state.condition_type)
    if live is None or not live.is_bad:
        shown = f"{live.status}/{live.reason}" if live else "absent"
        return Admission(
            STOP,
            None,
            admitted_node,
            live,
            now,
            note=f"condition {state.condition_type} is no longer bad on the live node ({shown})",
        )
    scope_note = out_of_scope(settings.scope, node.labels, live)
    if scope_note:
        return Admission(STOP, None, admitted_node, live, now, note=f"out-of-scope: {scope_note}")

    history = node_history(
        ledger.node_records(
            state.cluster,
            node.name,
            since=now
            - timedelta(
                hours=max(settings.policy.attempt_window_hours, settings.policy.reboot_escalation_hours)
            ),
        ),
        settings.policy,
        now,
    )
    decision = decide(
        live, labels=node.labels, history=history, policy=settings.policy, mode=settings.mode, now=now
    )

    if decision.confirm_seconds > 0 and decision.action is not Action.NONE:
        remaining = _confirmation_remaining(live, decision.confirm_seconds, state, now)
        if remaining > 0:
            # A mutating action holds the node's lock through the wait so a second execution for
            # the same node stops at once; an alert needs no lock (it touches nothing).
            lock_held = False
            if decision.action.mutates_cluster:
                lock = ledger.acquire_lock(
                    state.cluster,
                    node.name,
                    state.execution.name,
                    timedelta(seconds=settings.lock_ttl_seconds),
                )
                if not lock.acquired:
                    return _locked_out(decision, admitted_node, live, now, lock.holder)
                lock_held = True
            return Admission(
                CONFIRM,
                decision,
                admitted_node,
                live,
                now,
                wait_seconds=remaining,
                lock_held=lock_held,
                note=f"waiting {remaining}s for the condition to stay bad {decision.confirm_seconds}s",
            )

    if not decision.action.mutates_cluster:
        return Admission(PROCEED, decision, admitted_node, live, now)

    lock = ledger.acquire_lock(
        state.cluster, node.name, state.execution.name, timedelta(seconds=settings.lock_ttl_seconds)
    )
    if not lock.acquired:
        return _locked_out(decision, admitted_node, live, now, lock.holder)

    verdict = _take_budget_slot(state, kube, ledger, node, admitted_node.pool, now)
    if not verdict.admitted:
        ledger.release_lock(state.cluster, node.name, state.execution.name)
        lowered = replace(
            decision,
            action=Action.ALERT,
            reason=f"{decision.reason} Not acted on: {verdict.reason}.",
        )
        return Admission(
            PROCEED,
            lowered,
            admitted_node,
            live,
            now,
            note=verdict.reason,
            refused=True,
            breaker_opened=verdict.breaker_opened,
        )
    return Admission(PROCEED, decision, admitted_node, live, now, lock_held=True, note=verdict.reason)


def _admitted(node: LiveNode, pool_label: str) -> AdmittedNode:
    return AdmittedNode(
        name=node.name,
        uid=node.uid,
        instance_id=node.instance_id or "",
        provider_id=node.provider_id,
        pool=node.labels.get(pool_label, ""),
        instance_type=node.labels.get("node.kubernetes.io/instance-type", ""),
        boot_id=node.boot_id,
    )


def _confirmation_remaining(
    live: Condition, confirm_seconds: int, state: WorkflowState, now: datetime
) -> int:
    """Seconds until the condition has been bad for ``confirm_seconds`` (0 when it already has)."""
    since = live.last_transition_time or state.event.observed_at
    elapsed = (now - since).total_seconds()
    return max(0, math.ceil(confirm_seconds - elapsed))


def _locked_out(
    decision: Decision, node: AdmittedNode, live: Condition, now: datetime, holder: str
) -> Admission:
    return Admission(
        STOP,
        decision,
        node,
        live,
        now,
        note=f"another remediation of this node is in progress (execution {holder or 'unknown'})",
    )


def _take_budget_slot(
    state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, node: LiveNode, pool: str, now: datetime
) -> budget.BudgetVerdict:
    settings = state.settings

    def pool_health() -> budget.PoolHealth:
        # Lists the whole pool: read only when the budget gets that far (see budget.admit).
        pool_nodes = kube.nodes.list(f"{settings.policy.node_pool_label}={pool}") if pool else [node]
        return budget.PoolHealth(
            pool=pool,
            size=len(pool_nodes),
            unhealthy_nodes=frozenset(
                n.name
                for n in pool_nodes
                if n.name != node.name and any(t.key == UNHEALTHY_TAINT_KEY for t in n.taints)
            ),
        )

    current = ledger.read_admission_state(state.cluster)
    verdict = budget.admit(
        current,
        node=node.name,
        execution=state.execution.name,
        pool=pool_health,
        settings=settings.budgets,
        lock_ttl=timedelta(seconds=settings.lock_ttl_seconds),
        now=now,
    )
    if verdict.state != current:
        # Conditional on the version read above: a concurrent admission makes this raise
        # LedgerContentionError, which the state machine retries (the whole admit re-runs).
        ledger.write_admission_state(verdict.state)
    return verdict
