"""The workflow's Lambda tasks: what each runs and what it may touch.

Single source of truth for the workflow construct (one function and one least-privilege role per
task), the access construct (which roles get an EKS access entry) and the state machine definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class LedgerItem(Enum):
    """The ledger's item kinds, by partition key (the key schema of ``nodeheal.aws.ledger``)."""

    #: Per-node lock, ``LOCK#<cluster>#<node>``.
    LOCK = "LOCK#{cluster}#*"
    #: A cluster's admission state (budgets, breaker), ``CLUSTER#<cluster>``.
    ADMISSION = "CLUSTER#{cluster}"
    #: Remediation records, ``NODE#<cluster>#<node>``.
    RECORDS = "NODE#{cluster}#*"
    #: Dropped-event records, ``DROPPED#<date>`` (not per cluster: a dropped event may name none).
    DROPPED = "DROPPED#*"

    def leading_keys(self, clusters: Sequence[str]) -> list[str]:
        """``dynamodb:LeadingKeys`` patterns (StringLike) of these items in the configured clusters."""
        if "{cluster}" not in self.value:
            return [self.value]
        return [self.value.format(cluster=cluster) for cluster in clusters]


@dataclass(frozen=True, slots=True)
class LedgerGrant:
    """DynamoDB item actions on the ledger table, limited to items whose partition key is one of
    ``items`` (``dynamodb:LeadingKeys``). Only what the task's code calls: see the docstring of
    each use below."""

    actions: tuple[str, ...]
    items: tuple[LedgerItem, ...]


#: Every Kubernetes-facing step but check-recovery re-checks that its execution still holds the
#: node's lock (``Ledger.lock_holder``: GetItem).
_LOCK_CHECK = (LedgerGrant(("dynamodb:GetItem",), (LedgerItem.LOCK,)),)


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
    #: Seconds; every task is short by design (the state machine owns the waiting).
    timeout_seconds: int = 30
    memory_mb: int = 256


#: record and record-failure: put_record (PutItem of the node's record), release_lock (conditional
#: DeleteItem), and giving the budget slot back (read_admission_state, write_admission_state).
_RECORD = (
    LedgerGrant(("dynamodb:PutItem",), (LedgerItem.RECORDS, LedgerItem.ADMISSION)),
    LedgerGrant(("dynamodb:GetItem",), (LedgerItem.ADMISSION,)),
    LedgerGrant(("dynamodb:DeleteItem",), (LedgerItem.LOCK,)),
)

WORKFLOW_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec(
        "admit",
        "lambdas.admit.handler",
        "Re-read the Node, classify, check budgets and breaker, take the per-node lock",
        kubernetes=True,
        ledger=(
            # The lock (acquire_lock: conditional PutItem, then GetItem of the holder on a lost
            # race; release_lock: conditional DeleteItem when the budget refuses) and the cluster's
            # admission state (read_admission_state, write_admission_state).
            LedgerGrant(("dynamodb:GetItem", "dynamodb:PutItem"), (LedgerItem.LOCK, LedgerItem.ADMISSION)),
            LedgerGrant(("dynamodb:DeleteItem",), (LedgerItem.LOCK,)),
            # node_records: the node's recent remediations (escalation, attempt limit).
            LedgerGrant(("dynamodb:Query",), (LedgerItem.RECORDS,)),
        ),
        publishes_notifications=False,
    ),
    TaskSpec(
        "cordon",
        "lambdas.cordon.handler",
        "Cordon and taint the Node, annotate it with the execution and reason",
        kubernetes=True,
        ledger=_LOCK_CHECK,
    ),
    TaskSpec(
        "drain",
        "lambdas.drain.handler",
        "One eviction round through the Eviction API (PDBs respected)",
        kubernetes=True,
        ledger=_LOCK_CHECK,
        timeout_seconds=60,
        memory_mb=512,
    ),
    TaskSpec(
        "force-drain",
        "lambdas.force_drain.handler",
        "Delete the pods left after the drain timeout with the configured grace period",
        kubernetes=True,
        ledger=_LOCK_CHECK,
        timeout_seconds=60,
        memory_mb=512,
    ),
    TaskSpec(
        "terminate",
        "lambdas.terminate.handler",
        "Verify ownership and the live condition, then terminate the EC2 instance",
        kubernetes=True,
        ledger=_LOCK_CHECK,
        ec2_mutations=("ec2:TerminateInstances",),
        ec2_describe=True,
    ),
    TaskSpec(
        "reboot",
        "lambdas.reboot.handler",
        "Verify ownership and the live condition, then reboot the EC2 instance",
        kubernetes=True,
        ledger=_LOCK_CHECK,
        ec2_mutations=("ec2:RebootInstances",),
        ec2_describe=True,
    ),
    TaskSpec(
        "check-recovery",
        "lambdas.check_recovery.handler",
        "After a reboot: new boot ID, Ready, condition healthy?",
        kubernetes=True,
    ),
    TaskSpec(
        "uncordon",
        "lambdas.uncordon.handler",
        "Undo NodeHeal's cordon after a successful reboot",
        kubernetes=True,
        ledger=_LOCK_CHECK,
    ),
    TaskSpec(
        "record",
        "lambdas.record.handler",
        "Write the remediation record, release the lock and budget slot, notify",
        ledger=_RECORD,
        publishes_notifications=True,
    ),
    TaskSpec(
        "record-failure",
        "lambdas.record_failure.handler",
        "Record a failed remediation (node stays cordoned), release the lock, notify",
        ledger=_RECORD,
        publishes_notifications=True,
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
