"""EC2 capacity for the local harness: how each instance was bought, the reservations behind them,
and the impaired-hardware reports EC2 receives.

moto 5.2.5 has neither DescribeCapacityReservations nor ReportInstanceStatus, and it only ever
reports ``InstanceLifecycle`` ``spot``. The harness keeps capacity here and serves it where it
already patches EC2 (:meth:`CapacityModel.start`): the instance's lifecycle and reservation on
moto's own instance objects, which DescribeInstances then serializes as EC2 does, and the two
missing operations on moto's EC2 responses, answered in EC2's shapes and error codes
(``InvalidCapacityReservationId.NotFound``, ``InvalidInstanceID.NotFound``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from unittest import mock

#: ``CapacityReservation.ReservationType``: an On-Demand Capacity Reservation, or a Capacity Block.
ODCR = "default"
CAPACITY_BLOCK = "capacity-block"


@dataclass
class SimulatedReservation:
    """One capacity reservation as DescribeCapacityReservations answers for it."""

    reservation_id: str
    reservation_type: str
    instance_type: str
    availability_zone: str
    total_instance_count: int
    available_instance_count: int
    #: None: no end (``EndDateType`` ``unlimited``), which a Capacity Block never has.
    end_date: datetime | None = None
    state: str = "active"

    def to_api(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "CapacityReservationId": self.reservation_id,
            "ReservationType": self.reservation_type,
            "InstanceType": self.instance_type,
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": self.availability_zone,
            "TotalInstanceCount": self.total_instance_count,
            "AvailableInstanceCount": self.available_instance_count,
            "State": self.state,
            "EndDateType": "limited" if self.end_date is not None else "unlimited",
        }
        if self.end_date is not None:
            answer["EndDate"] = self.end_date
        return answer


@dataclass(frozen=True)
class ImpairedReport:
    """One ReportInstanceStatus call EC2 accepted."""

    instance_id: str
    status: str
    reason_codes: tuple[str, ...]
    start_time: datetime | None
    description: str | None


@dataclass
class CapacityModel:
    """The capacity the local harness serves; change it before or while a pipeline runs."""

    reservations: dict[str, SimulatedReservation] = field(default_factory=dict)
    reports: list[ImpairedReport] = field(default_factory=list)
    _instances: dict[str, tuple[str, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_reservation(self, reservation: SimulatedReservation) -> SimulatedReservation:
        with self._lock:
            self.reservations[reservation.reservation_id] = reservation
        return reservation

    def place(self, instance_id: str, *, lifecycle: str = "", reservation_id: str = "") -> None:
        """Say how ``instance_id`` was bought: its ``InstanceLifecycle`` ("" on-demand, "spot",
        "capacity-block") and the reservation it runs in ("" none)."""
        if reservation_id and reservation_id not in self.reservations:
            raise KeyError(f"no reservation {reservation_id}: add it first")
        with self._lock:
            self._instances[instance_id] = (lifecycle, reservation_id)

    def placement(self, instance_id: str) -> tuple[str, str]:
        with self._lock:
            return self._instances.get(instance_id, ("", ""))

    def start(self) -> list[Any]:
        """Patch moto (5.2.5) to serve this model; returns the started patchers."""
        from moto.core.responses import ActionResult, EmptyResult
        from moto.ec2.exceptions import EC2ClientError
        from moto.ec2.models.instances import Instance
        from moto.ec2.responses import EC2Response

        model = self

        def describe_capacity_reservations(response: Any) -> Any:
            wanted = response._get_param("CapacityReservationIds", [])
            with model._lock:
                missing = [rid for rid in wanted if rid not in model.reservations]
                found = (
                    [model.reservations[rid] for rid in wanted]
                    if wanted
                    else list(model.reservations.values())
                )
            if missing:
                raise EC2ClientError(
                    "InvalidCapacityReservationId.NotFound",
                    f"The capacity reservation ID '{missing[0]}' does not exist",
                )
            return ActionResult({"CapacityReservations": [r.to_api() for r in found]})

        def report_instance_status(response: Any) -> Any:
            instance_ids = response._get_param("Instances", [])
            backend = response.ec2_backend
            for instance_id in instance_ids:
                backend.get_instance(instance_id)  # InvalidInstanceID.NotFound, as EC2 answers
            start = response._get_param("StartTime")
            report = [
                ImpairedReport(
                    instance_id=instance_id,
                    status=str(response._get_param("Status")),
                    reason_codes=tuple(response._get_param("ReasonCodes", [])),
                    start_time=start if isinstance(start, datetime) else None,
                    description=response._get_param("Description"),
                )
                for instance_id in instance_ids
            ]
            with model._lock:
                model.reports.extend(report)
            return EmptyResult()

        def lifecycle(instance: Any) -> str | None:
            bought = model.placement(instance.id)[0]
            return bought or instance.__dict__.get("_spot_lifecycle")

        def reservation(instance: Any) -> str | None:
            return model.placement(instance.id)[1] or None

        def keep_spot(instance: Any, value: str | None) -> None:
            # moto sets ``lifecycle = "spot"`` on the instances of a spot request.
            instance.__dict__["_spot_lifecycle"] = value

        patchers: list[Any] = [
            mock.patch.object(
                EC2Response, "describe_capacity_reservations", describe_capacity_reservations, create=True
            ),
            mock.patch.object(EC2Response, "report_instance_status", report_instance_status, create=True),
            mock.patch.object(Instance, "lifecycle", property(lifecycle, keep_spot), create=True),
            mock.patch.object(Instance, "capacity_reservation_id", property(reservation), create=True),
        ]
        for patcher in patchers:
            patcher.start()
        return patchers
