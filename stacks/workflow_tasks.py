"""The workflow's Lambda tasks: what each runs and what it may touch.

Single source of truth for the workflow construct (one function and one least-privilege role per
task), the access construct (which roles get an EKS access entry) and the state machine definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from nodeheal.deadline import LAMBDA_RESERVE_SECONDS
from nodeheal.kube.client import DEFAULT_REQUEST_TIMEOUT
from nodeheal.runtime import AWS_CONNECT_TIMEOUT_SECONDS, AWS_READ_TIMEOUT_SECONDS

#: Seconds of one Kubernetes request answered just inside its timeouts: connect 5 + read 30 = 35.
KUBE_REQUEST_SECONDS = sum(DEFAULT_REQUEST_TIMEOUT)
#: Seconds of one AWS call answered on its first attempt just inside its timeouts: connect 2 +
#: read 5 = 7. botocore's retries of a slow AWS are not budgeted: the deadline stops them
#: (DeadlineExceededError) and the state machine retries the step.
AWS_CALL_SECONDS = AWS_CONNECT_TIMEOUT_SECONDS + AWS_READ_TIMEOUT_SECONDS


def lambda_timeout(*, kube_requests: int, aws_calls: int) -> int:
    """The Lambda timeout of a step whose longest sequence of calls is ``kube_requests`` Kubernetes
    requests and ``aws_calls`` AWS calls one after the other, each answered just inside its
    timeouts, plus the deadline's reserve; rounded up to 10 s.

    With it, a step finishes when every call is slow but answered; when calls time out, its
    deadline (this timeout minus the reserve) raises DeadlineExceededError before Lambda kills it.
    Parallel requests (one wave of evictions) count once: the deadline stops a round from
    starting another wave, and the pods it did not reach wait for the next round.
    """
    worst = kube_requests * KUBE_REQUEST_SECONDS + aws_calls * AWS_CALL_SECONDS + LAMBDA_RESERVE_SECONDS
    return int(math.ceil(worst / 10) * 10)


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
    #: Seconds; every task is short by design (the state machine owns the waiting), but each must
    #: outlast its longest sequence of slow-but-answered calls: see :func:`lambda_timeout`, whose
    #: arguments each task below spells out (K = Kubernetes request, A = AWS call).
    timeout_seconds: int = 30
    memory_mb: int = 256
    #: Running the step again after an invocation that may have done part of its work (a Lambda
    #: timeout) does no harm, so the state machine retries ``Sandbox.Timedout``/``Lambda.Unknown``.
    idempotent: bool = True


WORKFLOW_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec(
        "admit",
        "lambdas.admit.handler",
        "Re-read the Node, classify, check budgets and breaker, take the per-node lock",
        kubernetes=True,
        ledger=LedgerAccess.READ_WRITE,
        publishes_notifications=False,
        # K: read the node, list its pool. A: history query, lock, budget read and write, release
        # on refusal, one spare = 2K + 6A + 3 s = 115 s.
        timeout_seconds=lambda_timeout(kube_requests=2, aws_calls=6),
    ),
    TaskSpec(
        "cordon",
        "lambdas.cordon.handler",
        "Cordon and taint the Node, annotate it with the execution and reason",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        # A: lock check. K: read the node, patch it = 2K + A + 3 s = 80 s.
        timeout_seconds=lambda_timeout(kube_requests=2, aws_calls=1),
    ),
    TaskSpec(
        "drain",
        "lambdas.drain.handler",
        "One eviction round through the Eviction API (PDBs respected)",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        # A: lock check. K: list the node's pods, one parallel wave of evictions = 80 s.
        timeout_seconds=lambda_timeout(kube_requests=2, aws_calls=1),
        memory_mb=512,
    ),
    TaskSpec(
        "force-drain",
        "lambdas.force_drain.handler",
        "Delete the pods left after the drain timeout with the configured grace period",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        # A: lock check. K: list the node's pods, one parallel wave of deletions = 80 s.
        timeout_seconds=lambda_timeout(kube_requests=2, aws_calls=1),
        memory_mb=512,
    ),
    TaskSpec(
        "terminate",
        "lambdas.terminate.handler",
        "Verify ownership and the live condition, then terminate the EC2 instance",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        ec2_mutations=("ec2:TerminateInstances",),
        ec2_describe=True,
        # A: lock check, describe, terminate. K: read the node, delete it, re-read it after a 409
        # = 3K + 3A + 3 s = 129 s.
        timeout_seconds=lambda_timeout(kube_requests=3, aws_calls=3),
    ),
    TaskSpec(
        "reboot",
        "lambdas.reboot.handler",
        "Verify ownership and the live condition, then reboot the EC2 instance",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        ec2_mutations=("ec2:RebootInstances",),
        ec2_describe=True,
        # A: lock check, describe, reboot. K: read the node = K + 3A + 3 s = 59 s.
        timeout_seconds=lambda_timeout(kube_requests=1, aws_calls=3),
        # A second RebootInstances is a second reboot: a retry after a timeout that came after the
        # reboot was sent would reboot the node again, or find the condition already cleared and
        # record that nothing was done. Nothing records that the reboot was sent before the call
        # returns, so a timed-out invocation is not retried; it ends in Record failure, with the
        # node cordoned. Its deadline makes that rare: only RebootInstances itself can overrun.
        idempotent=False,
    ),
    TaskSpec(
        "check-recovery",
        "lambdas.check_recovery.handler",
        "After a reboot: new boot ID, Ready, condition healthy?",
        kubernetes=True,
        # K: read the node = K + 3 s = 38 s.
        timeout_seconds=lambda_timeout(kube_requests=1, aws_calls=0),
    ),
    TaskSpec(
        "uncordon",
        "lambdas.uncordon.handler",
        "Undo NodeHeal's cordon after a successful reboot",
        kubernetes=True,
        ledger=LedgerAccess.READ,
        # A: lock check. K: read the node, patch it = 2K + A + 3 s = 80 s.
        timeout_seconds=lambda_timeout(kube_requests=2, aws_calls=1),
    ),
    TaskSpec(
        "record",
        "lambdas.record.handler",
        "Write the remediation record, release the lock and budget slot, notify",
        ledger=LedgerAccess.READ_WRITE,
        publishes_notifications=True,
        # A: put the record, publish, release the lock, read and write the budget = 5A + 3 s = 38 s.
        timeout_seconds=lambda_timeout(kube_requests=0, aws_calls=5),
    ),
    TaskSpec(
        "record-failure",
        "lambdas.record_failure.handler",
        "Record a failed remediation (node stays cordoned), release the lock, notify",
        ledger=LedgerAccess.READ_WRITE,
        publishes_notifications=True,
        # As Record outcome: 5A + 3 s = 38 s.
        timeout_seconds=lambda_timeout(kube_requests=0, aws_calls=5),
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
