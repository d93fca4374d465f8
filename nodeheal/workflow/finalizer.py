"""The finalizer and the sweeper: account for executions that ended where no Catch sees (D6).

``Record failure`` runs for every error a task raises, but not when the execution itself ends: a
workflow timeout (``States.Timeout``), an abort (a person, a redeploy), or a data limit
(``States.DataLimitExceeded``, which ``States.ALL`` does not catch). Then no record is written, and
the lock and the budget slot stay taken until their TTL. So:

- the **finalizer** runs on each "Step Functions Execution Status Change" event (FAILED,
  TIMED_OUT, ABORTED) of the remediation state machine. EventBridge delivers those on the default
  bus, best-effort;
- the **sweeper** runs on a schedule and lists the executions that ended in those states since
  its look-back, so an event that never arrived is still accounted for.

Both rebuild the execution's last known state from its history (the last state entered carries
every step's result), then end it like ``Record failure`` does: a ledger record, the lock and the
budget slot released, a person notified. The end marker (``Ledger.mark_execution_ended``) makes
every path idempotent with ``Record outcome``/``Record failure`` and with each other.

Step Functions does not stop a running task when its execution times out or is aborted: a Record
step may write its record before, while or after the finalizer writes ``failed``. What the Record
step wrote is what happened, and it stands (``nodeheal.workflow.records.replaces_record``): the
finalizer's record never replaces it, and a late Record step corrects the finalizer's record and
end marker. A finalizer that finds a Record step's record without an end leaves the end to that
step while it may still be running (:data:`RECORD_STEP_LIFETIME`); after that the step died, and
the sweeper finishes its end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodeheal.errors import InvalidEventError
from nodeheal.steps import RECORD, RECORD_FAILURE
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.ports import LedgerPort, NotifierPort
from nodeheal.workflow.recording import record_failure
from nodeheal.workflow.state import WorkflowState

#: Execution statuses no Catch of the state machine sees.
UNCAUGHT_END_STATUSES = ("FAILED", "TIMED_OUT", "ABORTED")

#: The error each status is recorded under when the execution names none.
_STATUS_ERRORS = {"TIMED_OUT": "States.Timeout", "ABORTED": "ExecutionAborted", "FAILED": "States.Runtime"}

#: How long after its execution stopped a Record step's Lambda may still be running: Step Functions
#: does not stop a running task when the execution times out, is aborted or fails, and a Lambda
#: runs at most its timeout, after up to 10 s of initialisation.
RECORD_STEP_LIFETIME = timedelta(seconds=max(RECORD.timeout_seconds, RECORD_FAILURE.timeout_seconds) + 10)


@dataclass(frozen=True, slots=True)
class EndedExecution:
    arn: str
    name: str
    status: str
    started_at: datetime
    stopped_at: datetime | None
    error: str = ""
    cause: str = ""
    #: The execution's input: what ingest started it with (the event), always available.
    input: Mapping[str, Any] | None = None


class ExecutionsPort(Protocol):
    def describe(self, execution_arn: str) -> EndedExecution: ...
    def last_state(self, execution_arn: str) -> Mapping[str, Any] | None:
        """The input of the last state the execution entered (the whole workflow state)."""
        ...

    def ended_since(self, since: datetime, *, longest_execution: timedelta) -> list[str]:
        """ARNs of the executions that ended in an uncaught status at or after ``since``."""
        ...


@dataclass(frozen=True, slots=True)
class FinalizeResult:
    execution: str
    #: recorded | already-recorded | recording (a Record step's record stands and the step may
    #: still notify and end it) | not-ours | still-running | unreadable
    status: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"execution": self.execution, "status": self.status, "detail": self.detail}


def finalize(
    execution_arn: str,
    *,
    executions: ExecutionsPort,
    ledger: LedgerPort,
    notifier: NotifierPort | None,
    now: datetime,
    region: str,
    by: str,
) -> FinalizeResult:
    """Account for one ended execution, unless a record step already did."""
    ended = executions.describe(execution_arn)
    if ended.status not in UNCAUGHT_END_STATUSES:
        return FinalizeResult(
            ended.name, "still-running" if ended.status == "RUNNING" else "not-ours", ended.status
        )
    try:
        state = _last_state(ended, executions)
    except InvalidEventError as unreadable:
        # Nothing was admitted from an input that no step could read: no lock, no slot to free.
        return FinalizeResult(ended.name, "unreadable", str(unreadable))
    if ledger.execution_ended(state.cluster, ended.name):
        return FinalizeResult(ended.name, "already-recorded")
    error = ended.error or _STATUS_ERRORS.get(ended.status, ended.status)
    cause = ended.cause or f"the execution ended {ended.status.lower().replace('_', ' ')} outside any Catch"
    with_failure = WorkflowState.parse({**state.raw, "failure": {"Error": error, "Cause": cause}})
    stopped = ended.stopped_at
    step_may_be_running = stopped is not None and now < stopped + RECORD_STEP_LIFETIME
    result = record_failure(
        with_failure, ledger, notifier, now, region=region, by=by, step_may_be_running=step_may_be_running
    )
    if result.get("leftToRecordStep"):
        # Its record says what happened; it notifies and ends it, or the sweeper does once it died.
        return FinalizeResult(ended.name, "recording", str(result.get("summary", "")))
    if result.get("alreadyRecorded"):
        return FinalizeResult(ended.name, "already-recorded")
    return FinalizeResult(ended.name, "recorded", str(result.get("summary", "")))


def sweep(
    *,
    executions: ExecutionsPort,
    ledger: LedgerPort,
    notifier: NotifierPort | None,
    now: datetime,
    region: str,
    look_back: timedelta,
    longest_execution: timedelta,
) -> list[FinalizeResult]:
    """Finalize every execution that ended uncaught within ``look_back`` (idempotent)."""
    return [
        finalize(
            arn, executions=executions, ledger=ledger, notifier=notifier, now=now, region=region, by="sweeper"
        )
        for arn in executions.ended_since(now - look_back, longest_execution=longest_execution)
    ]


def _last_state(ended: EndedExecution, executions: ExecutionsPort) -> WorkflowState:
    """The fullest state the execution is known to have reached."""
    last = executions.last_state(ended.arn)
    if last is not None and isinstance(last.get("execution"), Mapping):
        return WorkflowState.parse(last)
    # It ended before "Load settings" ran (or its history is gone): rebuild from the input.
    raw_input = dict(ended.input or {})
    return WorkflowState.parse(
        {
            **raw_input,
            "settings": raw_input.get("settings") or {},
            "execution": {
                "name": ended.name,
                "id": ended.arn,
                "startedAt": format_timestamp(ended.started_at, millis=True),
            },
        }
    )
