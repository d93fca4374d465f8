"""The workflow's Lambda tasks: what each runs and what it may touch.

What the workflow construct (one function and one least-privilege role per task), the access
construct (which roles get an EKS access entry) and the state machine definition deploy. A step of
the state machine is declared in the step registry (``nodeheal.steps``) and becomes a task here
through :meth:`TaskSpec.of`; ingest, the counting function and the finalizer are no steps and
are declared here.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeheal.grants import LedgerGrant, LedgerItem
from nodeheal.steps import RECORD_GRANTS, STEPS, Step


@dataclass(frozen=True, slots=True)
class TaskSpec:
    #: Logical name; also the suffix of the function name and the state name's subject.
    name: str
    #: ``module.function`` inside the Lambda asset.
    handler: str
    description: str
    #: Talks to the Kubernetes API of the clusters (needs eks:DescribeCluster and an access entry).
    kubernetes: bool = False
    #: Ledger access; none when empty (the function then gets no table name either).
    ledger: tuple[LedgerGrant, ...] = ()
    #: EC2 mutations allowed, each restricted by the cluster ownership tag condition.
    ec2_mutations: tuple[str, ...] = ()
    #: Needs ec2:DescribeInstances (which supports no resource-level restriction).
    ec2_describe: bool = False
    #: Further EC2 reads on resource ``*`` (``nodeheal.steps.Step.ec2_reads``).
    ec2_reads: tuple[str, ...] = ()
    #: EC2 instance actions IAM cannot limit by tag (``nodeheal.steps.Step.ec2_untagged_instance_actions``).
    ec2_untagged_instance_actions: tuple[str, ...] = ()
    publishes_notifications: bool = False
    #: Seconds; every task is short by design (the state machine owns the waiting). A step's
    #: derives from its longest sequence of calls, which the worst case (nodeheal.worst_case) counts.
    timeout_seconds: int = 30
    memory_mb: int = 256
    #: Running the task again after an invocation that may have done part of its work (a Lambda
    #: timeout) does no harm, so the state machine retries ``Sandbox.Timedout``/``Lambda.Unknown``.
    idempotent: bool = True

    @classmethod
    def of(cls, step: Step) -> TaskSpec:
        """The function of a step of the registry (``nodeheal.steps``), as its entry declares it."""
        return cls(
            step.name,
            step.handler,
            step.description,
            kubernetes=step.kubernetes,
            ledger=step.ledger_grants,
            ec2_mutations=step.ec2_mutations,
            ec2_describe=step.ec2_describe,
            ec2_reads=step.ec2_reads,
            ec2_untagged_instance_actions=step.ec2_untagged_instance_actions,
            publishes_notifications=step.publishes_notifications,
            timeout_seconds=step.timeout_seconds,
            memory_mb=step.memory_mb,
            idempotent=step.idempotent,
        )


#: One task per step of the registry, in its order.
WORKFLOW_TASKS: tuple[TaskSpec, ...] = tuple(TaskSpec.of(step) for step in STEPS)

#: The ingest function is not a workflow task (EventBridge invokes it), listed here for the
#: same single-source reason.
INGEST_TASK = TaskSpec(
    "ingest",
    "lambdas.ingest.handler",
    "Validate contract v1, drop stale/foreign events, start a named execution",
    # put_dropped_event: one PutItem per event it drops, nothing else (heartbeats are metrics).
    ledger=(LedgerGrant(("dynamodb:PutItem",), (LedgerItem.DROPPED,)),),
)

#: The counting function (D22) is not a workflow task either: EventBridge invokes it with each
#: Warning Node Event, and a crossing starts an execution the way ingest does.
COUNT_SIGNALS_TASK = TaskSpec(
    "count-signals",
    "lambdas.count_signals.handler",
    "Count Warning Node Events per instance in sliding windows; start a remediation when one crosses",
    ledger=(
        # read_signal_window (GetItem, consistent) and write_signal_window (conditional PutItem),
        # the only window operations; a window is never deleted, its TTL ends it.
        LedgerGrant(("dynamodb:GetItem", "dynamodb:PutItem"), (LedgerItem.SIGNALS,)),
        # put_dropped_event: a malformed, forged, foreign or unattributed Event is recorded.
        LedgerGrant(("dynamodb:PutItem",), (LedgerItem.DROPPED,)),
    ),
)

#: The finalizer and sweeper (D6): EventBridge invokes it on execution status changes and on a
#: schedule; it reads executions back and ends them in the ledger like Record failure does, with
#: the same grants.
FINALIZER_TASK = TaskSpec(
    "finalize",
    "lambdas.finalize.handler",
    "Record, release and notify for executions that ended outside any Catch (timeout, abort, limits)",
    ledger=RECORD_GRANTS,
    publishes_notifications=True,
    timeout_seconds=120,
)

#: Every function the stack deploys, one role and one log group each.
ALL_TASKS: tuple[TaskSpec, ...] = (*WORKFLOW_TASKS, INGEST_TASK, COUNT_SIGNALS_TASK, FINALIZER_TASK)
