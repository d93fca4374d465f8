"""What NodeHeal tells the cluster about each step: Kubernetes Events on the Node and its pods.

``kubectl describe node NODE`` lists the Events about the node, so a person who finds it cordoned
reads there what NodeHeal decided, what it did and why, as Karpenter's and NTH's Events tell
theirs. Every note ends with the execution's name (``nodeheal history show NAME`` and the Step
Functions console take it from there). Events about pods go to the pod's namespace, where the
workload's owner looks.

=======================  =======  ============================================================
reason                   type     written by, when
=======================  =======  ============================================================
RemediationDecided       Warning  admit, acting (or, dry-run, deciding) on a fault; Normal for none
ConfirmationStarted      Normal   admit, when it starts waiting for the condition to stay bad
WaitingForLock           Normal   admit, when another execution holds the node
RemediationRefused       Warning  admit: a budget, the breaker or a held lock lowered it to alert
RemediationSkipped       Normal   admit found nothing to do, or a step stopped (condition cleared,
                                  node replaced or gone, superseded; Warning when paused)
Cordoned                 Normal   cordon
Draining                 Normal   drain: the first eviction round and each that evicted (or failed
                                  to evict) a pod, with its counts
Drained                  Normal   drain, when no pod that must move is left
DrainTimedOut            Warning  drain, at drain.timeoutSeconds with onTimeout ``force``
DrainAborted             Warning  drain, at drain.timeoutSeconds with onTimeout ``abort``
DrainRefused             Warning  drain, when the drain policy forbids moving a pod (drain.emptyDir
                                  or drain.unmanagedPods ``refuse``): nothing is evicted
DrainForced              Warning  force-drain
Rebooting                Normal   reboot
EscalatedToReplace       Warning  reboot, when the fault now calls for new hardware
Recovered                Normal   check-recovery
RecoveryFailed           Warning  check-recovery; the instance is terminated next
Uncordoned               Normal   uncordon
Terminating              Normal   terminate
ReplacementDeferred      Warning  terminate, when a Capacity Block ends too soon for a replacement
                                  after a reboot turned into one: the node stays cordoned
Evicted                  Normal   drain, on each pod it evicted (as Karpenter's termination does)
ForceDeleted             Warning  force-drain, on each pod it deleted past its PDB
=======================  =======  ============================================================

Telling never fails a step and never changes what it does: :func:`tell` builds and records a
step's Events after the step's work, inside one guard, and the adapter bounds their time
(:mod:`nodeheal.kube.event_writer`). Failures of the workflow itself are not told here: ``Record
failure`` has no cluster access, and the notification and the history carry them.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ParamSpec

from nodeheal.actions import Action
from nodeheal.errors import RemediationPausedError, RemediationStoppedError
from nodeheal.kube_event_body import EventType, ObjectEvent, ObjectRef
from nodeheal.kube_views import UNHEALTHY_TAINT_KEY, PodView
from nodeheal.steps import (
    ADMIT,
    CHECK_RECOVERY,
    CORDON,
    DRAIN,
    FORCE_DRAIN,
    REBOOT,
    STOPPED_REASON,
    TERMINATE,
    UNCORDON,
)
from nodeheal.workflow.ports import DeletionOutcome, EvictionOutcome, KubeAccess
from nodeheal.workflow.state import WorkflowState
from nodeheal.workflow.verdicts import CONFIRM, STOP, WAIT, Admission

logger = logging.getLogger(__name__)

P = ParamSpec("P")


def tell(kube: KubeAccess, build: Callable[[], Sequence[ObjectEvent]]) -> None:
    """Build a step's Events and record them. Nothing here may fail the step being told: a
    mistake in building them is logged and counted as lost Events, like a write that failed."""
    try:
        events = list(build())
        if events:
            kube.events.record(events)
    except Exception as exc:  # the story of a step must never end the step
        logger.exception("the Kubernetes Events of this step were not told")
        kube.events.lost(1, f"{type(exc).__name__}: {exc}")


Result = dict[str, Any]
#: Builds the Events of a step from its state, its result and its time.
ResultStory = Callable[[WorkflowState, Mapping[str, Any], datetime], Sequence[ObjectEvent]]


def told(
    function: str, story: ResultStory | None = None
) -> Callable[[Callable[P, Result]], Callable[P, Result]]:
    """Decorate the step ``function`` (taking ``state``, ``kube`` and ``now``): once it returns,
    tell what ``story`` makes of its result; when it stops (a
    :class:`~nodeheal.errors.RemediationStoppedError`: condition cleared, node replaced or gone,
    paused, superseded), tell the node why before the stop reaches the state machine."""

    def decorate(step: Callable[P, Result]) -> Callable[P, Result]:
        signature = inspect.signature(step)
        missing = {"state", "kube", "now"} - set(signature.parameters)
        if missing:
            raise TypeError(f"{step.__name__} has no parameter {', '.join(sorted(missing))} to tell with")

        @functools.wraps(step)
        def run(*args: P.args, **kwargs: P.kwargs) -> Result:
            arguments = signature.bind(*args, **kwargs).arguments
            state, kube, now = arguments["state"], arguments["kube"], arguments["now"]
            try:
                result = step(*args, **kwargs)
            except RemediationStoppedError as stop:
                tell(kube, functools.partial(_stop_story, state, function, stop, now))
                raise
            if story is not None:
                tell(kube, lambda: story(state, result, now))
            return result

        return run

    return decorate


# -- the pieces every Event shares ---------------------------------------------------------------


def _node(state: WorkflowState) -> ObjectRef:
    """The node this execution is about: the admitted object, or before admission the event's."""
    admitted = state.admitted_node
    if admitted is not None:
        return ObjectRef.node(admitted.name, admitted.uid)
    return ObjectRef.node(state.node_name, state.event.node.uid)


