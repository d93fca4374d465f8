"""What the EC2 adapter knows of an instance's capacity (lifecycle, Capacity Reservation) and its
report of impaired hardware, against the Lambda asset's trimmed EC2 model: Stubber checks every
request and answer against the shapes the functions will have, so an operation or a field the
trimmed model lacks fails here and not in production."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber

from nodeheal.aws.ec2 import Ec2Instances
from nodeheal.aws.service_models import TRIMMED_OPERATIONS, write_trimmed_models
from nodeheal.errors import Ec2ThrottledError, InstanceNotFoundError, OwnershipVerificationError
from nodeheal.instances import CapacityReservationView, InstanceView
from nodeheal.runtime import aws_client_factory

REGION = "us-west-2"
INSTANCE_ID = "i-0abc12345678def01"
ODCR_ID = "cr-0a1b2c3d4e5f60718"
BLOCK_ID = "cr-0f1e2d3c4b5a69788"
AMI = "ami-0123456789abcdef0"
LAUNCHED = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
BLOCK_ENDS = datetime(2026, 11, 30, 11, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("botocore-models")
    write_trimmed_models(directory)
    return directory


@pytest.fixture
def client(models: Path) -> Any:
    ec2 = aws_client_factory(REGION, models=models)("ec2")
    # The stubs below are only worth something if they are checked against the trimmed model.
    assert sorted(ec2.meta.service_model.operation_names) == sorted(TRIMMED_OPERATIONS["ec2"])
    return ec2


@pytest.fixture
def stubbed(client: Any) -> Iterator[tuple[Ec2Instances, Stubber]]:
    with Stubber(client) as stubber:
        yield Ec2Instances(client), stubber
        stubber.assert_no_pending_responses()


def _instance(**extra: Any) -> dict[str, Any]:
    """A DescribeInstances entry for a GPU node, as EC2 answers it, plus ``extra``."""
    return {
        "InstanceId": INSTANCE_ID,
        "ImageId": AMI,
        "InstanceType": "p5.48xlarge",
        "LaunchTime": LAUNCHED,
        "Placement": {"AvailabilityZone": "us-west-2b", "Tenancy": "default"},
        "PrivateDnsName": "ip-10-0-1-2.us-west-2.compute.internal",
        "State": {"Code": 16, "Name": "running"},
        "Tags": [{"Key": "eks:eks-cluster-name", "Value": "gpu"}],
        **extra,
    }


def _describe(stubber: Stubber, raw: dict[str, Any]) -> None:
    stubber.add_response(
        "describe_instances",
        {"Reservations": [{"ReservationId": "r-0123456789abcdef0", "Instances": [raw]}]},
        {"InstanceIds": [INSTANCE_ID]},
    )


# -- InstanceView: how the instance was bought ----------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "lifecycle", "reservation"),
    [
        # On-demand: EC2 leaves InstanceLifecycle out.
        ({}, "", ""),
        # On-demand in an ODCR: no lifecycle, but the reservation it runs in.
        ({"CapacityReservationId": ODCR_ID}, "", ODCR_ID),
        ({"InstanceLifecycle": "spot", "SpotInstanceRequestId": "sir-0123abcd"}, "spot", ""),
        (
            {"InstanceLifecycle": "capacity-block", "CapacityReservationId": BLOCK_ID},
            "capacity-block",
            BLOCK_ID,
        ),
    ],
    ids=["on-demand", "on-demand-in-odcr", "spot", "capacity-block"],
)
def test_describe_keeps_how_the_instance_was_bought(
    stubbed: tuple[Ec2Instances, Stubber], extra: dict[str, Any], lifecycle: str, reservation: str
) -> None:
    instances, stubber = stubbed
    _describe(stubber, _instance(**extra))
    view = instances.describe(INSTANCE_ID)
    assert view == InstanceView(
        instance_id=INSTANCE_ID,
        state="running",
        tags={"eks:eks-cluster-name": "gpu"},
        private_dns_name="ip-10-0-1-2.us-west-2.compute.internal",
        launch_time=LAUNCHED,
        lifecycle=lifecycle,
        capacity_reservation_id=reservation,
        image_id=AMI,
        instance_type="p5.48xlarge",
        availability_zone="us-west-2b",
    )


def test_a_view_built_by_position_as_before_has_empty_capacity_fields() -> None:
    # The seeded simulation and the workflow fakes build views as (id, state, tags).
    view = InstanceView(INSTANCE_ID, "running", {"Name": "gpu"})
    assert (view.lifecycle, view.capacity_reservation_id, view.image_id) == ("", "", "")
    assert (view.instance_type, view.availability_zone) == ("", "")


# -- capacity_reservation -------------------------------------------------------------------------


def _reservation(reservation_id: str, **extra: Any) -> dict[str, Any]:
    """A DescribeCapacityReservations entry for eight p5 slots, as EC2 answers it, plus ``extra``."""
    return {
        "CapacityReservationId": reservation_id,
        "OwnerId": "123456789012",
        "CapacityReservationArn": f"arn:aws:ec2:us-west-2:123456789012:capacity-reservation/{reservation_id}",
        "AvailabilityZoneId": "usw2-az2",
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-west-2b",
        "Tenancy": "default",
        "TotalInstanceCount": 8,
        "AvailableInstanceCount": 1,
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": "active",
        "StartDate": datetime(2026, 11, 1, 11, 30, tzinfo=UTC),
        "CreateDate": datetime(2026, 10, 20, 9, 0, tzinfo=UTC),
        "Tags": [],
        **extra,
    }


def _describe_reservation(stubber: Stubber, reservation_id: str, answer: dict[str, Any]) -> None:
    stubber.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [answer]},
        {"CapacityReservationIds": [reservation_id]},
    )


def test_an_odcr_has_no_end_date_when_it_runs_until_cancelled(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    _describe_reservation(
        stubber,
        ODCR_ID,
        _reservation(
            ODCR_ID, ReservationType="default", EndDateType="unlimited", InstanceMatchCriteria="open"
        ),
    )
    assert instances.capacity_reservation(ODCR_ID) == CapacityReservationView(
        reservation_id=ODCR_ID,
        reservation_type="default",
        state="active",
        instance_type="p5.48xlarge",
        availability_zone="us-west-2b",
        total_instance_count=8,
        available_instance_count=1,
        end_date=None,
    )


def test_a_capacity_block_has_its_end_date(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    _describe_reservation(
        stubber,
        BLOCK_ID,
        _reservation(
            BLOCK_ID,
            ReservationType="capacity-block",
            EndDateType="limited",
            EndDate=BLOCK_ENDS,
            InstanceMatchCriteria="targeted",
            AvailableInstanceCount=0,
        ),
    )
    view = instances.capacity_reservation(BLOCK_ID)
    assert view is not None
    assert view.is_capacity_block
    assert view.reservation_type == "capacity-block"
    assert view.end_date == BLOCK_ENDS
    assert (view.total_instance_count, view.available_instance_count) == (8, 0)


def test_a_reservation_without_a_type_is_an_odcr(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    _describe_reservation(stubber, ODCR_ID, _reservation(ODCR_ID, EndDateType="unlimited"))
    view = instances.capacity_reservation(ODCR_ID)
    assert view is not None
    assert view.reservation_type == "default"
    assert not view.is_capacity_block


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{ODCR_ID}' does not exist"),
        ("InvalidCapacityReservationId.Malformed", "Invalid id: 'cr-nope'"),
    ],
)
def test_an_unknown_reservation_is_none(
    stubbed: tuple[Ec2Instances, Stubber], code: str, message: str
) -> None:
    instances, stubber = stubbed
    stubber.add_client_error("describe_capacity_reservations", code, message, 400)
    assert instances.capacity_reservation(ODCR_ID) is None


def test_an_answer_without_the_reservation_is_none(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    stubber.add_response(
        "describe_capacity_reservations", {"CapacityReservations": []}, {"CapacityReservationIds": [ODCR_ID]}
    )
    assert instances.capacity_reservation(ODCR_ID) is None


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "Throttling", "InternalError"])
def test_throttled_reservation_lookup_is_retryable(stubbed: tuple[Ec2Instances, Stubber], code: str) -> None:
    instances, stubber = stubbed
    stubber.add_client_error("describe_capacity_reservations", code, "Request limit exceeded.", 503)
    with pytest.raises(Ec2ThrottledError, match=code):
        instances.capacity_reservation(ODCR_ID)


def test_unexpected_reservation_errors_are_raised_unchanged(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    stubber.add_client_error("describe_capacity_reservations", "InvalidParameterValue", "bad filter", 400)
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        instances.capacity_reservation(ODCR_ID)


def test_unreachable_ec2_makes_the_reservation_lookup_retryable(client: Any) -> None:
    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://ec2.us-west-2.amazonaws.com")

    client.describe_capacity_reservations = refuse
    with pytest.raises(Ec2ThrottledError, match="unreachable"):
        Ec2Instances(client).capacity_reservation(ODCR_ID)


# -- report_impaired ------------------------------------------------------------------------------

FAULT_SEEN = datetime(2026, 11, 29, 3, 12, 45, tzinfo=UTC)


@pytest.fixture
def wire(client: Any) -> list[dict[str, Any]]:
    """The body of each request as serialized for EC2's query protocol by the trimmed model."""
    bodies: list[dict[str, Any]] = []

    def capture(params: dict[str, Any], **_: Any) -> None:
        bodies.append(params["body"])

    # The Stubber answers on ``before-call.*.*``, which ends the event, and botocore runs that
    # wildcard's handlers before one registered under the operation's own name: so this one goes
    # first on the same wildcard.
    client.meta.events.register_first("before-call.*.*", capture)
    return bodies


