"""What the workflow steps need from the outside world, as structural types.

The steps take these, never a boto3 or kubernetes client: the Lambdas inject the real adapters
(nodeheal.kube, nodeheal.aws), the tests and the local simulation inject the same adapters pointed
at moto and the fake API server, and unit tests may inject in-memory fakes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodeheal.kube_event_body import ObjectEvent
from nodeheal.kube_views import LiveNode, PodView
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.episode import Sighting
from nodeheal.workflow.locks import LockClaim, LockView
from nodeheal.workflow.records import DroppedEvent, ExecutionEnd, RecordWrite, RemediationRecord
from nodeheal.workflow.signal_windows import SignalWindow


class CordonOutcome(Protocol):
    @property
    def changed(self) -> bool: ...
    @property
    def flipped_unschedulable(self) -> bool: ...


class NodePort(Protocol):
    def get(self, name: str) -> LiveNode | None: ...
    def list(self, label_selector: str | None = None) -> list[LiveNode]: ...
    def cordon(
        self, name: str, *, execution: str, reason: str, now: datetime, expected_uid: str | None = None
    ) -> CordonOutcome: ...
    def uncordon(self, name: str, *, expected_uid: str | None = None) -> bool: ...
    def delete(self, name: str, uid: str) -> bool: ...


class PodOutcomeView(Protocol):
    @property
    def pod(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def retryable(self) -> bool: ...


class EvictionOutcome(Protocol):
    @property
    def evicted(self) -> Sequence[PodOutcomeView]: ...
    @property
    def blocked(self) -> Sequence[PodOutcomeView]: ...
    @property
    def gone(self) -> Sequence[PodOutcomeView]: ...
    @property
    def failed(self) -> Sequence[PodOutcomeView]: ...
    @property
    def not_reached(self) -> Sequence[PodOutcomeView]: ...


class DeletionOutcome(Protocol):
    @property
    def deleted(self) -> Sequence[PodOutcomeView]: ...
    @property
    def gone(self) -> Sequence[PodOutcomeView]: ...
    @property
    def failed(self) -> Sequence[PodOutcomeView]: ...
    @property
    def not_reached(self) -> Sequence[PodOutcomeView]: ...


class PodPort(Protocol):
    def list_on_node(self, node_name: str) -> list[PodView]: ...
    def evict(self, pods: Sequence[PodView], *, parallelism: int) -> EvictionOutcome: ...
    def delete(self, pods: Sequence[PodView], *, grace_seconds: int, parallelism: int) -> DeletionOutcome: ...


class EventPort(Protocol):
    """Where a step tells the cluster what it did (``events.k8s.io/v1`` Events, D8 in docs/architecture.md).

    Best effort by contract: neither method raises. A write that fails or finds no time left is
    logged and counted by the adapter, and the step goes on as if it had been written.
    """

    def record(self, events: Sequence[ObjectEvent]) -> None: ...
    def lost(self, count: int, why: str) -> None: ...


class UntoldEvents:
    """An EventPort that tells nobody: for step tests and tools that have no cluster to tell."""

    def record(self, events: Sequence[ObjectEvent]) -> None:
        return None

    def lost(self, count: int, why: str) -> None:
        return None


#: The EventPort of a KubeAccess built without one.
UNTOLD: EventPort = UntoldEvents()


class NodeClaimView(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def deletion_requested(self) -> bool: ...


class NodeClaimDeletionView(Protocol):
    @property
    def already_gone(self) -> bool: ...
    @property
    def finalizing(self) -> bool: ...


class NodeClaimPort(Protocol):
    """Karpenter NodeClaims, for ``replace.method: delete-nodeclaim`` (nodeheal.kube.nodeclaims)."""

    def bound_to(self, provider_id: str) -> NodeClaimView | None: ...
    def delete(self, claim: Any) -> NodeClaimDeletionView: ...


@dataclass(frozen=True, slots=True)
class KubeAccess:
    nodes: NodePort
    pods: PodPort
    #: The Lambdas and the simulations pass theirs (nodeheal.runtime); left out, nothing is told.
    events: EventPort = UNTOLD
    #: Needed only by terminate with ``replace.method: delete-nodeclaim``; left out, that step
    #: fails with a ConfigurationError instead of falling back to another method.
    nodeclaims: NodeClaimPort | None = None


class InstanceViewLike(Protocol):
    @property
    def instance_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def tags(self) -> Mapping[str, str]: ...


class TerminateOutcomeLike(Protocol):
    @property
    def already_gone(self) -> bool: ...


class InstancePort(Protocol):
    def describe(self, instance_id: str) -> Any: ...
    def terminate(self, instance_id: str) -> TerminateOutcomeLike: ...
    def reboot(self, instance_id: str) -> None: ...
    def report_impaired(self, instance_id: str, start_time: datetime) -> None:
        """Tell EC2 the instance's hardware is impaired (ReportInstanceStatus)."""
        ...