def _event(
    state: WorkflowState,
    function: str,
    now: datetime,
    *,
    reason: str,
    action: str,
    note: str,
    warning: bool = False,
    regarding: ObjectRef | None = None,
    related: ObjectRef | None = None,
    key: str = "",
) -> ObjectEvent:
    return ObjectEvent(
        regarding=regarding or _node(state),
        type=EventType.WARNING if warning else EventType.NORMAL,
        reason=reason,
        action=action,
        note=note,
        execution=state.execution.name,
        function=function,
        at=now,
        related=related,
        key=key,
    )


def _decision(state: WorkflowState) -> Mapping[str, Any]:
    return (state.step("admission") or {}).get("decision") or {}


def _fault(state: WorkflowState) -> str:
    """``GPUProblem=True (Xid 79)``: the condition and what the decision read in it."""
    condition = state.event.condition
    decision = _decision(state)
    xid = decision.get("xid")
    signal = f"Xid {xid}" if isinstance(xid, int) else str(decision.get("signal", ""))
    shown = f"{condition.type}={condition.status}"
    return f"{shown} ({signal})" if signal and signal != shown else shown


def _verb(state: WorkflowState) -> str:
    action = str(_decision(state).get("action", ""))
    return {"replace": "replaced", "reboot": "rebooted"}.get(action, "remediated")


# -- admit ----------------------------------------------------------------------------------------


def admitted(state: WorkflowState, admission: Admission) -> list[ObjectEvent]:
    """Admit's verdict. A wait is told when it starts, not at every re-admission during it."""
    previous = str((state.step("admission") or {}).get("verdict", ""))
    node = admission.node
    regarding = ObjectRef.node(node.name, node.uid) if node is not None else _node(state)
    decision = admission.decision
    at = admission.at

    def event(reason: str, action: str, note: str, *, warning: bool = False) -> ObjectEvent:
        return _event(
            state,
            ADMIT.name,
            at,
            reason=reason,
            action=action,
            note=note,
            warning=warning,
            regarding=regarding,
        )

    if admission.verdict == STOP or decision is None:
        note = f"Nothing done about {state.condition_type}: {admission.note}"
        return [event(STOPPED_REASON, "Admit", note)]
    planned = decision.planned_action.value
    if admission.verdict == CONFIRM:
        if previous == CONFIRM:
            return []
        note = (
            f"{state.condition_type} calls for {planned} ({decision.signal}); {admission.note} before acting"
        )
        return [event("ConfirmationStarted", "Confirm", note)]
    if admission.verdict == WAIT:
        if previous == WAIT:
            return []
        note = f"{state.condition_type} calls for {planned}; {admission.note}"
        return [event("WaitingForLock", "Wait", note)]
    if admission.refused:
        return [event("RemediationRefused", "Admit", f"{planned} not done: {decision.reason}", warning=True)]
    took_over = f" (took the node over from execution {admission.preempted})" if admission.preempted else ""
    status = admission.condition.status if admission.condition is not None else state.event.condition.status
    read = f"Xid {decision.xid}" if decision.xid is not None else decision.signal
    fault = f"{state.condition_type}={status} ({read})"
    note = f"Decided {decision.action.value} for {fault}{took_over}: {decision.reason}"
    return [event("RemediationDecided", "Decide", note, warning=decision.planned_action is not Action.NONE)]


# -- the mutating steps ---------------------------------------------------------------------------------


