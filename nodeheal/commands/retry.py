"""``nodeheal retry EXECUTION``: look at a failed remediation's node again, in a new execution.

Why not Step Functions' redrive: a redrive "continues the failed execution from the unsuccessful
step and uses the same input", under the same execution ARN and the same state machine definition
(https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html), so a fix deployed
since is not used. For a NodeHeal remediation it resumes nothing useful. A run that failed in a
task already went through ``Record failure`` to the ``Remediation failed`` Fail state; a run that
timed out or was aborted was ended by the finalizer (or the sweeper), which recorded it, released
its node's lock and budget slot and marked its end. A redrive of that one would carry on draining
or terminating a node it no longer holds, and its own end would never be recorded or notified (the
end marker makes recording idempotent).

``retry`` starts a fresh execution from the failed one's input (the event that started it), named
``<base name>-r<N>`` with N from the cluster's counter in the ledger, exactly as ``breaker reset``
names its re-evaluations (D3 in docs/architecture.md;
:func:`nodeheal.commands.breaker.start_reevaluation`). It
begins at Admit, which re-reads the live node, takes the lock and a budget slot, and decides again
with the node's history, so whatever the failed run did (a cordon, a reboot) is accounted for.

Refused (exit 2, the person named something that cannot be retried): an execution that does not
exist or belongs to another state machine, one that has not ended FAILED, TIMED_OUT or ABORTED,
or one whose input is not a NodeHeal event. Not started (exit 1): the cluster is paused or its
breaker is open (Admit would refuse it), another execution holds the node (it re-reads the node
already), or the person did not confirm.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeheal.commands.aws_access import STATE_MACHINE_OUTPUT, add_aws_arguments, aws_errors
from nodeheal.commands.breaker import (
    DeployedWorkflow,
    Started,
    deployed_workflow,
    start_reevaluation,
)
from nodeheal.commands.history import open_ledger
from nodeheal.commands.output import confirm, print_fields, print_json
from nodeheal.errors import ConfigurationError, InvalidEventError
from nodeheal.events import NodeConditionEvent
from nodeheal.timestamps import format_timestamp, utc_now
from nodeheal.workflow.budget import BreakerState
from nodeheal.workflow.finalizer import UNCAUGHT_END_STATUSES, EndedExecution
from nodeheal.workflow.ingest import execution_name
from nodeheal.workflow.records import identity_key

EXIT_NOT_STARTED = 1
#: Who asked, in the new execution's ``eventId`` (``retry-of-<failed name>-r<N>``).
STARTED_BY = "retry-of"
#: Characters of the failed execution's cause shown to a person (the console has all of it).
CAUSE_SHOWN = 300

#: Why each status that is not an uncaught end cannot be retried, and what to do instead.
_NOT_RETRYABLE = {
    "RUNNING": "is still running: a retry would race it for the node. Wait for it to end, or stop it "
    "in the Step Functions console (the finalizer records it), then retry",
    "SUCCEEDED": "succeeded: it ended as its record says (`nodeheal history show {name}`). To have "
    "NodeHeal look at a node that is still bad, run `nodeheal breaker reset --cluster CLUSTER`, which "
    "re-evaluates every node still bad",
    "PENDING_REDRIVE": "is being redriven in Step Functions: wait for that run to end",
}


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "retry",
        help="start a failed, timed-out or aborted remediation again as a new execution",
        description=(
            "Start a new remediation execution from a failed one's input (its event), named "
            "<base name>-r<N> like breaker reset's re-evaluations (N from the cluster's counter in the "
            "ledger). It starts at Admit, which re-reads the live node, takes its lock and a budget slot "
            "and decides again with the node's history. Use it instead of Step Functions' redrive, which "
            "resumes the failed run after its lock was released (docs/operations.md, runbook "
            "'remediation failed'). Shows what it will start and asks first."
        ),
        epilog=(
            "exit status: 0 started; 1 not started (the cluster is paused or its breaker is open, another "
            "execution holds the node, or not confirmed); 2 EXECUTION cannot be retried (unknown, of "
            "another state machine, not FAILED, TIMED_OUT or ABORTED, or its input is not a NodeHeal "
            "event) or bad usage"
        ),
    )
    parser.add_argument(
        "execution",
        metavar="EXECUTION",
        help="the failed execution's name (as in the console and `nodeheal history`) or ARN",
    )
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_aws_arguments(parser)
    parser.add_argument(
        "--state-machine",
        metavar="ARN",
        help=f"remediation state machine (default: the stack's {STATE_MACHINE_OUTPUT} output)",
    )
    parser.add_argument("--json", action="store_true", help="print the failed and the new execution as JSON")
    parser.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class _Failed:
    """The execution to retry, and what the ledger knows about its node."""

    execution: EndedExecution
    event: NodeConditionEvent
    #: Its end is recorded (Record failure, the finalizer or the sweeper ran): lock and slot released.
    recorded: bool
    #: The execution holding the node's lock now, if any (the failed one itself until it is recorded).
    lock_holder: str | None


def run(args: argparse.Namespace) -> int:
    workflow = deployed_workflow(args)
    ledger, _, table = open_ledger(args)
    ended = _describe(workflow, args.execution)
    event = _event_of(ended)
    with aws_errors(f"read ledger table {table}"):
        state = ledger.read_admission_state(event.cluster)
        failed = _Failed(
            ended,
            event,
            recorded=ledger.execution_ended(event.cluster, ended.name),
            lock_holder=ledger.lock_holder(event.cluster, _subject(event)),
        )
    if not args.json:
        _show(failed, workflow)
    blocked = _why_not_now(
        failed, paused=state.paused_reason if state.paused else None, breaker=state.breaker
    )
    if blocked:
        print(f"nodeheal retry: not started: {blocked}", file=sys.stderr)
        return EXIT_NOT_STARTED
    question = f"Start a new execution for {event.node.name} ({event.condition.type}) from {ended.name}?"
    if not confirm(question, assume_yes=args.yes):
        print("cancelled; nothing started", file=sys.stderr)
        return EXIT_NOT_STARTED
    with aws_errors(f"start a retry of {ended.name}"):
        started = start_reevaluation(
            ledger, workflow, event, started_by=f"{STARTED_BY}-{ended.name}", now=utc_now()
        )
    if not started.new:
        # N comes from an atomic counter and is never reused: only a hand-made execution can collide.
        print(f"nodeheal retry: {started.execution} exists already; nothing started", file=sys.stderr)
        return EXIT_NOT_STARTED
    if args.json:
        print_json(_result_json(failed, started))
    else:
        print(f"started {started.execution}")
        print(f"  follow it with: nodeheal history show {started.execution}")
    return 0


def _describe(workflow: DeployedWorkflow, execution: str) -> EndedExecution:
    """The execution named by a name or an ARN, or a ConfigurationError saying why it cannot be retried."""
    from botocore.exceptions import ClientError

    from nodeheal.aws.executions import StepFunctionsExecutions

    arn = execution if execution.startswith("arn:") else _execution_arn(workflow.arn, execution)
    with aws_errors(f"describe execution {execution}"):
        try:
            ended = StepFunctionsExecutions(workflow.client, workflow.arn).describe(arn)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("ExecutionDoesNotExist", "InvalidArn"):
                raise ConfigurationError(
                    f"no execution {execution!r} in state machine {workflow.arn} ({code}); "
                    "`nodeheal history` lists the executions by name"
                ) from None
            raise
    if ended.status == "NOT_OURS":
        raise ConfigurationError(
            f"{execution} is not an execution of NodeHeal's state machine {workflow.arn}: pass "
            "--state-machine or --stack to name the one it belongs to"
        )
    if ended.status not in UNCAUGHT_END_STATUSES:
        why = _NOT_RETRYABLE.get(ended.status, "has not failed").format(name=ended.name)
        raise ConfigurationError(
            f"{ended.name} is {ended.status} and {why}; only a FAILED, TIMED_OUT or ABORTED execution can "
            "be retried"
        )
    return ended


def _execution_arn(state_machine_arn: str, name: str) -> str:
    """``arn:<partition>:states:<region>:<account>:execution:<state machine>:<name>``: the ARN Step
    Functions gives an execution of that state machine (``deployed_workflow`` read it as one)."""
    return f"{state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def _event_of(ended: EndedExecution) -> NodeConditionEvent:
    document = ended.input or {}
    try:
        return NodeConditionEvent.from_detail(document.get("event"))
    except InvalidEventError as exc:
        raise ConfigurationError(
            f"the input of {ended.name} is not a NodeHeal event ({exc}): it was not started by NodeHeal"
        ) from None


def _subject(event: NodeConditionEvent) -> str:
    """The node's lock key as Admit took it for this event (the instance; D1 in docs/architecture.md)."""
    return identity_key(event.node.instance_id or "", event.node.uid, event.node.name)


