"""The workflow's Lambda tasks: what each runs and what it may touch.

Single source of truth for the workflow construct (one function and one least-privilege role per
task), the access construct (which roles get an EKS access entry) and the state machine definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from nodeheal.timing import TASK_TIMEOUT_SECONDS


class LedgerAccess(Enum):
    NONE = "none"
    READ = "read"
    READ_WRITE = "read-write"


@dataclass(frozen=True, slots=True)
class TaskSpec:
    #: Logical name; also the suffix of the function name and the state name's subject.
    name: str
    #: ``module.function`` inside the Lambda asset.
    handler: str
    description: str
    #: Talks to the Kubernetes API of the clusters (needs eks:DescribeCluster and an access entry).
    kubernetes: bool = False
    ledger: LedgerAccess = LedgerAccess.NONE
    #: EC2 mutations allowed, each restricted by the cluster ownership tag condition.
    ec2_mutations: tuple[str, ...] = ()
    #: Needs ec2:DescribeInstances (which supports no resource-level restriction).
    ec2_describe: bool = False
    publishes_notifications: bool = False
    #: Seconds; every task is short by design (the state machine owns the waiting). A workflow
    #: task's comes from ``nodeheal.timing.TASK_TIMEOUT_SECONDS``, which the worst case counts.
    timeout_seconds: int = 30
    memory_mb: int = 256


WORKFLOW_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec(
        "admit",
        "lambdas.admit.handler",
        "Re-read the Node, classify, check budgets and breaker, take the per-node lock",
        kubernetes=True,
        ledger=LedgerAccess.READ_WRITE,
        publishes_notifications=False,
        timeout_seconds=TASK_TIMEOUT_SECONDS["admit"],
    ),
    TaskSpec(
        "cordon",
        "lambdas.cordon.handler",
        "Cordon and taint the Node, annotate it with the execution and reason",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        timeout_seconds=TASK_TIMEOUT_SECONDS["cordon"],
    ),
    TaskSpec(
        "drain",
        "lambdas.drain.handler",
        "One eviction round through the Eviction API (PDBs respected)",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        memory_mb=512,
        timeout_seconds=TASK_TIMEOUT_SECONDS["drain"],
    ),
    TaskSpec(
        "force-drain",
        "lambdas.force_drain.handler",
        "Delete the pods left after the drain timeout with the configured grace period",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        memory_mb=512,
        timeout_seconds=TASK_TIMEOUT_SECONDS["force-drain"],
    ),
    TaskSpec(
        "terminate",
        "lambdas.terminate.handler",
        "Verify ownership and the live condition, then terminate the EC2 instance",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        ec2_mutations=("ec2:TerminateInstances",),
        ec2_describe=True,
        timeout_seconds=TASK_TIMEOUT_SECONDS["terminate"],
    ),
    TaskSpec(
        "reboot",
        "lambdas.reboot.handler",
        "Verify ownership and the live condition, then reboot the EC2 instance",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        ec2_mutations=("ec2:RebootInstances",),
        ec2_describe=True,
        timeout_seconds=TASK_TIMEOUT_SECONDS["reboot"],
    ),
    TaskSpec(
        "check-recovery",
        "lambdas.check_recovery.handler",
        "After a reboot: new boot ID, Ready, condition healthy?",
        kubernetes=True,
        timeout_seconds=TASK_TIMEOUT_SECONDS["check-recovery"],
    ),
    TaskSpec(
        "uncordon",
        "lambdas.uncordon.handler",
        "Undo NodeHeal's cordon after a successful reboot",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        timeout_seconds=TASK_TIMEOUT_SECONDS["uncordon"],
    ),
    TaskSpec(
        "record",
        "lambdas.record.handler",
        "Write the remediation record, release the lock and budget slot, notify",
        ledger=LedgerAccess.READ_WRITE,
        publishes_notifications=True,
        timeout_seconds=TASK_TIMEOUT_SECONDS["record"],
    ),
    TaskSpec(
        "record-failure",
        "lambdas.record_failure.handler",
        "Record a failed remediation (node stays cordoned), release the lock, notify",
        ledger=LedgerAccess.READ_WRITE,
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
    ledger=LedgerAccess.READ_WRITE,
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
    ledger=LedgerAccess.READ_WRITE,
    publishes_notifications=True,
    timeout_seconds=120,
)
