"""EC2 instances as the domain sees them, and the proof that one is a cluster's own.

Pure: the EC2 adapter (:mod:`nodeheal.aws.ec2`) builds these views from DescribeInstances and the
steps decide on them, so the ownership check (safety invariant 2) runs against a fake as it runs
against EC2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeheal.errors import OwnershipVerificationError
from nodeheal.kube_views import LiveNode

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
    #: How the instance was bought: "" for on-demand (DescribeInstances leaves ``InstanceLifecycle``
    #: out for it), else EC2's value: ``spot``, ``capacity-block``, ``scheduled``, ...
    lifecycle: str = ""
    #: The Capacity Reservation (an ODCR or a Capacity Block) the instance runs in, "" for none:
    #: a replacement gets the reserved capacity only if it is launched into the same reservation.
    capacity_reservation_id: str = ""
    image_id: str = ""
    instance_type: str = ""
    availability_zone: str = ""

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
            lifecycle=str(raw.get("InstanceLifecycle") or ""),
            capacity_reservation_id=str(raw.get("CapacityReservationId") or ""),
            image_id=str(raw.get("ImageId") or ""),
            instance_type=str(raw.get("InstanceType") or ""),
            availability_zone=str((raw.get("Placement") or {}).get("AvailabilityZone") or ""),
        )


#: ``ReservationType`` of an On-Demand Capacity Reservation (ODCR) and of a Capacity Block.
RESERVATION_TYPE_ODCR = "default"
RESERVATION_TYPE_CAPACITY_BLOCK = "capacity-block"


@dataclass(frozen=True, slots=True)
class CapacityReservationView:
    """One entry of DescribeCapacityReservations: what a replacement can count on.

    A Capacity Block ends at a fixed time and EC2 terminates its instances then, and an ODCR may
    have no slot free for a replacement, so deciding to replace needs both the end date and the
    counts.
    """

    reservation_id: str
    #: ``default`` (an ODCR) or ``capacity-block``.
    reservation_type: str
    #: pending | active | expired | cancelled | failed | scheduled | payment-pending | ...
    state: str
    instance_type: str = ""
    availability_zone: str = ""
    total_instance_count: int = 0
    #: Slots not taken by a running instance: what a launch into the reservation can use now.
    available_instance_count: int = 0
    #: When the reservation ends; None when it has no end (``EndDateType`` ``unlimited``).
    end_date: datetime | None = None

    @property
    def is_capacity_block(self) -> bool:
        return self.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> CapacityReservationView:
        end_date = raw.get("EndDate")
        return cls(
            reservation_id=str(raw.get("CapacityReservationId", "")),
            # Optional in EC2's model; only a Capacity Block needs telling apart, so unmarked is an ODCR.
            reservation_type=str(raw.get("ReservationType") or RESERVATION_TYPE_ODCR),
            state=str(raw.get("State") or ""),
            instance_type=str(raw.get("InstanceType") or ""),
            availability_zone=str(raw.get("AvailabilityZone") or ""),
            total_instance_count=int(raw.get("TotalInstanceCount") or 0),
            available_instance_count=int(raw.get("AvailableInstanceCount") or 0),
            end_date=end_date if isinstance(end_date, datetime) else None,
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