class CapacityPort(Protocol):
    """What the capacity read needs of EC2 (``nodeheal.aws.ec2.Ec2Instances``)."""

    def describe(self, instance_id: str) -> Any: ...
    def capacity_reservation(self, reservation_id: str) -> Any: ...


class LockResultLike(Protocol):
    @property
    def acquired(self) -> bool: ...
    @property
    def holder(self) -> str: ...
    @property
    def held_by(self) -> LockView | None: ...
    @property
    def lapsed(self) -> LockView | None:
        """When acquired: the lock another execution held until its TTL ran out (None if none)."""
        ...


class LedgerPort(Protocol):
    """The ledger as the workflow uses it. ``subject`` is the node's identity key (its instance,
    nodeheal.workflow.records.identity_key), never its name (D1)."""

    def acquire_lock(
        self, cluster: str, subject: str, execution: str, ttl: timedelta, claim: LockClaim | None = None
    ) -> LockResultLike: ...
    def preempt_lock(
        self,
        cluster: str,
        subject: str,
        execution: str,
        ttl: timedelta,
        claim: LockClaim,
        *,
        holder: LockView,
        require_unmutated: bool,
    ) -> bool: ...
    def contend(
        self,
        cluster: str,
        subject: str,
        execution: str,
        claim: LockClaim,
        *,
        holder: LockView,
        until: datetime,
    ) -> bool: ...
    def withdraw_contention(self, cluster: str, subject: str, execution: str) -> bool: ...
    def claim_mutation(
        self, cluster: str, subject: str, execution: str, *, step: str, busy_for: timedelta
    ) -> None: ...
    def lock_holder(self, cluster: str, subject: str) -> str | None: ...
    def release_lock(self, cluster: str, subject: str, execution: str) -> bool: ...
    def read_admission_state(self, cluster: str) -> ClusterAdmissionState: ...
    def write_admission_state(self, state: ClusterAdmissionState) -> ClusterAdmissionState: ...
    def put_record(self, record: RemediationRecord) -> RecordWrite: ...
    def instance_records(self, cluster: str, subject: str, since: datetime) -> list[RemediationRecord]: ...
    def remember_sighting(self, cluster: str, subject: str, sighting: Sighting) -> bool: ...
    def read_signal_window(self, cluster: str, instance_id: str, signal: str) -> SignalWindow | None:
        """A counted signal's window (nodeheal.workflow.signal_windows); None when none holds."""
        ...

    def sightings(self, cluster: str, subject: str) -> list[Sighting]: ...
    def clear_sightings(self, cluster: str, subject: str, sightings: list[Sighting], at: datetime) -> int: ...
    def execution_ended(self, cluster: str, execution: str) -> bool: ...
    def execution_end(self, cluster: str, execution: str) -> ExecutionEnd | None: ...
    def mark_execution_ended(self, cluster: str, execution: str, outcome: str, by: str) -> None: ...
    def put_dropped_event(self, dropped: DroppedEvent) -> None: ...


#: SNS's rule for a message attribute's name (Publish, MessageAttributes).
_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")


@dataclass(frozen=True, slots=True)
class Notification:
    subject: str
    message: str
    #: Published as String message attributes, so subscriptions can filter (e.g. on ``action``).
    attributes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.attributes:
            if not _ATTRIBUTE_NAME.match(name) or name.lower().startswith(("aws.", "amazon.")):
                raise ValueError(f"invalid SNS message attribute name {name!r}")


class NotifierPort(Protocol):
    def publish(self, notification: Notification) -> str: ...


class ExecutionStarter(Protocol):
    def start(self, name: str, payload: Mapping[str, Any]) -> str:
        """Start a named execution and return its ARN; raise DuplicateExecutionError if it exists."""
        ...


Clock = Callable[[], datetime]
