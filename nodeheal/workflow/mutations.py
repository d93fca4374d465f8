"""The mutating steps: cordon, drain rounds, force drain, terminate, reboot, recovery, uncordon.

Each step is short and idempotent (Step Functions may run it twice after a timeout), proves what
nodeheal.workflow.guard lists before mutating (live mode and pause, the admitted node and its
taint, the condition, the lock), and returns a small JSON-able result the state machine stores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from nodeheal.actions import Action, Mode
from nodeheal.errors import (
    ConfigurationError,
    DeadlineExceededError,
    DrainAbortedError,
    Ec2IncorrectStateError,
    Ec2ThrottledError,
    InstanceNotFoundError,
    KubernetesApiError,
    NodeGoneError,
    NodeReplacedError,
    OwnershipVerificationError,
)
from nodeheal.instances import verify_ownership
from nodeheal.kube_views import LiveNode, PodView
from nodeheal.payload import cut_text
from nodeheal.policy.classify import classify
from nodeheal.steps import CHECK_RECOVERY, CORDON, DRAIN, FORCE_DRAIN, REBOOT, TERMINATE, UNCORDON
from nodeheal.timestamps import format_timestamp, parse_timestamp
from nodeheal.workflow import guard, step_events
from nodeheal.workflow.capacity import block_note_at_escalation
from nodeheal.workflow.drain_policy import (
    STILL_TO_GO,
    NodeState,
    PodAction,
    PodClass,
    class_record,
    merged_class_record,
    next_poll_seconds,
    plan_drain,
    with_action,
)
from nodeheal.workflow.episode import remembered_worst
from nodeheal.workflow.ports import InstancePort, KubeAccess, LedgerPort, PodOutcomeView
from nodeheal.workflow.state import WorkflowState

#: One pod's line in a drain result (``namespace/name: the API server's message``): the pod's name
#: takes at most 317 characters, the rest is the message's beginning (D17: the state stays small
#: however long a webhook's or a PDB's explanation is).
MAX_POD_LINE_BYTES = 512


def _pod_line(result: PodOutcomeView) -> str:
    return cut_text(f"{result.pod}: {result.message}", MAX_POD_LINE_BYTES)


def _stamp(now: datetime) -> str:
    return format_timestamp(now, millis=True)


def _fail_on_permanent_errors(failed: Sequence[PodOutcomeView], what: str) -> None:
    """A refusal no retry can fix (403 from RBAC, a webhook's 400) must not be waited out until the
    drain timeout and then forced past: stop now, leave the node cordoned, tell a person."""
    permanent = [_pod_line(result) for result in failed if not result.retryable]
    if permanent:
        raise KubernetesApiError(f"{what} refused for {len(permanent)} pod(s): " + "; ".join(permanent[:5]))


# -- cordon ------------------------------------------------------------------------------------


@step_events.told(CORDON.name, step_events.cordoned)
def cordon(
    state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime, *, mode: Mode
) -> dict[str, Any]:
    admitted = guard.admitted_node(state)
    guard.before_mutation(
        state,
        kube,
        ledger,
        now=now,
        live_mode=mode,
        allowed=(Mode.FULL, Mode.CORDON_ONLY),
        step=CORDON.name,
        # Admitted while another execution's cordon was on the node: that taint gone now means a
        # person took the node back since (a holder that lost the node cannot uncordon it), and
        # what began before that is theirs to decide (I16).
        require_taint=admitted.had_nodeheal_taint,
    )
    decision = (state.step("admission") or {}).get("decision") or {}
    reason = f"{state.condition_type}: {decision.get('reason', '')}".strip()
    try:
        result = kube.nodes.cordon(
            admitted.name,
            execution=state.execution.name,
            reason=reason,
            now=now,
            expected_uid=admitted.uid,
        )
    except NodeGoneError as gone:
        raise NodeReplacedError(
            f"node {admitted.name} was replaced or deleted during cordon: {gone}"
        ) from gone
    return {
        "performed": True,
        "changed": result.changed,
        "flippedUnschedulable": result.flipped_unschedulable,
        "at": _stamp(now),
    }


# -- drain -------------------------------------------------------------------------------------


@step_events.told(DRAIN.name)
def drain_round(
    state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime, *, mode: Mode
) -> dict[str, Any]:
    """One round of the drain: plan every pod (nodeheal.workflow.drain_policy), then evict and
    delete what the plan says. The state machine loops, waiting ``waitSeconds`` (1, 2, 4 s... up
    to drain.pollSeconds) between rounds, until done, refused, or timed out.

    Each round first proves the node is still the admitted, tainted object and its condition is
    still bad (guard.before_mutation): pods are listed by node name, so without that proof a new
    node that took the name mid-drain would have its pods evicted.
    """
    guard.before_mutation(
        state,
        kube,
        ledger,
        now=now,
        live_mode=mode,
        allowed=(Mode.FULL,),
        step=DRAIN.name,
        require_taint=True,
    )
    drain_settings = state.settings.drain
    previous: Mapping[str, Any] = state.step("drain") or {}
    started_at = parse_timestamp(previous["startedAt"], "drain.startedAt") if previous else now
    elapsed = (now - started_at).total_seconds()
    rounds = int(previous.get("rounds", 0)) + 1
    pods, node = _listed_on_admitted_node(state, kube)
    plans = plan_drain(pods, drain_settings, NodeState.of(node), now, started_at)
    # A worse fault read in any round still decides at the reboot (severity only rises, D2): the
    # detector may overwrite the message again before the reboot step reads the node.
    worsened = str(previous.get("worsened", "")) or _worsened_to_replacement(state, node, now)
    base = {
        **({"worsened": worsened} if worsened else {}),
        "startedAt": _stamp(started_at),
        "rounds": rounds,
        # Every class seen in any round: the pods evicted in the first are gone from the last.
        "classes": merged_class_record(previous.get("classes") or {}, class_record(plans)),
        "waitSeconds": next_poll_seconds(rounds - 1, drain_settings.poll_seconds),
        "at": _stamp(now),
    }
    refused = with_action(plans, PodAction.REFUSE)
    if refused:
        # As kubectl drain does, refuse before moving anything: the node stays cordoned for a person.
        named = "; ".join(
            cut_text(f"{plan.pod.key} ({plan.reason})", MAX_POD_LINE_BYTES) for plan in refused[:5]
        )
        result = {
            **previous,
            **base,
            "refused": True,
            "done": False,
            "timedOut": False,
            "summary": (
                f"drain of {state.node_name} refused: {len(refused)} pod(s) the drain policy does not "
                f"allow NodeHeal to move: {named}"
            ),
        }
        step_events.tell(kube, lambda: step_events.drain_refused(state, result, now))
        return result

    to_evict = [plan.pod for plan in with_action(plans, PodAction.EVICT)]
    to_delete = [plan.pod for plan in with_action(plans, PodAction.DELETE)]
    report = kube.pods.evict(to_evict, parallelism=drain_settings.parallelism)
    _fail_on_permanent_errors(report.failed, "eviction")
    deleted_now = 0
    deletion_gone = 0
    if to_delete:
        # A second wave in the same round: the deadline stops it from starting when the evictions
        # took the round's time, and the pods it did not reach are planned for deletion again next
        # round, so the step's timeout (one wave, nodeheal.worst_case) still holds.
        deletion = kube.pods.delete(
            to_delete,
            grace_seconds=drain_settings.force_grace_seconds,
            parallelism=drain_settings.parallelism,
        )
        _fail_on_permanent_errors(deletion.failed, "deletion after drain.deleteAfterSeconds")
        deleted_now, deletion_gone = len(deletion.deleted), len(deletion.gone)
    evicted = int(previous.get("evicted", 0)) + len(report.evicted)
    blocked_now = [_pod_line(r) for r in report.blocked]
    failed_now = [_pod_line(r) for r in report.failed]
    # Pods the round had no time left for are still on the node; the next round asks again.
    not_reached = len(report.not_reached)
    still_to_go = [plan for plan in plans if plan.action in STILL_TO_GO]
    done = not still_to_go
    timed_out = not done and elapsed >= drain_settings.timeout_seconds
    remaining = len(still_to_go) - len(report.gone) - deletion_gone
    deciding = Counter(plan.pod_class for plan in plans)
    terminating = deciding[PodClass.TERMINATING]
    held_back = deciding[PodClass.DO_NOT_DISRUPT_HELD]
    waiting = len(with_action(plans, PodAction.WAIT)) - terminating - held_back
    left = deciding[PodClass.STUCK_TERMINATING]
    summary = (
        f"drain of {state.node_name}: {evicted} pods evicted, {remaining} still on the node "
        f"({terminating} terminating, {len(blocked_now)} blocked by a PodDisruptionBudget, "
        f"{held_back} with karpenter.sh/do-not-disrupt held back, {waiting} left to finish on their own, "
        f"{deleted_now} deleted after drain.deleteAfterSeconds, {len(failed_now)} failed, "
        f"{not_reached} not reached before the deadline; {left} stuck Terminating on a NotReady node "
        f"no longer waited for) after {elapsed:.0f}s of {drain_settings.timeout_seconds}s"
    )
    result = {
        **base,
        "evicted": evicted,
        "deleted": int(previous.get("deleted", 0)) + deleted_now,
        "pdbBlocked": int(previous.get("pdbBlocked", 0)) + len(blocked_now),
        "lastBlocked": blocked_now[:10],
        "lastFailed": failed_now[:10],
        "remaining": remaining,
        "terminating": terminating,
        "heldBackDoNotDisrupt": held_back,
        "waitingToFinish": waiting,
        "stuckTerminating": left,
        "notReached": not_reached,
        "forced": int(previous.get("forced", 0)),
        "refused": False,
        "done": done,
        "timedOut": timed_out,
        "summary": summary,
    }
    step_events.tell(kube, lambda: step_events.drain_round(state, result, to_evict, report, now))
    return result


def _listed_on_admitted_node(state: WorkflowState, kube: KubeAccess) -> tuple[list[PodView], LiveNode]:
    """The pods bound to the admitted Node object, and that Node as read after the list.

    Pods are listed by node name, and the name may pass to a new Node between the guard's proof and
    the list (EC2 reuses private IPs). Proving the node again after the list closes that window: a
    name cannot go back from a new Node to the admitted one, so if the admitted object still holds
    the name now, every pod listed was bound to it. Evictions and deletions then name each pod's
    uid as a precondition, so a later replacement cannot redirect them either.
    """
    pods = kube.pods.list_on_node(state.node_name)
    node = guard.prove_admitted(state, kube, require_taint=True)
    return pods, node


@step_events.told(FORCE_DRAIN.name)
def force_drain(
    state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime, *, mode: Mode
) -> dict[str, Any]:
    """drain.onTimeout=force: delete, with the configured grace period, what the drain policy was
    still moving or waiting for. Pods it leaves (opted out, never-drained namespaces, stuck on a
    NotReady node, DaemonSet and mirror pods) are never forced.

    Forcing goes past PodDisruptionBudgets, so it is done only on the admitted node while its
    condition is still bad (invariant 7): a node that recovered stops here instead.
    """
    guard.before_mutation(
        state,
        kube,
        ledger,
        now=now,
        live_mode=mode,
        allowed=(Mode.FULL,),
        step="force drain",
        require_taint=True,
    )
    previous: Mapping[str, Any] = state.step("drain") or {}
    drain_settings = state.settings.drain
    grace = drain_settings.force_grace_seconds
    started_at = parse_timestamp(previous["startedAt"], "drain.startedAt") if previous else now
    pods, node = _listed_on_admitted_node(state, kube)
    plans = plan_drain(pods, drain_settings, NodeState.of(node), now, started_at)
    refused = with_action(plans, PodAction.REFUSE)
    if refused:
        # A pod the policy forbids moving appeared since the last round: forcing must not move it.
        raise DrainAbortedError(
            f"force drain of {state.node_name} refused: "
            + "; ".join(
                cut_text(f"{plan.pod.key} ({plan.reason})", MAX_POD_LINE_BYTES) for plan in refused[:5]
            )
        )
    leftovers = [plan.pod for plan in plans if plan.action in STILL_TO_GO]
    report = kube.pods.delete(leftovers, grace_seconds=grace, parallelism=drain_settings.parallelism)
    _fail_on_permanent_errors(report.failed, "forced deletion")
    if report.not_reached:
        # "done" would send the node on to reboot or terminate with these pods still on it; the
        # state machine retries this step instead (deletions are uid-preconditioned, so repeatable).
        raise DeadlineExceededError(
            f"forced deletion on {state.node_name}: {len(report.not_reached)} pod(s) not reached "
            f"before the deadline ({len(report.deleted)} deleted in this attempt)"
        )
    forced = len(report.deleted)
    left = len(plans) - len(leftovers)
    summary = (
        f"drain of {state.node_name} timed out; force-deleted {forced} pods with a {grace}s grace period "
        f"({len(report.gone)} already gone, {len(report.failed)} failed; {left} left as the drain "
        "policy says: DaemonSet, mirror, finished, opted-out, never-drained or stuck pods)"
    )
    result = {
        **previous,
        "forced": int(previous.get("forced", 0)) + forced,
        "forceFailed": [_pod_line(r) for r in report.failed][:10],
        "done": True,
        "timedOut": True,
        "summary": summary,
        "at": _stamp(now),
    }
    step_events.tell(kube, lambda: step_events.drain_forced(state, result, leftovers, report, now))
    return result


# -- terminate / reboot ------------------------------------------------------------------------


def _verified_instance(state: WorkflowState, node: LiveNode, ec2: InstancePort) -> Any:
    """The admitted instance, verified to be the live node's and owned by the cluster (None when
    EC2 no longer knows it)."""
    admitted = guard.admitted_node(state)
    instance = ec2.describe(admitted.instance_id)
    if instance is not None:
        verify_ownership(instance, cluster=state.cluster, node=node)
    return instance


@step_events.told(TERMINATE.name, step_events.terminating)
def terminate(
    state: WorkflowState,
    kube: KubeAccess,
    ec2: InstancePort,
    ledger: LedgerPort,
    now: datetime,
    *,
    mode: Mode,
) -> dict[str, Any]:
    escalation = (state.step("recovery") or {}).get("status") == "failed" or bool(
        (state.step("instance") or {}).get("escalateTo")
    )
    node = guard.before_mutation(
        state,
        kube,
        ledger,
        now=now,
        live_mode=mode,
        allowed=(Mode.FULL,),
        step=TERMINATE.name,
        require_taint=True,
        not_ready_counts=escalation,
    )
    admitted = guard.admitted_node(state)
    replace_settings = state.settings.replace
    deferred = block_note_at_escalation(state, now) if escalation else ""
    if deferred:
        # A reboot became a replacement after the cordon: the block's end is checked again now.
        return {
            "performed": False,
            "deferredForCapacity": True,
            "note": deferred,
            "instanceId": admitted.instance_id,
            "escalation": escalation,
            "at": _stamp(now),
        }
    instance = _verified_instance(state, node, ec2)
    report = _report_impaired(state, ec2, instance)
    if instance is None:
        result: dict[str, Any] = {"performed": True, "alreadyGone": True, "previousState": "not-found"}
    elif replace_settings.deletes_nodeclaim and instance.is_gone:
        # A retried step (the first attempt's answer was lost) after Karpenter finished: the
        # NodeClaim went with the instance, and looking for it would fail a done replacement.
        result = {"performed": True, "alreadyGone": True, "previousState": instance.state}
    elif replace_settings.deletes_nodeclaim:
        result = {**_delete_nodeclaim(state, kube), "previousState": instance.state}
    else:
        outcome = ec2.terminate(admitted.instance_id)
        result = {"performed": True, "alreadyGone": outcome.already_gone, "previousState": instance.state}
    node_deleted = False
    if state.settings.delete_node_after_terminate:
        node_deleted = kube.nodes.delete(node.name, node.uid)
    return {
        **result,
        "method": replace_settings.method,
        "instanceId": admitted.instance_id,
        "impairedReport": report,
        "escalation": escalation,
        "nodeDeleted": node_deleted,
        "at": _stamp(now),
    }


#: What keeps the impaired report from being sent: none of them may keep the instance from going.
_REPORT_ERRORS = (
    Ec2ThrottledError,
    Ec2IncorrectStateError,
    InstanceNotFoundError,
    OwnershipVerificationError,
)


def _report_impaired(state: WorkflowState, ec2: InstancePort, instance: Any) -> dict[str, Any]:
    """Tell EC2 the instance's hardware is impaired before it goes (ReportInstanceStatus, D12).

    Only a running instance can be reported, so this comes before TerminateInstances or the
    NodeClaim delete. The report is ``impaired`` with reason ``performance-other`` and the fault's
    start; EC2's ``Description`` is deprecated, so the Xid stays in NodeHeal's own record. AWS uses
    such reports to improve its checks and promises nothing more, so a report EC2 refuses (a
    throttle, a state it no longer accepts, a role without the permission) is recorded, never a
    reason to keep a broken node."""
    if instance is None or instance.state != "running":
        state_name = "gone" if instance is None else instance.state
        return {"sent": False, "note": f"not reported: the instance is {state_name}"}
    admitted = guard.admitted_node(state)
    condition = state.event.condition
    started = condition.last_transition_time or state.event.observed_at
    try:
        ec2.report_impaired(admitted.instance_id, started)
    except _REPORT_ERRORS as error:
        return {"sent": False, "note": f"EC2 refused the report: {type(error).__name__}: {error}"}
    return {
        "sent": True,
        "status": "impaired",
        "reasonCodes": ["performance-other"],
        "startTime": _stamp(started),
    }


def _delete_nodeclaim(state: WorkflowState, kube: KubeAccess) -> dict[str, Any]:
    """``replace.method: delete-nodeclaim``: delete the NodeClaim bound to the admitted instance.

    The NodeClaim is the one whose ``status.providerID`` is the admitted Node's providerID (the
    Node's pool label proves nothing about which NodeClaim owns the instance), deleted under a uid
    precondition. Done means the API server accepted the delete: the NodeClaim now carries a
    deletionTimestamp, or is gone. Karpenter's termination (its own drain, bounded only by the
    NodePool's terminationGracePeriod, then TerminateInstances) is not waited for: NodeHeal's
    drain already ran, and an unbounded wait would hold the lock and the in-flight slot with it.
    """
    if kube.nodeclaims is None:
        raise ConfigurationError(
            'replace.method is "delete-nodeclaim" but this function has no NodeClaim access configured'
        )
    admitted = guard.admitted_node(state)
    claim = kube.nodeclaims.bound_to(admitted.provider_id)
    if claim is None:
        raise OwnershipVerificationError(
            f"no Karpenter NodeClaim has providerID {admitted.provider_id!r} (node {admitted.name}): "
            'nothing deleted. replace.method "delete-nodeclaim" needs Karpenter-managed nodes; '
            'use "ec2-terminate" for others'
        )
    deletion = kube.nodeclaims.delete(claim)
    return {
        "performed": True,
        "nodeClaim": claim.name,
        "nodeClaimUid": claim.uid,
        "alreadyGone": deletion.already_gone,
        "nodeClaimFinalizing": deletion.finalizing,
    }


@step_events.told(REBOOT.name, step_events.rebooting)
def reboot(
    state: WorkflowState,
    kube: KubeAccess,
    ec2: InstancePort,
    ledger: LedgerPort,
    now: datetime,
    *,
    mode: Mode,
) -> dict[str, Any]:
    node = guard.before_mutation(
        state,
        kube,
        ledger,
        now=now,
        live_mode=mode,
        allowed=(Mode.FULL,),
        step=REBOOT.name,
        require_taint=True,
    )
    worse = (
        str((state.step("drain") or {}).get("worsened", ""))
        or _worsened_to_replacement(state, node, now)
        or _remembered_replacement(state, ledger, node, now)
    )
    if worse:
        # Severity only rises (D2): a confirmed fault on the node now calls for replacement (a
        # worse message on this condition, which NPD announces with no new event, or another
        # condition whose own execution has not taken the node over yet), or one did earlier in
        # this episode (any execution's sighting, overwritten by a lesser message since).
        return {"performed": False, "escalateTo": Action.REPLACE.value, "skipped": worse, "at": _stamp(now)}
    admitted = guard.admitted_node(state)
    instance = _verified_instance(state, node, ec2)
    if instance is None or instance.state in ("shutting-down", "terminated"):
        return {"performed": False, "skipped": "instance-gone", "at": _stamp(now)}
    ec2.reboot(admitted.instance_id)
    return {
        "performed": True,
        "instanceId": admitted.instance_id,
        "bootIdBefore": node.boot_id,
        "rebootedAt": _stamp(now),
        "at": _stamp(now),
    }


def _worsened_to_replacement(state: WorkflowState, node: LiveNode, now: datetime) -> str:
    """Why the instance now calls for replacement, or "" when it does not: any confirmed fault on
    the live node (this execution's condition with a worse message, or another condition) whose
    classification is ``replace``. A fault still inside its confirmation time does not count yet."""
    policy = state.settings.policy
    overrides = policy.for_pool(node.labels.get(policy.node_pool_label))
    for condition_type, live in sorted(node.conditions.items()):
        if condition_type == "Ready" or not live.is_bad:
            continue
        classification = classify(live, overrides, policy.unknown_action)
        since = live.last_transition_time or now
        confirmed = (now - since).total_seconds() >= classification.confirm_seconds
        if classification.action is Action.REPLACE and confirmed:
            return (
                f"{condition_type} now reads {classification.signal}, which calls for replacement: "
                "replacing instead of rebooting"
            )
    return ""


def _remembered_replacement(state: WorkflowState, ledger: LedgerPort, node: LiveNode, now: datetime) -> str:
    """Why the instance's episode memory calls for replacement (a confirmed fault seen by any
    execution and still bad on this boot), or "" when it does not."""
    worst = remembered_worst(ledger.sightings(state.cluster, guard.admitted_node(state).subject), node, now)
    if worst is None or worst.planned_action.cost <= Action.REBOOT.cost:
        return ""
    return f"{worst.reason}, which calls for {worst.planned_action.value}: replacing instead of rebooting"


@step_events.told(CHECK_RECOVERY.name, step_events.recovery_checked)
def check_recovery(state: WorkflowState, kube: KubeAccess, now: datetime) -> dict[str, Any]:
    """recovered: new boot ID, Ready, condition not bad (or bad only from before the reboot and
    since cleared); failed: timed out or faulted again after the reboot; pending: keep waiting."""
    instance_step = state.step("instance") or {}
    rebooted_at = parse_timestamp(instance_step.get("rebootedAt"), "instance.rebootedAt")
    boot_before = str(instance_step.get("bootIdBefore", ""))
    timeout = timedelta(seconds=state.settings.reboot.recovery_timeout_seconds)
    checks = int((state.step("recovery") or {}).get("checks", 0)) + 1
    base = {"checks": checks, "at": _stamp(now)}
    try:
        # A reboot keeps the Node object and the instance; anything else is not ours to judge.
        node = guard.prove_admitted(state, kube, require_taint=False)
    except NodeGoneError:
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


@step_events.told(UNCORDON.name, step_events.uncordoned)
def uncordon(
    state: WorkflowState, kube: KubeAccess, ledger: LedgerPort, now: datetime, *, mode: Mode
) -> dict[str, Any]:
    """Undo NodeHeal's cordon: after a successful reboot, or when the condition cleared and
    drain.onConditionCleared is ``uncordon``. Only what NodeHeal put there is removed."""
    node = guard.before_mutation(
        state,
        kube,
        ledger,
        now=now,
        live_mode=mode,
        allowed=(Mode.FULL, Mode.CORDON_ONLY),
        step=UNCORDON.name,
        require_taint=False,
        require_bad=False,
    )
    if not node.cordoned_by_nodeheal:
        return {"performed": False, "skipped": "not-cordoned-by-nodeheal", "at": _stamp(now)}
    admitted = guard.admitted_node(state)
    changed = kube.nodes.uncordon(admitted.name, expected_uid=admitted.uid)
    return {"performed": True, "changed": changed, "at": _stamp(now)}