def cordoned(state: WorkflowState, result: Mapping[str, Any], now: datetime) -> list[ObjectEvent]:
    action = str(_decision(state).get("action", ""))
    then = {
        "reboot": "drain, then reboot the instance",
        "replace": "drain, then terminate the instance",
    }.get(action, "nothing more: a person decides what happens to the node")
    note = (
        f"Cordoned and tainted {UNHEALTHY_TAINT_KEY}:NoSchedule for {_fault(state)}, so no new pod "
        f"lands on the node; next: {then}"
    )
    return [_event(state, CORDON.name, now, reason="Cordoned", action="Cordon", note=note)]


def drain_round(
    state: WorkflowState,
    result: Mapping[str, Any],
    pods: Sequence[PodView],
    report: EvictionOutcome,
    now: datetime,
) -> list[ObjectEvent]:
    """The round on the node (with its counts), then each pod it evicted."""
    rounds = int(result.get("rounds", 0))
    summary = str(result.get("summary", ""))
    node = _node(state)
    if result.get("done"):
        reason, warning = "Drained", False
        note = (
            f"Drained after {rounds} eviction round(s): {int(result.get('evicted', 0))} pod(s) evicted, "
            "none left that must move"
        )
    elif result.get("timedOut"):
        if state.settings.drain.on_timeout == "abort":
            reason, warning = "DrainAborted", True
            note = (
                f"Drain timed out and was aborted (drain.onTimeout=abort): {summary}. The node stays "
                "cordoned for a person; nothing is forced and the instance is not touched"
            )
        else:
            reason, warning = "DrainTimedOut", True
            note = (
                f"Drain timed out: {summary}. drain.onTimeout=force: the pods left are deleted next, "
                f"with a {state.settings.drain.force_grace_seconds}s grace period"
            )
    elif rounds == 1 or report.evicted or report.failed:
        reason, warning = "Draining", False
        note = f"Eviction round {rounds}: {summary}"
    else:
        # A round that only found the same pods still blocked or terminating adds nothing: every
        # poll of a 15-minute drain would otherwise be one more line in `kubectl describe`.
        reason, warning, note = "", False, ""
    told = []
    if reason:
        told.append(
            _event(
                state,
                DRAIN.name,
                now,
                reason=reason,
                action="Drain",
                note=note,
                warning=warning,
                key=str(rounds),
            )
        )
    by_key = {pod.key: pod for pod in pods}
    for outcome in report.evicted:
        pod = by_key.get(outcome.pod)
        if pod is None:
            continue
        note = f"Evicted by NodeHeal from node {node.name}, which is being {_verb(state)} for {_fault(state)}"
        told.append(
            _event(
                state,
                DRAIN.name,
                now,
                reason="Evicted",
                action="Evict",
                note=note,
                regarding=ObjectRef.pod(pod),
                related=node,
            )
        )
    return told


def drain_refused(state: WorkflowState, result: Mapping[str, Any], now: datetime) -> list[ObjectEvent]:
    """The drain policy forbids moving a pod on the node: nothing was evicted, the node stays
    cordoned, and the execution ends as a drain abort."""
    return [
        _event(
            state,
            DRAIN.name,
            now,
            reason="DrainRefused",
            action="Drain",
            note=f"{result.get('summary', '')}. The node stays cordoned for a person; nothing was evicted "
            "and the instance is not touched",
            warning=True,
            key=str(int(result.get("rounds", 0))),
        )
    ]


def drain_forced(
    state: WorkflowState,
    result: Mapping[str, Any],
    pods: Sequence[PodView],
    report: DeletionOutcome,
    now: datetime,
) -> list[ObjectEvent]:
    grace = state.settings.drain.force_grace_seconds
    node = _node(state)
    told = [
        _event(
            state,
            FORCE_DRAIN.name,
            now,
            reason="DrainForced",
            action="ForceDelete",
            note=f"{result.get('summary', '')}; PodDisruptionBudgets were not consulted "
            "(drain.onTimeout=force)",
            warning=True,
        )
    ]
    by_key = {pod.key: pod for pod in pods}
    for outcome in report.deleted:
        pod = by_key.get(outcome.pod)
        if pod is None:
            continue
        note = (
            f"Deleted by NodeHeal with a {grace}s grace period, past its PodDisruptionBudget: the drain of "
            f"node {node.name} ({_fault(state)}) timed out and drain.onTimeout is force"
        )
        told.append(
            _event(
                state,
                FORCE_DRAIN.name,
                now,
                reason="ForceDeleted",
                action="Delete",
                note=note,
                warning=True,
                regarding=ObjectRef.pod(pod),
                related=node,
            )
        )
    return told


