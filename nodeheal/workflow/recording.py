"""Record and Record failure: every execution ends here, with a ledger record and, when a person
should know, a notification. Releases the lock and the budget slot this execution held."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nodeheal.actions import Action, Mode
from nodeheal.errors import (
    ConditionClearedError,
    ContendedError,
    LedgerContentionError,
    NodeGoneError,
    NodeReplacedError,
    RemediationPausedError,
    SupersededError,
)
from nodeheal.payload import bound_message
from nodeheal.policy.catalog import lookup
from nodeheal.timestamps import format_timestamp, parse_timestamp
from nodeheal.workflow import budget
from nodeheal.workflow.ports import LedgerPort, Notification, NotifierPort
from nodeheal.workflow.records import FINALIZERS, RECORD_STEP, Outcome, RemediationRecord, replaces_end
from nodeheal.workflow.state import WorkflowState
from nodeheal.workflow.verdicts import STOP

#: Stage boundaries in pipeline order: (name of the stage ending here, where its timestamp is).
_STAGES: tuple[tuple[str, str], ...] = (
    ("detected", "fault"),
    ("published", "observed"),
    ("ingested", "received"),
    ("started", "started"),
    ("admitted", "admission"),
    ("cordoned", "cordon"),
    ("drained", "drain"),
    ("instanceAction", "instance"),
    ("recovered", "recovery"),
    ("uncordoned", "uncordon"),
)


#: The condition message as a notification shows it (an e-mail, not the ledger's full copy).
_NOTIFIED_MESSAGE_BYTES = 500


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return parse_timestamp(value, "stage time")


def stage_times(state: WorkflowState, now: datetime) -> dict[str, datetime]:
    """When each stage of this remediation completed, from the state (never from wall clocks
    elsewhere): the fault is the condition's lastTransitionTime on the node."""
    times: dict[str, datetime | None] = {
        "fault": state.event.condition.last_transition_time,
        "observed": state.event.observed_at,
        "received": state.received_at,
        "started": state.execution.started_at,
    }
    for key in ("admission", "cordon", "drain", "instance", "recovery", "uncordon"):
        step = state.step(key)
        times[key] = _timestamp(step.get("at")) if step else None
    times["recorded"] = now
    return {key: value for key, value in times.items() if value is not None}


def stage_seconds(times: Mapping[str, datetime]) -> dict[str, float]:
    """Duration of each stage (from the previous boundary present) and the headline totals."""
    durations: dict[str, float] = {}
    previous: datetime | None = None
    for stage, key in _STAGES:
        at = times.get(key)
        if at is None:
            continue
        if previous is not None:
            durations[stage] = max(0.0, (at - previous).total_seconds())
        previous = at
    fault = times.get("fault") or times.get("observed")
    if fault is not None:
        for total, key in (
            ("faultToCordon", "cordon"),
            ("faultToInstanceAction", "instance"),
            ("faultToRecorded", "recorded"),
        ):
            if key in times:
                durations[total] = max(0.0, (times[key] - fault).total_seconds())
    return durations


#: How a step's stop (nodeheal.errors.STOP_ERRORS, caught into ``$.stopped``) ends the record.
_STOP_OUTCOMES: dict[str, tuple[Outcome, str]] = {
    NodeGoneError.__name__: (Outcome.SKIPPED, "node gone"),
    NodeReplacedError.__name__: (Outcome.SKIPPED, "node replaced"),
    ConditionClearedError.__name__: (Outcome.SKIPPED, "condition cleared"),
    RemediationPausedError.__name__: (Outcome.PAUSED, "paused"),
    SupersededError.__name__: (Outcome.SUPERSEDED, "superseded"),
    ContendedError.__name__: (Outcome.SUPERSEDED, "superseded"),
}