def test_report_impaired_sends_status_reason_and_start_time_and_no_description(
    stubbed: tuple[Ec2Instances, Stubber], wire: list[dict[str, Any]]
) -> None:
    instances, stubber = stubbed
    stubber.add_response(
        "report_instance_status",
        {},
        {
            "Instances": [INSTANCE_ID],
            "Status": "impaired",
            "ReasonCodes": ["performance-other"],
            "StartTime": FAULT_SEEN,
        },
    )
    instances.report_impaired(INSTANCE_ID, FAULT_SEEN)
    # What goes on the wire, serialized by the trimmed model: no Description, no EndTime.
    assert wire == [
        {
            "Action": "ReportInstanceStatus",
            "Version": "2016-11-15",
            "InstanceId.1": INSTANCE_ID,
            "Status": "impaired",
            "ReasonCode.1": "performance-other",
            "StartTime": "2026-11-29T03:12:45Z",
        }
    ]


def test_report_impaired_sends_the_start_time_in_utc(
    stubbed: tuple[Ec2Instances, Stubber], wire: list[dict[str, Any]]
) -> None:
    instances, stubber = stubbed
    pacific = FAULT_SEEN.astimezone(timezone(timedelta(hours=-8)))
    stubber.add_response("report_instance_status", {}, None)
    instances.report_impaired(INSTANCE_ID, pacific)
    assert [body["StartTime"] for body in wire] == ["2026-11-29T03:12:45Z"]


