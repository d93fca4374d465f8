"""The mutating steps: cordon, drain rounds, force drain, terminate, reboot, recovery, uncordon.

Each step is short and idempotent (Step Functions may run it twice after a timeout), re-checks
what it must before mutating, and returns a small JSON-able result the state machine stores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from nodeheal.actions import Mode
from nodeheal.aws.ec2 import verify_ownership
from nodeheal.errors import (
    ConfigurationError,
    KubernetesApiError,
    LockNotHeldError,
    NodeGoneError,
    OwnershipVerificationError,
)
from nodeheal.kube.model import LiveNode
from nodeheal.payload import cut_text
from nodeheal.timeutil import format_timestamp, parse_timestamp
from nodeheal.workflow.ports import InstancePort, KubeAccess, LedgerPort, PodOutcomeView
from nodeheal.workflow.state import AdmittedNode, WorkflowState

#: One pod's line in a drain result (``namespace/name: the API server's message``): the pod's name
#: takes at most 317 characters, the rest is the message's beginning (D17: the state stays small
#: however long a webhook's or a PDB's explanation is).
MAX_POD_LINE_BYTES = 512


def _pod_line(result: PodOutcomeView) -> str:
    return cut_text(f"{result.pod}: {result.message}", MAX_POD_LINE_BYTES)


def _stamp(now: datetime) -> str:
    return format_timestamp(now, millis=True)


def _admitted_node(state: WorkflowState) -> AdmittedNode:
    node = state.admitted_node
    if node is None:
        raise ConfigurationError("this step needs the admission result; the state has none")
    return node


def _require_lock(state: WorkflowState, ledger: LedgerPort) -> None:
    """Invariant 3: act only while holding the node's lock (a TTL may have expired under us)."""
    holder = ledger.lock_holder(state.cluster, state.node_name)
    if holder != state.execution.name:
        raise LockNotHeldError(
            f"execution {state.execution.name} no longer holds the lock of node {state.node_name} "
            f"(holder: {holder or 'none'}); refusing to act"
        )


def _fail_on_permanent_errors(failed: Sequence[PodOutcomeView], what: str) -> None:
    """A refusal no retry can fix (403 from RBAC, a webhook's 400) must not be waited out until the
    drain timeout and then forced past: stop now, leave the node cordoned, tell a person."""
    permanent = [_pod_line(result) for result in failed if not result.retryable]
    if permanent:
        raise KubernetesApiError(f"{what} refused for {len(permanent)} pod(s): " + "; ".join(permanent[:5]))


def _require_mode(state: WorkflowState, *, allowed: tuple[Mode, ...], step: str) -> None:
    """Invariant 7, defence in depth: the decision already respects the mode; so does each step."""
    if state.settings.mode not in allowed:
        raise ConfigurationError(f"{step} refused: NodeHeal runs in {state.settings.mode.value} mode")


# -- cordon ------------------------------------------------------------------------------------


def cordon(state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime) -> dict[str, Any]:
    _require_mode(state, allowed=(Mode.FULL, Mode.CORDON_ONLY), step="cordon")
    _require_lock(state, ledger)
    admitted = _admitted_node(state)
    decision = (state.step("admission") or {}).get("decision") or {}
    reason = f"{state.condition_type}: {decision.get('reason', '')}".strip()
    try:
        result = kube.nodes.cordon(
            admitted.name,
            execution=state.execution.name,
            reason=reason,
            now=now,
            expected_uid=admitted.uid or None,
        )
    except NodeGoneError as gone:
        return {"performed": False, "skipped": "node-gone", "detail": str(gone), "at": _stamp(now)}
    return {
        "performed": True,
        "changed": result.changed,
        "flippedUnschedulable": result.flipped_unschedulable,
        "at": _stamp(now),
    }


# -- drain -------------------------------------------------------------------------------------