def _stop_outcome(state: WorkflowState, stopped: Mapping[str, Any]) -> tuple[Outcome, str]:
    error = str(stopped.get("Error", ""))
    cause = _cause_text(stopped.get("Cause"))
    outcome, headline = _STOP_OUTCOMES.get(error, (Outcome.SKIPPED, error))
    cordoned = bool((state.step("cordon") or {}).get("performed"))
    uncordoned = bool((state.step("uncordon") or {}).get("performed"))
    if uncordoned:
        where = "NodeHeal's cordon was removed (drain.onConditionCleared: uncordon)"
    elif outcome is Outcome.SUPERSEDED:
        where = "its cordon stays for the execution that took over"
    elif cordoned:
        where = "node LEFT CORDONED for a person to check"
    else:
        where = "node was not cordoned"
    return outcome, f"{headline}: {cause} ({where})"


def _outcome(state: WorkflowState, decision_action: Action) -> tuple[Outcome, str]:
    admission = state.step("admission") or {}
    note = str(admission.get("note", ""))
    stopped = state.step("stopped")
    if stopped is not None:
        return _stop_outcome(state, stopped)
    if admission.get("verdict") == STOP:
        return Outcome.SKIPPED, note
    if admission.get("refused"):
        return Outcome.REFUSED, note
    if decision_action is Action.NONE:
        if state.settings.mode is Mode.DRY_RUN:
            planned = (admission.get("decision") or {}).get("plannedAction", "none")
            return Outcome.DRY_RUN, f"dry-run: would have done {planned}"
        return Outcome.RECORDED, "recorded; no action needed"
    if decision_action is Action.ALERT:
        return Outcome.ALERTED, "a person was notified; nothing was touched"
    if decision_action is Action.CORDON:
        return Outcome.CORDONED, "cordoned; left for a person"
    instance = state.step("instance") or {}
    if instance.get("deferredForCapacity"):
        return Outcome.CORDONED, f"node left cordoned: {instance.get('note', '')}"
    if instance.get("skipped"):
        return Outcome.SKIPPED, _skip_explanation(str(instance.get("skipped")))
    recovery = state.step("recovery") or {}
    if instance.get("escalation") and recovery.get("status") != "failed":
        return Outcome.REPLACED, (
            f"the fault worsened before the reboot; instance {instance.get('instanceId', '')} "
            "replaced instead"
        )
    if instance.get("escalation") or recovery.get("status") == "failed":
        return Outcome.REPLACED, f"reboot did not heal the node ({recovery.get('detail', '')}); replaced"
    if decision_action is Action.REPLACE:
        if instance.get("nodeClaim"):
            gone = " (it was already gone)" if instance.get("alreadyGone") else ""
            return Outcome.REPLACED, (
                f"NodeClaim {instance.get('nodeClaim')} deleted{gone}; Karpenter terminates instance "
                f"{instance.get('instanceId', '')}"
            )
        gone = " (instance was already gone)" if instance.get("alreadyGone") else ""
        return Outcome.REPLACED, f"instance {instance.get('instanceId', '')} terminated{gone}"
    if recovery.get("status") == "recovered":
        return Outcome.REBOOTED, f"rebooted and recovered: {recovery.get('detail', '')}"
    if recovery.get("status") == "gone":
        return Outcome.SKIPPED, "node was deleted while rebooting"
    return Outcome.FAILED, "the workflow ended without a known result"


def _skip_explanation(code: str) -> str:
    return {
        "instance-gone": "instance was already shutting down or terminated",
    }.get(code, code)


def record(
    state: WorkflowState,
    ledger: LedgerPort,
    notifier: NotifierPort | None,
    now: datetime,
    *,
    region: str,
) -> dict[str, Any]:
    decision = (state.step("admission") or {}).get("decision") or {}
    action = Action(str(decision.get("action", "none")))
    outcome, summary = _outcome(state, action)
    return _finish(state, ledger, notifier, now, outcome=outcome, summary=summary, region=region)


