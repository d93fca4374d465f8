"""The workflow's Lambda tasks: what each runs and what it may touch.

What the workflow construct (one function and one least-privilege role per task), the access
construct (which roles get an EKS access entry) and the state machine definition deploy. A step of
the state machine is declared in the step registry (``nodeheal.steps``) and becomes a task here
through :meth:`TaskSpec.of`; ingest and the finalizer are no steps and are declared here.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeheal.grants import LedgerGrant, LedgerItem
from nodeheal.steps import CHECK_RECOVERY, CORDON, DRAIN, FORCE_DRAIN, REBOOT, TERMINATE, UNCORDON, Step
from nodeheal.timing import TASK_TIMEOUT_SECONDS


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
    publishes_notifications: bool = False
    #: Seconds; every task is short by design (the state machine owns the waiting). A workflow
    #: task's comes from ``nodeheal.timing.TASK_TIMEOUT_SECONDS``, which the worst case counts.
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
            publishes_notifications=step.publishes_notifications,
            timeout_seconds=step.timeout_seconds,
            memory_mb=step.memory_mb,
            idempotent=step.idempotent,
        )


#: record, record-failure and the finalizer: execution_end (GetItem of the end marker),
#: put_record (PutItem of the instance's record), release_lock (conditional DeleteItem),
#: withdraw_contention (conditional UpdateItem of the lock, for an execution that contended a
#: holder), lock_holder (GetItem of the lock: a superseded execution is told to a person when no
#: successor holds the node), giving the budget slot back (read_admission_state,
#: write_admission_state), mark_execution_ended (conditional PutItem of the end marker).
_RECORD = (
    LedgerGrant(("dynamodb:PutItem",), (LedgerItem.RECORDS, LedgerItem.ADMISSION, LedgerItem.END)),
    LedgerGrant(("dynamodb:GetItem",), (LedgerItem.ADMISSION, LedgerItem.END, LedgerItem.LOCK)),
    LedgerGrant(("dynamodb:DeleteItem", "dynamodb:UpdateItem"), (LedgerItem.LOCK,)),
)

WORKFLOW_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec(
        "admit",
        "lambdas.admit.handler",
        "Re-read the Node, classify, check budgets and breaker, take the per-node lock",
        kubernetes=True,
        ledger=(
            # The lock (read_lock: GetItem; acquire_lock and preempt_lock: conditional PutItem;
            # release_lock: conditional DeleteItem when the budget refuses or the node recovered)
            # and the cluster's admission state (read_admission_state, write_admission_state).
            LedgerGrant(("dynamodb:GetItem", "dynamodb:PutItem"), (LedgerItem.LOCK, LedgerItem.ADMISSION)),
            # contend: a conditional UpdateItem telling a busy, less severe holder to stand aside.
            LedgerGrant(("dynamodb:DeleteItem", "dynamodb:UpdateItem"), (LedgerItem.LOCK,)),
            # instance_records: the instance's recent remediations (escalation, attempt limit);
            # sightings: the instance's episode memory (docs/architecture.md, D2).
            LedgerGrant(("dynamodb:Query",), (LedgerItem.RECORDS, LedgerItem.EPISODE)),
            # remember_sighting: a conditional UpdateItem of the episode memory.
            LedgerGrant(("dynamodb:UpdateItem",), (LedgerItem.EPISODE,)),
        ),
        publishes_notifications=False,
        timeout_seconds=TASK_TIMEOUT_SECONDS["admit"],
    ),
    TaskSpec.of(CORDON),
    TaskSpec.of(DRAIN),
    TaskSpec.of(FORCE_DRAIN),
    TaskSpec.of(TERMINATE),
    TaskSpec.of(REBOOT),
    TaskSpec.of(CHECK_RECOVERY),
    TaskSpec.of(UNCORDON),
    TaskSpec(
        "record",
        "lambdas.record.handler",
        "Write the remediation record, release the lock and budget slot, notify",
        ledger=_RECORD,
        publishes_notifications=True,
        timeout_seconds=TASK_TIMEOUT_SECONDS["record"],
    ),
    TaskSpec(
        "record-failure",
        "lambdas.record_failure.handler",
        "Record a failed remediation (node stays cordoned), release the lock, notify",
        ledger=_RECORD,
        publishes_notifications=True,
        timeout_seconds=TASK_TIMEOUT_SECONDS["record-failure"],
    ),
)

#: The ingest function is not a workflow task (EventBridge invokes it), listed here for the
#: same single-source reason.
INGEST_TASK = TaskSpec(
    "ingest",
    "lambdas.ingest.handler",
    "Validate contract v1, drop stale/foreign events, start a named execution",
    # put_dropped_event: one PutItem per event it drops, nothing else (heartbeats are metrics).
    ledger=(LedgerGrant(("dynamodb:PutItem",), (LedgerItem.DROPPED,)),),
)


def task(name: str) -> TaskSpec:
    for spec in WORKFLOW_TASKS:
        if spec.name == name:
            return spec
    raise KeyError(name)


#: The finalizer and sweeper (D6): EventBridge invokes it on execution status changes and on a
#: schedule; it reads executions back and ends them in the ledger like Record failure does.
FINALIZER_TASK = TaskSpec(
    "finalize",
    "lambdas.finalize.handler",
    "Record, release and notify for executions that ended outside any Catch (timeout, abort, limits)",
    ledger=_RECORD,
    publishes_notifications=True,
    timeout_seconds=120,
)
