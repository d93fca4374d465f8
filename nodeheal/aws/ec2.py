"""EC2: resolve the instance behind a Node, prove it belongs to the cluster, terminate or reboot it.

Errors are mapped to the domain errors the state machine retries or catches by name:

* ``RequestLimitExceeded``, ``Throttling``, ``ThrottlingException``, EC2 server errors and
  connection failures -> :class:`Ec2ThrottledError` (retried with backoff);
* ``IncorrectInstanceState`` -> :class:`Ec2IncorrectStateError`;
* ``UnauthorizedOperation`` -> :class:`OwnershipVerificationError`: NodeHeal's role may only
  terminate or reboot instances carrying a configured cluster's ownership tag, so a refusal means
  IAM, the second line of defence, found the instance is not the cluster's;
* ``InvalidInstanceID.NotFound`` -> "already gone" for terminate, ``None`` for describe and
  :class:`InstanceNotFoundError` for reboot.

Any other error is raised unchanged: it is neither expected nor safe to reinterpret.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError

from nodeheal.errors import (
    Ec2IncorrectStateError,
    Ec2ThrottledError,
    InstanceNotFoundError,
    OwnershipVerificationError,
)
from nodeheal.kube.model import LiveNode

THROTTLING_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
SERVER_ERROR_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})
NOT_FOUND_CODES = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
#: States from which the instance is on its way out or gone: terminating again is a success.
GONE_STATES = frozenset({"shutting-down", "terminated"})

#: Tags that tie an instance to an EKS cluster. ``kubernetes.io/cluster/<name>=owned`` is set by
#: Karpenter and EKS node groups; ``eks:cluster-name`` by EKS managed node groups;
#: ``eks:eks-cluster-name`` by Karpenter v1 and EKS Auto Mode (it replaced ``karpenter.sh/managed-by``).
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
EKS_CLUSTER_NAME_TAGS = ("eks:cluster-name", "eks:eks-cluster-name")


def ownership_tags(cluster: str) -> dict[str, str]:
    """Tag pairs, any one of which proves an instance belongs to ``cluster``."""
    tags = {f"{CLUSTER_TAG_PREFIX}{cluster}": "owned"}
    tags.update(dict.fromkeys(EKS_CLUSTER_NAME_TAGS, cluster))
    return tags


@dataclass(frozen=True, slots=True)
class InstanceView:
    instance_id: str
    #: pending | running | shutting-down | terminated | stopping | stopped
    state: str
    tags: Mapping[str, str] = field(default_factory=dict)
    private_dns_name: str = ""
    launch_time: datetime | None = None

    @property
    def is_gone(self) -> bool:
        return self.state in GONE_STATES

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> InstanceView:
        launch_time = raw.get("LaunchTime")
        return cls(
            instance_id=str(raw.get("InstanceId", "")),
            state=str((raw.get("State") or {}).get("Name", "")),
            tags={str(t.get("Key", "")): str(t.get("Value", "")) for t in raw.get("Tags") or []},
            private_dns_name=str(raw.get("PrivateDnsName", "") or ""),
            launch_time=launch_time if isinstance(launch_time, datetime) else None,
        )


@dataclass(frozen=True, slots=True)
class TerminateOutcome:
    instance_id: str
    #: State before the call ("" when EC2 no longer knows the instance).
    previous_state: str
    #: State EC2 reported after the call ("terminated" when it no longer knows the instance).
    current_state: str
    #: True when the instance was already shutting down, terminated or unknown: nothing was done.
    already_gone: bool


def _error_code(exc: ClientError) -> tuple[str, str]:
    error = exc.response.get("Error", {})
    return str(error.get("Code", "")), str(error.get("Message", ""))


def _raise_mapped(exc: ClientError, action: str) -> NoReturn:
    code, message = _error_code(exc)
    if code in THROTTLING_CODES or code in SERVER_ERROR_CODES:
        raise Ec2ThrottledError(f"{action}: {code}: {message}") from exc
    if code == "IncorrectInstanceState":
        raise Ec2IncorrectStateError(f"{action}: {code}: {message}") from exc
    if code == "UnauthorizedOperation":
        raise OwnershipVerificationError(
            f"{action}: refused by IAM ({code}). NodeHeal may only act on instances tagged as owned by a "
            f"configured cluster, so this instance is not one of them (or the role lacks the permission). "
            f"{message}"
        ) from exc
    raise exc


class Ec2Instances:
    def __init__(self, ec2_client: Any) -> None:
        self._ec2 = ec2_client

    def describe(self, instance_id: str) -> InstanceView | None:
        """The instance, or None if EC2 does not know it (never existed, malformed id, or terminated
        long enough ago to have left the API)."""
        action = f"ec2:DescribeInstances {instance_id}"
        try:
            response = self._ec2.describe_instances(InstanceIds=[instance_id])
        except ClientError as exc:
            if _error_code(exc)[0] in NOT_FOUND_CODES:
                return None
            _raise_mapped(exc, action)
        except BotoCoreError as exc:
            raise Ec2ThrottledError(f"{action}: EC2 unreachable: {exc}") from exc
        for reservation in response.get("Reservations") or []:
            for raw in reservation.get("Instances") or []:
                if raw.get("InstanceId") == instance_id:
                    return InstanceView.from_api(raw)
        return None

    def terminate(self, instance_id: str) -> TerminateOutcome:
        """Terminate; an instance already shutting down, terminated or unknown counts as success."""
        action = f"ec2:TerminateInstances {instance_id}"
        try:
            response = self._ec2.terminate_instances(InstanceIds=[instance_id])
        except ClientError as exc:
            if _error_code(exc)[0] in NOT_FOUND_CODES:
                return TerminateOutcome(
                    instance_id=instance_id, previous_state="", current_state="terminated", already_gone=True
                )
            _raise_mapped(exc, action)
        except BotoCoreError as exc:
            # TerminateInstances is idempotent, so retrying after a lost answer is safe.
            raise Ec2ThrottledError(f"{action}: EC2 unreachable: {exc}") from exc
        for change in response.get("TerminatingInstances") or []:
            if change.get("InstanceId") == instance_id:
                previous = str((change.get("PreviousState") or {}).get("Name", ""))
                current = str((change.get("CurrentState") or {}).get("Name", ""))
                return TerminateOutcome(
                    instance_id=instance_id,
                    previous_state=previous,
                    current_state=current,
                    already_gone=previous in GONE_STATES,
                )
        raise InstanceNotFoundError(f"{action}: EC2 answered without reporting the instance's state")

    def reboot(self, instance_id: str) -> None:
        """Request a reboot. EC2 answers before the instance restarts; the workflow waits for the Node
        to come back Ready (with a new boot id) to know it happened."""
        action = f"ec2:RebootInstances {instance_id}"
        try:
            self._ec2.reboot_instances(InstanceIds=[instance_id])
        except ClientError as exc:
            code, message = _error_code(exc)
            if code in NOT_FOUND_CODES:
                raise InstanceNotFoundError(f"{action}: {code}: {message}") from exc
            _raise_mapped(exc, action)
        except BotoCoreError as exc:
            raise Ec2ThrottledError(f"{action}: EC2 unreachable: {exc}") from exc


def verify_ownership(instance: InstanceView, *, cluster: str, node: LiveNode) -> None:
    """Raise :class:`OwnershipVerificationError` unless ``instance`` is the Node's own instance and
    carries ``cluster``'s ownership tag (safety invariant 2).

    Both checks matter: the providerID check stops NodeHeal acting on a different instance than the
    Node it judged (a stale event, a reused node name); the tag check stops it acting on an instance
    of another cluster even if a Node somehow points at it.
    """
    expected = node.instance_id
    if expected is None:
        raise OwnershipVerificationError(
            f"node {node.name} has providerID {node.provider_id!r}, which names no EC2 instance"
        )
    if instance.instance_id != expected:
        raise OwnershipVerificationError(
            f"instance {instance.instance_id} is not node {node.name}'s instance "
            f"(providerID {node.provider_id!r} names {expected})"
        )
    wanted = ownership_tags(cluster)
    if any(instance.tags.get(key) == value for key, value in wanted.items()):
        return
    found = {
        key: value
        for key, value in instance.tags.items()
        if key.startswith(CLUSTER_TAG_PREFIX) or key in EKS_CLUSTER_NAME_TAGS
    }
    wanted_text = " or ".join(f"{key}={value}" for key, value in wanted.items())
    found_text = ", ".join(f"{key}={value}" for key, value in sorted(found.items())) or "none"
    raise OwnershipVerificationError(
        f"instance {instance.instance_id} (node {node.name}) is not owned by cluster {cluster!r}: "
        f"it needs {wanted_text}; its cluster tags: {found_text}"
    )
