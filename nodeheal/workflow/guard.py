"""What every step proves before it reads or mutates anything (docs/architecture.md, invariants 1, 2, 4, 8).

The state machine's state is a plan made in the past; the node, its condition, the lock, the pause
switch and the mode may all have changed since. So each mutating step, in this order:

1. reads the mode live (the function's environment: a redeploy in dry-run changes it, D4) and the
   pause switch live (the ledger), and stops with ``RemediationPausedError`` on either;
2. re-reads the Node by name and proves it is the admitted object: same UID, same EC2 instance,
   and (after cordon) still carrying NodeHeal's taint; otherwise ``NodeReplacedError`` (or
   ``NodeGoneError``). EC2 reuses private IPs, so a new node can take the old name mid-drain;
3. checks the condition is still bad, otherwise ``ConditionClearedError`` (never drain further or
   force past a PodDisruptionBudget on a node that is no longer bad);
   Any bad condition it reads that calls for more than the execution planned is remembered in the
   instance's episode memory (D2, ``nodeheal.workflow.episode``) before anything else can stop it;
4. proves it still holds the node's lock and marks the lock as mutating, in one conditional write
   (``claim_mutation``); a preempted execution gets ``SupersededError`` here (D2).

Each of these errors is a stop, not a failure: the state machine catches them by name into
``Record outcome``, which releases the lock and the budget slot and tells a person when needed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from nodeheal.actions import Action, Mode
from nodeheal.conditions import Condition
from nodeheal.errors import (
    ConditionClearedError,
    ConfigurationError,
    NodeGoneError,
    NodeReplacedError,
    RemediationPausedError,
)
from nodeheal.kube_views import LiveNode
from nodeheal.workflow.counted_condition import live_condition
from nodeheal.workflow.episode import sightings_on, worse_than
from nodeheal.workflow.ports import KubeAccess, LedgerPort
from nodeheal.workflow.scope import out_of_scope
from nodeheal.workflow.state import AdmittedNode, WorkflowState
from nodeheal.worst_case import MUTATION_BUSY_SECONDS

#: How long a claimed mutation may still be running (``nodeheal.worst_case.MUTATION_BUSY_SECONDS``).
MUTATION_BUSY = timedelta(seconds=MUTATION_BUSY_SECONDS)


def admitted_node(state: WorkflowState) -> AdmittedNode:
    node = state.admitted_node
    if node is None:
        raise ConfigurationError("this step needs the admission result; the state has none")
    return node


def require_mode(live_mode: Mode, *, allowed: tuple[Mode, ...], step: str) -> None:
    if live_mode not in allowed:
        raise RemediationPausedError(
            f"{step} not done: NodeHeal now runs in {live_mode.value} mode (changed since this "
            "remediation started); the node is left as it is for a person"
        )


def require_not_paused(state: WorkflowState, ledger: LedgerPort, *, step: str) -> None:
    admission_state = ledger.read_admission_state(state.cluster)
    if admission_state.paused:
        why = f" ({admission_state.paused_reason})" if admission_state.paused_reason else ""
        raise RemediationPausedError(
            f"{step} not done: NodeHeal was paused{why} while this remediation ran; the node is "
            "left as it is for a person (resume does not restart this execution)"
        )


def prove_admitted(state: WorkflowState, kube: KubeAccess, *, require_taint: bool) -> LiveNode:
    """The live Node, proven to be the admitted object (UID and instance) and, with
    ``require_taint``, still carrying NodeHeal's taint."""
    admitted = admitted_node(state)
    node = kube.nodes.get(admitted.name)
    if node is None:
        raise NodeGoneError(f"node {admitted.name} was deleted; nothing left to act on")
    if node.uid != admitted.uid or (node.instance_id or "") != admitted.instance_id:
        raise NodeReplacedError(
            f"node name {admitted.name} now belongs to another object (uid {node.uid}, instance "
            f"{node.instance_id or '-'}); admitted was uid {admitted.uid}, instance "
            f"{admitted.instance_id or '-'}; nothing is done to it"
        )
    if require_taint and not node.cordoned_by_nodeheal:
        raise NodeReplacedError(
            f"node {admitted.name} no longer carries NodeHeal's taint: someone took it back "
            "(uncordoned it); NodeHeal stops and leaves it alone"
        )
    return node