def drain_round(state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime) -> dict[str, Any]:
    """One eviction round. The state machine loops (with a Wait) until done or timed out."""
    _require_mode(state, allowed=(Mode.FULL,), step="drain")
    _require_lock(state, ledger)
    drain_settings = state.settings.drain
    previous: Mapping[str, Any] = state.step("drain") or {}
    started_at = parse_timestamp(previous["startedAt"], "drain.startedAt") if previous else now
    elapsed = (now - started_at).total_seconds()
    pods = kube.pods.list_on_node(state.node_name)
    movable = [pod for pod in pods if pod.needs_eviction]
    not_yet_deleting = [pod for pod in movable if not pod.deletion_requested]
    terminating = len(movable) - len(not_yet_deleting)
    do_not_disrupt_waiting = elapsed < drain_settings.do_not_disrupt_wait_seconds
    to_evict = [pod for pod in not_yet_deleting if not (pod.do_not_disrupt and do_not_disrupt_waiting)]
    held_back = len(not_yet_deleting) - len(to_evict)

    report = kube.pods.evict(to_evict, parallelism=drain_settings.parallelism)
    _fail_on_permanent_errors(report.failed, "eviction")
    evicted = int(previous.get("evicted", 0)) + len(report.evicted)
    blocked_now = [_pod_line(r) for r in report.blocked]
    failed_now = [_pod_line(r) for r in report.failed]
    done = not movable
    timed_out = not done and elapsed >= drain_settings.timeout_seconds
    remaining = len(movable) - len(report.gone)
    summary = (
        f"drain of {state.node_name}: {evicted} pods evicted, {remaining} still on the node "
        f"({terminating} terminating, {len(blocked_now)} blocked by a PodDisruptionBudget, "
        f"{held_back} with karpenter.sh/do-not-disrupt held back, {len(failed_now)} failed) "
        f"after {elapsed:.0f}s of {drain_settings.timeout_seconds}s"
    )
    return {
        "startedAt": _stamp(started_at),
        "rounds": int(previous.get("rounds", 0)) + 1,
        "evicted": evicted,
        "pdbBlocked": int(previous.get("pdbBlocked", 0)) + len(blocked_now),
        "lastBlocked": blocked_now[:10],
        "lastFailed": failed_now[:10],
        "remaining": remaining,
        "terminating": terminating,
        "heldBackDoNotDisrupt": held_back,
        "forced": int(previous.get("forced", 0)),
        "done": done,
        "timedOut": timed_out,
        "summary": summary,
        "at": _stamp(now),
    }


def force_drain(state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime) -> dict[str, Any]:
    """drain.onTimeout=force: delete what is left with the configured grace period."""
    _require_mode(state, allowed=(Mode.FULL,), step="force drain")
    _require_lock(state, ledger)
    previous: Mapping[str, Any] = state.step("drain") or {}
    grace = state.settings.drain.force_grace_seconds
    leftovers = [pod for pod in kube.pods.list_on_node(state.node_name) if pod.needs_eviction]
    report = kube.pods.delete(leftovers, grace_seconds=grace, parallelism=state.settings.drain.parallelism)
    _fail_on_permanent_errors(report.failed, "forced deletion")
    forced = len(report.deleted)
    summary = (
        f"drain of {state.node_name} timed out; force-deleted {forced} pods with a {grace}s grace period "
        f"({len(report.gone)} already gone, {len(report.failed)} failed)"
    )
    return {
        **previous,
        "forced": int(previous.get("forced", 0)) + forced,
        "forceFailed": [_pod_line(r) for r in report.failed][:10],
        "done": True,
        "timedOut": True,
        "summary": summary,
        "at": _stamp(now),
    }


# -- terminate / reboot ------------------------------------------------------------------------


def _verified_instance(
    state: WorkflowState, kube: KubeAccess, ec2: InstancePort, *, escalation: bool
) -> tuple[LiveNode | None, Any, str]:
    """Re-read the node and the instance, and verify both are still what admit decided about.

    Returns (node, instance, skip_reason); skip_reason is non-empty when there is nothing to do.
    """
    admitted = _admitted_node(state)
    node = kube.nodes.get(admitted.name)
    if node is None:
        return None, None, "node-gone"
    if admitted.uid and node.uid != admitted.uid:
        return None, None, "node-replaced"
    live = node.condition(state.condition_type)
    still_bad = live is not None and live.is_bad
    if escalation:
        # After a failed reboot the node may never have come back: not Ready counts as bad too.
        still_bad = still_bad or not node.is_ready
    if not still_bad:
        return node, None, "condition-cleared"
    if node.instance_id != admitted.instance_id:
        raise OwnershipVerificationError(
            f"node {node.name} is now backed by {node.instance_id or 'no EC2 instance'}, not by "
            f"{admitted.instance_id} that was admitted; refusing to act"
        )
    instance = ec2.describe(admitted.instance_id)
    if instance is not None:
        verify_ownership(instance, cluster=state.cluster, node=node)
    return node, instance, ""