def record_failure(
    state: WorkflowState,
    ledger: LedgerPort,
    notifier: NotifierPort | None,
    now: datetime,
    *,
    region: str,
    by: str = RECORD_STEP,
    step_may_be_running: bool = False,
) -> dict[str, Any]:
    """``Record failure``'s end, and the finalizer's (``by`` one of
    :data:`~nodeheal.workflow.records.FINALIZERS`; ``step_may_be_running``: see
    :func:`_account_for_end`)."""
    failure = state.step("failure") or {}
    error = str(failure.get("Error", "UnknownError"))
    cause = _cause_text(failure.get("Cause"))
    outcome = Outcome.DRAIN_ABORTED if error == "DrainAbortedError" else Outcome.FAILED
    cordoned = bool((state.step("cordon") or {}).get("performed"))
    where = "node left cordoned for a person" if cordoned else "node was not cordoned"
    summary = f"{error}: {cause} ({where})"
    return _finish(
        state,
        ledger,
        notifier,
        now,
        outcome=outcome,
        summary=summary,
        region=region,
        error=error,
        error_cause=cause,
        by=by,
        step_may_be_running=step_may_be_running,
    )


def _cause_text(cause: Any) -> str:
    """Lambda errors arrive as a JSON string with errorMessage; drain aborts as plain text."""
    if isinstance(cause, str):
        try:
            parsed = json.loads(cause)
        except ValueError:
            return cause[:1000]
        if isinstance(parsed, dict):
            return str(parsed.get("errorMessage", parsed))[:1000]
        return cause[:1000]
    return str(cause or "")[:1000]