def test_report_impaired_refuses_a_time_without_a_zone(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, _ = stubbed
    with pytest.raises(ValueError, match="time zone"):
        instances.report_impaired(INSTANCE_ID, FAULT_SEEN.replace(tzinfo=None))


@pytest.mark.parametrize("code", ["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"])
def test_report_on_a_gone_instance_is_instance_not_found(
    stubbed: tuple[Ec2Instances, Stubber], code: str
) -> None:
    instances, stubber = stubbed
    stubber.add_client_error(
        "report_instance_status", code, f"The instance ID '{INSTANCE_ID}' does not exist", 400
    )
    with pytest.raises(InstanceNotFoundError, match=code):
        instances.report_impaired(INSTANCE_ID, FAULT_SEEN)


def test_report_impaired_throttled_is_retryable(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    stubber.add_client_error("report_instance_status", "RequestLimitExceeded", "Request limit exceeded.", 503)
    with pytest.raises(Ec2ThrottledError, match="RequestLimitExceeded"):
        instances.report_impaired(INSTANCE_ID, FAULT_SEEN)


def test_report_impaired_refused_by_iam_is_an_ownership_refusal(
    stubbed: tuple[Ec2Instances, Stubber],
) -> None:
    instances, stubber = stubbed
    stubber.add_client_error(
        "report_instance_status",
        "UnauthorizedOperation",
        "You are not authorized to perform this operation. Encoded authorization failure message: abc",
        403,
    )
    with pytest.raises(OwnershipVerificationError, match="refused by IAM"):
        instances.report_impaired(INSTANCE_ID, FAULT_SEEN)


def test_unreachable_ec2_makes_the_report_retryable(client: Any) -> None:
    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://ec2.us-west-2.amazonaws.com")

    client.report_instance_status = refuse
    with pytest.raises(Ec2ThrottledError, match="unreachable"):
        Ec2Instances(client).report_impaired(INSTANCE_ID, FAULT_SEEN)