def terminate(
    state: WorkflowState, kube: KubeAccess, ec2: InstancePort, ledger: LedgerPort, now: datetime
) -> dict[str, Any]:
    _require_mode(state, allowed=(Mode.FULL,), step="terminate")
    _require_lock(state, ledger)
    escalation = (state.step("recovery") or {}).get("status") == "failed"
    node, instance, skipped = _verified_instance(state, kube, ec2, escalation=escalation)
    admitted = _admitted_node(state)
    if skipped:
        return {"performed": False, "skipped": skipped, "escalation": escalation, "at": _stamp(now)}
    if instance is None:
        result: dict[str, Any] = {"performed": True, "alreadyGone": True, "previousState": "not-found"}
    else:
        outcome = ec2.terminate(admitted.instance_id)
        result = {"performed": True, "alreadyGone": outcome.already_gone, "previousState": instance.state}
    node_deleted = False
    if state.settings.delete_node_after_terminate and node is not None:
        node_deleted = kube.nodes.delete(node.name, node.uid)
    return {
        **result,
        "instanceId": admitted.instance_id,
        "escalation": escalation,
        "nodeDeleted": node_deleted,
        "at": _stamp(now),
    }


def reboot(
    state: WorkflowState, kube: KubeAccess, ec2: InstancePort, ledger: LedgerPort, now: datetime
) -> dict[str, Any]:
    _require_mode(state, allowed=(Mode.FULL,), step="reboot")
    _require_lock(state, ledger)
    node, instance, skipped = _verified_instance(state, kube, ec2, escalation=False)
    admitted = _admitted_node(state)
    if skipped:
        return {"performed": False, "skipped": skipped, "at": _stamp(now)}
    if instance is None or instance.state in ("shutting-down", "terminated"):
        return {"performed": False, "skipped": "instance-gone", "at": _stamp(now)}
    ec2.reboot(admitted.instance_id)
    assert node is not None
    return {
        "performed": True,
        "instanceId": admitted.instance_id,
        "bootIdBefore": node.boot_id,
        "rebootedAt": _stamp(now),
        "at": _stamp(now),
    }


def check_recovery(state: WorkflowState, kube: KubeAccess, now: datetime) -> dict[str, Any]:
    """recovered: new boot ID, Ready, condition not bad (or bad only from before the reboot and
    since cleared); failed: timed out or faulted again after the reboot; pending: keep waiting."""
    instance_step = state.step("instance") or {}
    rebooted_at = parse_timestamp(instance_step.get("rebootedAt"), "instance.rebootedAt")
    boot_before = str(instance_step.get("bootIdBefore", ""))
    timeout = timedelta(seconds=state.settings.reboot.recovery_timeout_seconds)
    node = kube.nodes.get(state.node_name)
    checks = int((state.step("recovery") or {}).get("checks", 0)) + 1
    base = {"checks": checks, "at": _stamp(now)}
    if node is None:
        return {**base, "status": "gone", "detail": "node deleted while rebooting"}
    rebooted = bool(node.boot_id) and node.boot_id != boot_before
    condition = node.condition(state.condition_type)
    if rebooted and node.is_ready:
        if condition is None or not condition.is_bad:
            return {
                **base,
                "status": "recovered",
                "detail": f"boot ID changed, Ready, {state.condition_type} healthy",
            }
        if condition.last_transition_time and condition.last_transition_time > rebooted_at:
            return {
                **base,
                "status": "failed",
                "detail": (
                    f"{state.condition_type} went bad again after the reboot: {condition.message[:200]}"
                ),
            }
    if now - rebooted_at >= timeout:
        what = (
            "did not come back Ready with a new boot ID"
            if not (rebooted and node.is_ready)
            else (f"still reports {state.condition_type}={condition.status if condition else '?'}")
        )
        return {
            **base,
            "status": "failed",
            "detail": f"node {what} within {int(timeout.total_seconds())}s of the reboot",
        }
    return {**base, "status": "pending", "detail": "waiting for the node to come back"}


def uncordon(state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime) -> dict[str, Any]:
    _require_lock(state, ledger)
    admitted = _admitted_node(state)
    try:
        changed = kube.nodes.uncordon(admitted.name, expected_uid=admitted.uid or None)
    except NodeGoneError as gone:
        return {"performed": False, "skipped": "node-gone", "detail": str(gone), "at": _stamp(now)}
    return {"performed": True, "changed": changed, "at": _stamp(now)}