def capacity_summary(capacity: Any, instance_step: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the record keeps of the capacity read (D12): the instance's capacity and what the rules
    made of it, flat, leaving out what is empty; and whether EC2 was told the hardware is impaired."""
    if not isinstance(capacity, Mapping) or not capacity.get("read"):
        return {}
    context = capacity.get("context") or {}
    verdict = capacity.get("verdict") or {}
    summary: dict[str, Any] = {
        "lifecycle": context.get("lifecycle") or "on-demand",
        **{
            key: context[key]
            for key in ("reservationId", "reservationType", "reservationEnd", "instanceType")
            if context.get(key)
        },
        **{
            key: verdict[key]
            for key in ("capacityReason", "blockEnd", "landingReservation")
            if verdict.get(key)
        },
        "deferredForCapacity": bool(verdict.get("deferredForCapacity")),
    }
    if (instance_step or {}).get("deferredForCapacity"):
        summary["deferredForCapacity"] = True
        summary.setdefault("blockEnd", context.get("reservationEnd"))
    report = (instance_step or {}).get("impairedReport")
    if isinstance(report, Mapping):
        summary["impairedReported"] = bool(report.get("sent"))
    return summary


def _finish(
    state: WorkflowState,
    ledger: LedgerPort,
    notifier: NotifierPort | None,
    now: datetime,
    *,
    outcome: Outcome,
    summary: str,
    region: str,
    error: str = "",
    error_cause: str = "",
    by: str = RECORD_STEP,
    step_may_be_running: bool = False,
) -> dict[str, Any]:
    admission = state.step("admission") or {}
    decision = admission.get("decision") or {}
    node = state.admitted_node
    drain = state.step("drain") or {}
    times = stage_times(state, now)
    # Admit keeps the live message only when it differs from the event's (D17); else it is the event's.
    condition = {**state.event.condition.to_api(), **(admission.get("condition") or {})}
    xid = decision.get("xid")
    record_ = RemediationRecord(
        cluster=state.cluster,
        node=state.node_name,
        execution=state.execution.name,
        execution_arn=state.execution.arn,
        started_at=state.execution.started_at,
        finished_at=now,
        outcome=outcome,
        action=Action(str(decision.get("action", "none"))),
        planned_action=Action(str(decision.get("plannedAction", decision.get("action", "none")))),
        reason=str(decision.get("reason", admission.get("note", ""))),
        summary=summary,
        xid=int(xid) if xid is not None else None,
        signal=str(decision.get("signal", "")),
        condition={k: str(v) for k, v in condition.items() if k in ("type", "status", "reason", "message")},
        instance_id=node.instance_id if node else (state.event.node.instance_id or ""),
        node_uid=node.uid if node else state.event.node.uid,
        instance_type=node.instance_type if node else state.event.node.instance_type,
        node_pool=node.pool if node else state.event.node.node_pool,
        stage_seconds=stage_seconds(times),
        stage_times={k: format_timestamp(v, millis=True) for k, v in times.items()},
        pods_evicted=int(drain.get("evicted", 0)),
        pdb_blocked=int(drain.get("pdbBlocked", 0)),
        pods_forced=int(drain.get("forced", 0)),
        drain_classes=dict(drain.get("classes") or {}),
        escalated=bool(decision.get("escalated"))
        or (
            outcome is Outcome.REPLACED
            and (
                (state.step("recovery") or {}).get("status") == "failed"
                or bool((state.step("instance") or {}).get("escalation"))
            )
        ),
        capacity=capacity_summary(admission.get("capacity"), state.step("instance")),
        error=error,
        error_cause=error_cause,
        recorded_by=by,
    )
    result = _account_for_end(
        state, ledger, notifier, record_, region=region, step_may_be_running=step_may_be_running
    )
    return {
        "outcome": outcome.value,
        "summary": summary,
        "stageSeconds": record_.stage_seconds,
        "at": format_timestamp(now, millis=True),
        **result,
    }


def _account_for_end(
    state: WorkflowState,
    ledger: LedgerPort,
    notifier: NotifierPort | None,
    record_: RemediationRecord,
    *,
    region: str,
    step_may_be_running: bool = False,
) -> dict[str, Any]:
    """Record, release and notify once per execution, whoever gets here first (docs/architecture.md, D6).

    ``Record outcome``, ``Record failure``, the finalizer and the sweeper may all reach one end
    (a retried task, a failed execution whose Record failure ran, a Record step still running when
    its execution timed out). The end marker is written last, so a crash in between repeats the
    work instead of losing it: the record is rewritten, the releases are conditional, and at worst
    a notification is sent twice.

    What a record step wrote is what happened, and it stands (``records.replaces_record`` and
    ``replaces_end``): a finalizer's record never replaces it, and a record step that finds the
    finalizer's end (it got there first) replaces the record and the end marker's outcome with
    its own, without a second notification. A finalizer that finds a record step's record leaves
    the end to that step while it may still be running (``step_may_be_running``); once it cannot
    be, the step died after its record, and the finalizer finishes that record's end.
    """
    cluster, execution, by = state.cluster, state.execution.name, record_.recorded_by
    ended = ledger.execution_end(cluster, execution)
    if ended is not None and not replaces_end(by, ended.by):
        _release(state, ledger)
        return {"notification": "", "alreadyRecorded": True}
    written = ledger.put_record(record_)
    _release(state, ledger)
    # A finalizer marked this end, or wrote its record, before this record step: it told a person.
    told = ended is not None or (
        by not in FINALIZERS and written.previous is not None and written.previous.recorded_by in FINALIZERS
    )
    if not written.written:
        # The finalizer found a record step's record: what happened. (A refusal always returns
        # the record that refused it; without one there is nothing to notify or mark with.)
        standing = written.previous
        if step_may_be_running or standing is None:
            found = {"outcome": standing.outcome.value, "summary": standing.summary} if standing else {}
            return {"notification": "", "alreadyRecorded": False, "leftToRecordStep": True, **found}
        record_ = standing
    notified = ""
    if not told and notifier is not None and _worth_notifying(state, record_, ledger):
        notified = notifier.publish(render_notification(record_, state, region=region))
    ledger.mark_execution_ended(cluster, execution, record_.outcome.value, by)
    return {
        "notification": notified,
        "alreadyRecorded": False,
        "outcome": record_.outcome.value,
        "summary": record_.summary,
    }


def _release(state: WorkflowState, ledger: LedgerPort) -> None:
    """Give back the lock and the budget slot (retrying a lost race on the shared state item).

    Both are conditional on this execution owning them: a superseded execution releases nothing
    of its successor's."""
    subject = state.subject
    ledger.release_lock(state.cluster, subject, state.execution.name)
    if (state.step("admission") or {}).get("displaced"):
        # It contended a holder and ends without having taken the node over (it stopped, was
        # aborted or timed out): its mark is withdrawn, so the holder goes on with its own fault
        # instead of stopping for a successor that never comes (D2).
        ledger.withdraw_contention(state.cluster, subject, state.execution.name)
    for _ in range(5):
        current = ledger.read_admission_state(state.cluster)
        released = budget.release(current, node=subject, execution=state.execution.name)
        if released is None:
            return
        try:
            ledger.write_admission_state(released)
        except LedgerContentionError:
            continue
        return
    raise LedgerContentionError(f"could not release the budget slot of {state.node_name} after 5 attempts")


def _worth_notifying(state: WorkflowState, record_: RemediationRecord, ledger: LedgerPort) -> bool:
    if record_.outcome is Outcome.RECORDED:
        return False
    if record_.outcome is Outcome.SUPERSEDED:
        # Its successor tells its own story once it holds the node. When none holds it now (the
        # successor still waits, or ended before taking over), the node carries NodeHeal's cordon
        # and a fault nobody is remediating this moment: a person hears of it (D2).
        holder = ledger.lock_holder(state.cluster, state.subject)
        return holder is None or holder == state.execution.name
    if record_.outcome is Outcome.SKIPPED:
        # Only when NodeHeal left the node cordoned: that needs a person.
        return bool((state.step("cordon") or {}).get("performed"))
    return True


def console_url(execution_arn: str, region: str) -> str:
    if not execution_arn:
        return ""
    return (
        f"https://{region}.console.aws.amazon.com/states/home?region={region}"
        f"#/v2/executions/details/{execution_arn}"
    )


_NEXT_STEPS: dict[Outcome, str] = {
    Outcome.REPLACED: "Nothing to do: Karpenter provisions a replacement for the pending pods. "
    "If the same instance type keeps failing in this zone, open an AWS support case.",
    Outcome.REBOOTED: "Nothing to do. If this node faults again within the escalation window "
    "it will be replaced.",
    Outcome.CORDONED: "Inspect the node (kubectl describe node), then uncordon it or let NodeHeal "
    "run in full mode.",
    Outcome.ALERTED: "Look at the node's GPUs (nvidia-smi, dcgmi diag -r 1) and decide; "
    "NodeHeal touched nothing.",
    Outcome.DRY_RUN: "Dry-run: nothing was changed. Review the decision before switching to "
    "cordon-only or full.",
    Outcome.REFUSED: "Budgets or the circuit breaker held this back. Check `nodeheal breaker status`; "
    "reset only once you know why several nodes failed together.",
    Outcome.SKIPPED: "The node is cordoned but was not remediated. Check the node and uncordon it "
    "if healthy.",
    Outcome.PAUSED: "NodeHeal was paused or its mode lowered mid-remediation; the node is left as described. "
    "Check it, then uncordon it or re-evaluate it once NodeHeal runs again.",
    Outcome.SUPERSEDED: "A more urgent remediation of this node was to take over, and none holds the node "
    "now. It takes this fault over if its own cleared; if no later record of this node follows within "
    "the lock wait, re-evaluate it: nodeheal retry EXECUTION (this execution's name).",
    Outcome.DRAIN_ABORTED: "The drain timed out (PodDisruptionBudgets or do-not-disrupt pods). The node is "
    "cordoned: move or stop the remaining pods, then terminate the instance or uncordon.",
    Outcome.FAILED: "The remediation failed and the node is left as described. Read the execution history, "
    "fix the cause, then uncordon or terminate by hand.",
}


def _next_step(record_: RemediationRecord) -> str:
    if record_.capacity.get("deferredForCapacity"):
        return (
            f"The Capacity Block ends at {record_.capacity.get('blockEnd', '?')} and EC2 terminates its "
            "instances 30 minutes (60 for UltraServers) before that: leave the node cordoned until then, "
            "or replace it yourself if a replacement would still be worth having."
        )
    return _NEXT_STEPS.get(record_.outcome, "")


def _capacity_line(capacity: Mapping[str, Any]) -> str:
    """The capacity as a person reads it: how the instance was bought, and what that changed."""
    reservation = capacity.get("reservationId")
    kind = "Capacity Block" if capacity.get("reservationType") == "capacity-block" else "reservation"
    bought = str(capacity.get("lifecycle", "on-demand"))
    parts = [bought + (f" in {kind} {reservation}" if reservation else "")]
    if capacity.get("deferredForCapacity"):
        parts.append(f"replacement deferred: the block ends {capacity.get('blockEnd', '?')}")
    elif capacity.get("capacityReason") == "scarce-pool":
        parts.append("kept rebooting: the pool's on-demand capacity is scarce")
    landing = capacity.get("landingReservation")
    if isinstance(landing, Mapping):
        parts.append(f"the replacement belongs in {landing.get('id')}")
    if "impairedReported" in capacity:
        told = capacity["impairedReported"]
        parts.append("EC2 told the hardware is impaired" if told else "not reported to EC2")
    return "; ".join(parts)


def render_notification(record_: RemediationRecord, state: WorkflowState, *, region: str) -> Notification:
    fault = (
        f"Xid {record_.xid}"
        if record_.xid is not None
        else (record_.signal or record_.condition.get("type", ""))
    )
    entry = lookup(record_.xid) if record_.xid is not None else None
    subject = f"NodeHeal {record_.outcome.value}: {record_.node} ({record_.cluster}) {fault}"
    lines = [
        f"Outcome:   {record_.outcome.value} - {record_.summary}",
        f"Cluster:   {record_.cluster}",
        f"Node:      {record_.node} (pool {record_.node_pool or '-'}, "
        f"{record_.instance_type or 'unknown type'})",
        f"Instance:  {record_.instance_id or '-'}",
        f"Fault:     {fault or '-'}",
        "Condition: " + " ".join(f"{k}={record_.condition.get(k, '')}" for k in ("type", "status", "reason")),
        # The Xid lines are kept whole even when the rest of a long message is cut.
        f"Message:   {bound_message(record_.condition.get('message', ''), _NOTIFIED_MESSAGE_BYTES)}",
    ]
    if entry is not None:
        # Padded like the other labels ("Outcome:   "), whatever the Xid's number of digits.
        lines.append(f"{f'Xid {entry.xid}:':<11}{entry.name} - {entry.meaning}")
        lines.append(f"NVIDIA:    {entry.recommended_action}")
    lines += [
        f"Decision:  {record_.action.value} (policy asked for {record_.planned_action.value})"
        + (" [escalated]" if record_.escalated else ""),
        f"Why:       {record_.reason}",
    ]
    if record_.capacity:
        lines.append(f"Capacity:  {_capacity_line(record_.capacity)}")
    if record_.pods_evicted or record_.pods_forced or record_.pdb_blocked:
        lines.append(
            f"Drain:     {record_.pods_evicted} evicted, {record_.pods_forced} force-deleted, "
            f"{record_.pdb_blocked} evictions refused by PDBs"
        )
    if record_.error:
        lines.append(f"Error:     {record_.error}: {record_.error_cause}")
    lines += [
        f"Execution: {record_.execution}",
        f"Console:   {console_url(record_.execution_arn, region)}",
        f"Next:      {_next_step(record_)}",
    ]
    severity = "action-required" if record_.outcome.needs_person else "info"
    return Notification(
        subject=subject,
        message="\n".join(lines),
        attributes={
            "severity": severity,
            "cluster": record_.cluster,
            "node": record_.node,
            "outcome": record_.outcome.value,
            "action": record_.action.value,
        },
    )
