"""EC2: resolve the instance behind a Node, prove it belongs to the cluster, terminate or reboot it,
read the Capacity Reservation it runs in, and report its hardware to EC2 as impaired.

Errors are mapped to the domain errors the state machine retries or catches by name:

* ``RequestLimitExceeded``, ``Throttling``, ``ThrottlingException``, EC2 server errors and
  connection failures -> :class:`Ec2ThrottledError` (retried with backoff);
* ``IncorrectInstanceState`` -> :class:`Ec2IncorrectStateError`;
* ``UnauthorizedOperation`` -> :class:`OwnershipVerificationError`: NodeHeal's role may only
  terminate or reboot instances carrying a configured cluster's ownership tag, so a refusal means
  IAM, the second line of defence, found the instance is not the cluster's;
* ``InvalidInstanceID.NotFound`` -> "already gone" for terminate, ``None`` for describe and
  :class:`InstanceNotFoundError` for reboot and report_impaired;
* ``InvalidCapacityReservationId.NotFound`` and ``InvalidCapacityReservationId.Malformed`` ->
  ``None`` for capacity_reservation: a reservation EC2 does not know is an answer for the caller to
  weigh, not a failure to retry.

The ``UnauthorizedOperation`` reading above is sure only where IAM can hold an action to the
ownership tag. The Service Authorization Reference gives DescribeCapacityReservations no resource
type (only ``*`` can be granted), and ReportInstanceStatus' row lists no tag condition key, so for
capacity_reservation and report_impaired the refusal may just as well mean the role lacks the
action; the error's message names both readings.

Any other error is raised unchanged: it is neither expected nor safe to reinterpret.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError

from nodeheal.errors import (
    Ec2IncorrectStateError,
    Ec2ThrottledError,
    InstanceNotFoundError,
    OwnershipVerificationError,
)
from nodeheal.instances import GONE_STATES, CapacityReservationView, InstanceView, TerminateOutcome

THROTTLING_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
SERVER_ERROR_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})
NOT_FOUND_CODES = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
RESERVATION_NOT_FOUND_CODES = frozenset(
    {"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"}
)
#: ReportInstanceStatus' reason for a GPU fault: none of its codes names a device, and the others
#: (network, instance store, EBS, unresponsive) would tell EC2 something NodeHeal did not see.
IMPAIRED_REASON = "performance-other"


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


def _read(action: str, call: Callable[[], Any], not_found: frozenset[str]) -> Any:
    """A describe call's answer; None when EC2 answers one of ``not_found``. Other errors are
    mapped as the module says; a lost connection is retried like a throttle (reads are safe)."""
    try:
        return call()
    except ClientError as exc:
        if _error_code(exc)[0] in not_found:
            return None
        _raise_mapped(exc, action)
    except BotoCoreError as exc:
        raise Ec2ThrottledError(f"{action}: EC2 unreachable: {exc}") from exc


class Ec2Instances:
    def __init__(self, ec2_client: Any) -> None:
        self._ec2 = ec2_client

    def describe(self, instance_id: str) -> InstanceView | None:
        """The instance, or None if EC2 does not know it (never existed, malformed id, or terminated
        long enough ago to have left the API)."""
        response = _read(
            f"ec2:DescribeInstances {instance_id}",
            lambda: self._ec2.describe_instances(InstanceIds=[instance_id]),
            NOT_FOUND_CODES,
        )
        if response is None:
            return None
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

    def capacity_reservation(self, reservation_id: str) -> CapacityReservationView | None:
        """The Capacity Reservation (ODCR or Capacity Block), or None if EC2 does not know it."""
        response = _read(
            f"ec2:DescribeCapacityReservations {reservation_id}",
            lambda: self._ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id]),
            RESERVATION_NOT_FOUND_CODES,
        )
        if response is None:
            return None
        for raw in response.get("CapacityReservations") or []:
            if raw.get("CapacityReservationId") == reservation_id:
                return CapacityReservationView.from_api(raw)
        return None

    def report_impaired(self, instance_id: str, start_time: datetime) -> None:
        """Tell EC2 the instance has been impaired since ``start_time``: EC2 collects such reports
        to make its status checks more accurate. The report changes nothing DescribeInstanceStatus
        answers for the instance and does nothing to it.

        No ``Description`` is sent: EC2 has deprecated the field. EC2's documentation requires the
        instance to be running."""
        if start_time.tzinfo is None:
            # botocore would send a naive time as UTC whatever clock it was read from.
            raise ValueError(f"start_time must carry a time zone, got {start_time!r}")
        action = f"ec2:ReportInstanceStatus {instance_id}"
        try:
            self._ec2.report_instance_status(
                Instances=[instance_id],
                Status="impaired",
                ReasonCodes=[IMPAIRED_REASON],
                StartTime=start_time,
            )
        except ClientError as exc:
            code, message = _error_code(exc)
            if code in NOT_FOUND_CODES:
                raise InstanceNotFoundError(f"{action}: {code}: {message}") from exc
            _raise_mapped(exc, action)
        except BotoCoreError as exc:
            # A second report of the same fault only repeats the first, so a retry is harmless.
            raise Ec2ThrottledError(f"{action}: EC2 unreachable: {exc}") from exc