def require_still_bad(
    state: WorkflowState,
    node: LiveNode,
    *,
    not_ready_counts: bool = False,
    live: Condition | None = None,
) -> None:
    """``live`` is the condition as read now (a counted signal's is the ledger's window,
    nodeheal.workflow.counted_condition); left out, the Node's is read."""
    if live is None:
        live = node.condition(state.condition_type)
    if live is not None and live.is_bad:
        return
    if not_ready_counts and not node.is_ready:
        # After a failed reboot the node may never have come back: not Ready counts as bad too.
        return
    if displaced_still_bad(state, node):
        # This execution took the node from a holder (it preempted it, or the holder's lock ran
        # out): that holder stopped for it, so its fault, still bad, is this one's to finish (D2).
        return
    shown = f"{live.status}/{live.reason}" if live else "absent"
    raise ConditionClearedError(
        f"{state.condition_type} is no longer bad on node {node.name} ({shown}); NodeHeal stops "
        "and applies drain.onConditionCleared"
    )


def displaced_still_bad(state: WorkflowState, node: LiveNode) -> bool:
    """The fault of the holder this execution took the node from is still bad and in scope.

    A holder that loses the node stops at its next step and leaves its fault to the execution
    that took over; if that one's own fault clears mid-remediation and it stopped too, the other
    fault would be left to nobody, with no new transition to start anything again."""
    displaced = (state.step("admission") or {}).get("displaced") or {}
    condition_type = str(displaced.get("conditionType", ""))
    if not condition_type or condition_type in (state.condition_type, "Ready"):
        return False
    condition = node.condition(condition_type)
    return (
        condition is not None
        and condition.is_bad
        and not out_of_scope(state.settings.scope, node.labels, condition)
    )


def before_mutation(
    state: WorkflowState,
    kube: KubeAccess,
    ledger: LedgerPort,
    *,
    live_mode: Mode,
    allowed: tuple[Mode, ...],
    step: str,
    require_taint: bool,
    now: datetime,
    require_bad: bool = True,
    not_ready_counts: bool = False,
) -> LiveNode:
    """Everything a mutating step proves first (see the module docstring); the live node."""
    require_mode(live_mode, allowed=allowed, step=step)
    require_not_paused(state, ledger, step=step)
    node = prove_admitted(state, kube, require_taint=require_taint)
    remember_worse(state, ledger, node, now)
    if require_bad:
        require_still_bad(
            state, node, not_ready_counts=not_ready_counts, live=live_condition(state, node, ledger, now)
        )
    ledger.claim_mutation(
        state.cluster, admitted_node(state).subject, state.execution.name, step=step, busy_for=MUTATION_BUSY
    )
    return node


def planned_action(state: WorkflowState) -> Action:
    """What the admitted decision's classification asked for (the execution's plan, D2)."""
    decision = (state.step("admission") or {}).get("decision") or {}
    return Action(str(decision.get("plannedAction", decision.get("action", Action.NONE.value))))


def remember_worse(state: WorkflowState, ledger: LedgerPort, node: LiveNode, now: datetime) -> None:
    """Remember each bad condition on the live node that calls for more than this execution
    planned: a later execution of the instance decides by it even if this one is superseded
    before it acts on it, or the detector overwrites the message with a lesser one (D2)."""
    found = sightings_on(node, state.settings.policy, execution=state.execution.name, now=now)
    for sighting in worse_than(found, planned_action(state)):
        ledger.remember_sighting(state.cluster, admitted_node(state).subject, sighting)