def terminating(state: WorkflowState, result: Mapping[str, Any], now: datetime) -> list[ObjectEvent]:
    instance = str(result.get("instanceId", ""))
    if result.get("deferredForCapacity"):
        note = f"Not terminating EC2 instance {instance}: {result.get('note', '')}"
        return [
            _event(
                state,
                TERMINATE.name,
                now,
                reason="ReplacementDeferred",
                action="Terminate",
                note=note,
                warning=True,
            )
        ]
    if result.get("previousState") == "not-found" or (
        result.get("alreadyGone") and result.get("previousState") in ("shutting-down", "terminated")
    ):
        gone = result.get("previousState")
        note = f"EC2 instance {instance} was already gone ({gone}); nothing to terminate"
    else:
        if (state.step("recovery") or {}).get("status") == "failed":
            why = "the reboot did not heal the node (escalation)"
        elif (state.step("instance") or {}).get("escalateTo"):
            why = f"{_fault(state)}, which now calls for new hardware rather than a reboot (escalation)"
        else:
            why = _fault(state)
        if result.get("nodeClaim"):
            note = (
                f"Deleted NodeClaim {result.get('nodeClaim')} for {why}; Karpenter's termination drains "
                f"the node and terminates EC2 instance {instance}, and Karpenter launches a replacement"
            )
        else:
            note = (
                f"Terminating EC2 instance {instance} for {why}; the node's pool (Karpenter, the node "
                "group) launches a replacement for the evicted pods"
            )
    if result.get("nodeDeleted"):
        note += "; the Node object is deleted (deleteNodeAfterTerminate)"
    return [_event(state, TERMINATE.name, now, reason="Terminating", action="Terminate", note=note)]


def rebooting(state: WorkflowState, result: Mapping[str, Any], now: datetime) -> list[ObjectEvent]:
    if result.get("performed"):
        note = (
            f"Rebooting EC2 instance {result.get('instanceId', '')} for {_fault(state)}; waiting up to "
            f"{state.settings.reboot.recovery_timeout_seconds}s for the node to come back Ready with a new "
            "boot ID and the condition healthy"
        )
        return [_event(state, REBOOT.name, now, reason="Rebooting", action="Reboot", note=note)]
    if result.get("escalateTo"):
        note = f"Not rebooting: {result.get('skipped', '')}"
        return [
            _event(
                state,
                REBOOT.name,
                now,
                reason="EscalatedToReplace",
                action="Escalate",
                note=note,
                warning=True,
            )
        ]
    note = "Not rebooting: the EC2 instance is already shutting down or gone"
    return [_event(state, REBOOT.name, now, reason=STOPPED_REASON, action="Reboot", note=note)]


def recovery_checked(state: WorkflowState, result: Mapping[str, Any], now: datetime) -> list[ObjectEvent]:
    status = result.get("status")
    detail = str(result.get("detail", ""))
    if status == "recovered":
        note = f"Recovered after the reboot: {detail}; NodeHeal's cordon is removed next"
        return [
            _event(state, CHECK_RECOVERY.name, now, reason="Recovered", action="CheckRecovery", note=note)
        ]
    if status == "failed":
        note = f"Not recovered after the reboot: {detail}; the instance is terminated next"
        return [
            _event(
                state,
                CHECK_RECOVERY.name,
                now,
                reason="RecoveryFailed",
                action="CheckRecovery",
                note=note,
                warning=True,
            )
        ]
    return []


def uncordoned(state: WorkflowState, result: Mapping[str, Any], now: datetime) -> list[ObjectEvent]:
    if not result.get("performed"):
        return []
    recovered = (state.step("recovery") or {}).get("status") == "recovered"
    why = (
        "the node recovered after the reboot"
        if recovered
        else f"{state.condition_type} cleared (drain.onConditionCleared=uncordon)"
    )
    note = f"Uncordoned: NodeHeal's cordon and {UNHEALTHY_TAINT_KEY} taint are removed, since {why}"
    return [_event(state, UNCORDON.name, now, reason="Uncordoned", action="Uncordon", note=note)]


def _stop_story(
    state: WorkflowState, function: str, stop: RemediationStoppedError, now: datetime
) -> list[ObjectEvent]:
    return [stopped(state, function, stop, now)]


def stopped(state: WorkflowState, function: str, stop: RemediationStoppedError, now: datetime) -> ObjectEvent:
    """A step's stop, with its reason: the error's message says what was not done and why."""
    return _event(
        state,
        function,
        now,
        reason=STOPPED_REASON,
        action="Stop",
        note=f"Stopped ({type(stop).__name__.removesuffix('Error')}): {stop}",
        warning=isinstance(stop, RemediationPausedError),
        key=f"stop:{function}",
    )