def _why_not_now(failed: _Failed, *, paused: str | None, breaker: BreakerState) -> str:
    cluster = failed.event.cluster
    if paused is not None:
        return (
            f"{cluster} is paused ({paused}): Admit would refuse it; `nodeheal resume --cluster {cluster}` "
            "first"
        )
    if breaker.open:
        return (
            f"the circuit breaker of {cluster} is open ({breaker.reason}): Admit would refuse it, and the "
            f"refusal would count toward keeping it open; `nodeheal breaker reset --cluster {cluster}` "
            "closes it and re-evaluates every node still bad, this one included"
        )
    holder = failed.lock_holder
    if holder and holder != failed.execution.name:
        return (
            f"{holder} holds {failed.event.node.name} now: it re-reads the node already "
            f"(`nodeheal history show {holder}` once it ends)"
        )
    return ""


def _show(failed: _Failed, workflow: DeployedWorkflow) -> None:
    ended, event = failed.execution, failed.event
    stopped = format_timestamp(ended.stopped_at) if ended.stopped_at else "?"
    error = f"{ended.error}: {_shortened(ended.cause)}" if ended.error else "no error given"
    condition = event.condition
    if failed.recorded:
        recorded = f"yes: lock and budget slot released (`nodeheal history show {ended.name}`)"
    elif failed.lock_holder == ended.name:
        recorded = (
            "not yet: it still holds the node's lock until the finalizer records it (within minutes); "
            "the new execution waits behind it until then"
        )
    else:
        recorded = "not yet (the finalizer or the sweeper records it within minutes)"
    print_fields(
        [
            ("execution", f"{ended.name} ({ended.status} at {stopped})"),
            ("error", error),
            (
                "node",
                f"{event.node.name} (instance {event.node.instance_id or '?'}, cluster {event.cluster})",
            ),
            ("condition", f"{condition.type}={condition.status} ({condition.reason})"),
            ("recorded", recorded),
            (
                "will start",
                f"{execution_name(event)}-r<N> (N: the cluster's next re-evaluation number) on "
                f"{workflow.arn}, with the same event; Admit re-reads the live node first",
            ),
        ],
        wrap=100,
    )


def _shortened(text: str) -> str:
    return text if len(text) <= CAUSE_SHOWN else text[: CAUSE_SHOWN - 3] + "..."


def _result_json(failed: _Failed, started: Started) -> dict[str, Any]:
    ended = failed.execution
    retried: Mapping[str, Any] = {
        "execution": ended.name,
        "arn": ended.arn,
        "status": ended.status,
        "stoppedAt": format_timestamp(ended.stopped_at) if ended.stopped_at else None,
        "error": ended.error or None,
        "cause": ended.cause or None,
        "recorded": failed.recorded,
    }
    return {
        "cluster": failed.event.cluster,
        "node": failed.event.node.name,
        "retried": retried,
        "started": {"execution": started.execution, "arn": started.arn, "input": started.input},
    }
