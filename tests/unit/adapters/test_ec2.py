"""EC2 adapter (moto for behaviour, Stubber for the error codes moto does not produce) and the
pure ownership check."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber
from moto import mock_aws

from nodeheal.aws.ec2 import Ec2Instances
from nodeheal.conditions import Condition
from nodeheal.errors import (
    Ec2IncorrectStateError,
    Ec2ThrottledError,
    InstanceNotFoundError,
    OwnershipVerificationError,
)
from nodeheal.instances import InstanceView, ownership_tags, verify_ownership
from nodeheal.kube_views import LiveNode
from tests.unit.workflow.fakes import CLUSTER

REGION = "us-west-2"
MISSING_ID = "i-0123456789abcdef0"
#: One of the AMIs moto ships (looking one up with DescribeImages costs seconds per test).
MOTO_AMI = "ami-12c6146b"


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _launch(ec2: Any, tags: dict[str, str] | None = None) -> str:
    spec: dict[str, Any] = {"ImageId": MOTO_AMI, "MinCount": 1, "MaxCount": 1, "InstanceType": "p5.48xlarge"}
    if tags:
        spec["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
    return str(ec2.run_instances(**spec)["Instances"][0]["InstanceId"])


def _node(instance_id: str, name: str = "ip-10-0-1-2.us-west-2.compute.internal") -> LiveNode:
    return LiveNode(
        name=name,
        uid="uid-1",
        resource_version="1",
        provider_id=f"aws:///us-west-2b/{instance_id}",
        labels={},
        annotations={},
        unschedulable=False,
        taints=(),
        conditions={"Ready": Condition(type="Ready", status="True")},
        boot_id="boot-1",
    )


# -- moto: describe / terminate / reboot ----------------------------------------------------------


def test_describe_returns_a_view_of_the_instance(ec2: Any) -> None:
    instance_id = _launch(ec2, {f"kubernetes.io/cluster/{CLUSTER}": "owned", "Name": "gpu"})
    view = Ec2Instances(ec2).describe(instance_id)
    assert view is not None
    assert view.instance_id == instance_id
    assert view.state == "running"
    assert view.tags["Name"] == "gpu"
    assert view.tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"
    assert view.private_dns_name.endswith(".compute.internal")
    assert isinstance(view.launch_time, datetime)
    assert not view.is_gone


def test_describe_unknown_or_malformed_instance_is_none(ec2: Any) -> None:
    instances = Ec2Instances(ec2)
    assert instances.describe(MISSING_ID) is None
    assert instances.describe("not-an-instance") is None


def test_terminate_running_then_again_is_already_gone(ec2: Any) -> None:
    instance_id = _launch(ec2)
    instances = Ec2Instances(ec2)

    first = instances.terminate(instance_id)
    assert first.already_gone is False
    assert first.previous_state == "running"
    assert first.current_state in ("shutting-down", "terminated")

    second = instances.terminate(instance_id)
    assert second.already_gone is True
    view = instances.describe(instance_id)
    assert view is not None and view.is_gone


def test_terminate_unknown_instance_is_already_gone(ec2: Any) -> None:
    outcome = Ec2Instances(ec2).terminate(MISSING_ID)
    assert outcome.already_gone is True
    assert outcome.current_state == "terminated"


def test_reboot_running_instance_and_unknown_instance(ec2: Any) -> None:
    instance_id = _launch(ec2)
    instances = Ec2Instances(ec2)
    instances.reboot(instance_id)
    view = instances.describe(instance_id)
    assert view is not None and view.state == "running"
    with pytest.raises(InstanceNotFoundError, match=MISSING_ID):
        instances.reboot(MISSING_ID)


# -- Stubber: error codes -------------------------------------------------------------------------


@pytest.fixture
def stubbed() -> Iterator[tuple[Ec2Instances, Stubber]]:
    client = boto3.client("ec2", region_name=REGION)
    with Stubber(client) as stubber:
        yield Ec2Instances(client), stubber
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "Throttling", "ThrottlingException"])
def test_throttling_maps_to_ec2_throttled(stubbed: tuple[Ec2Instances, Stubber], code: str) -> None:
    instances, stubber = stubbed
    stubber.add_client_error("terminate_instances", code, "Request limit exceeded.", 503)
    with pytest.raises(Ec2ThrottledError, match=code):
        instances.terminate(MISSING_ID)


def test_incorrect_state_maps_to_ec2_incorrect_state(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    stubber.add_client_error(
        "reboot_instances",
        "IncorrectInstanceState",
        f"The instance '{MISSING_ID}' is not in a state from which it can be rebooted.",
        400,
    )
    with pytest.raises(Ec2IncorrectStateError, match="not in a state"):
        instances.reboot(MISSING_ID)


def test_unauthorized_operation_maps_to_ownership_refusal(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    stubber.add_client_error(
        "terminate_instances",
        "UnauthorizedOperation",
        "You are not authorized to perform this operation. Encoded authorization failure message: abc",
        403,
    )
    with pytest.raises(OwnershipVerificationError, match="refused by IAM") as caught:
        instances.terminate(MISSING_ID)
    assert "Encoded authorization failure message" in str(caught.value)


def test_unexpected_errors_are_raised_unchanged(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    stubber.add_client_error("describe_instances", "InvalidParameterValue", "bad filter", 400)
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        instances.describe(MISSING_ID)


def test_connection_failure_is_retryable() -> None:
    client = boto3.client("ec2", region_name=REGION)

    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://ec2.us-west-2.amazonaws.com")

    client.terminate_instances = refuse
    with pytest.raises(Ec2ThrottledError, match="unreachable"):
        Ec2Instances(client).terminate(MISSING_ID)


def test_terminate_reports_shutting_down_as_already_gone(stubbed: tuple[Ec2Instances, Stubber]) -> None:
    instances, stubber = stubbed
    stubber.add_response(
        "terminate_instances",
        {
            "TerminatingInstances": [
                {
                    "InstanceId": MISSING_ID,
                    "PreviousState": {"Code": 32, "Name": "shutting-down"},
                    "CurrentState": {"Code": 32, "Name": "shutting-down"},
                }
            ]
        },
        {"InstanceIds": [MISSING_ID]},
    )
    outcome = instances.terminate(MISSING_ID)
    assert outcome.already_gone is True
    assert outcome.previous_state == "shutting-down"


# -- verify_ownership ----------------------------------------------------------------------------


@pytest.mark.parametrize("tag", sorted(ownership_tags(CLUSTER).items()))
def test_each_ownership_tag_is_accepted(tag: tuple[str, str]) -> None:
    instance_id = "i-0abc12345678def01"
    view = InstanceView(instance_id=instance_id, state="running", tags={tag[0]: tag[1]})
    verify_ownership(view, cluster=CLUSTER, node=_node(instance_id))


def test_ownership_tags_are_the_documented_ones() -> None:
    assert ownership_tags(CLUSTER) == {
        f"kubernetes.io/cluster/{CLUSTER}": "owned",
        "eks:cluster-name": CLUSTER,
        "eks:eks-cluster-name": CLUSTER,
    }


def test_instance_without_ownership_tag_is_refused() -> None:
    instance_id = "i-0abc12345678def01"
    view = InstanceView(instance_id=instance_id, state="running", tags={"Name": "gpu"})
    with pytest.raises(OwnershipVerificationError, match="not owned by cluster") as caught:
        verify_ownership(view, cluster=CLUSTER, node=_node(instance_id))
    assert "its cluster tags: none" in str(caught.value)


@pytest.mark.parametrize(
    "tags",
    [
        {f"kubernetes.io/cluster/{CLUSTER}": "shared"},
        {"kubernetes.io/cluster/other": "owned"},
        {"eks:cluster-name": "other"},
        {"eks:eks-cluster-name": f"{CLUSTER}-staging"},
    ],
)
def test_shared_or_other_cluster_tags_are_refused(tags: dict[str, str]) -> None:
    instance_id = "i-0abc12345678def01"
    view = InstanceView(instance_id=instance_id, state="running", tags=tags)
    with pytest.raises(OwnershipVerificationError) as caught:
        verify_ownership(view, cluster=CLUSTER, node=_node(instance_id))
    key, value = next(iter(tags.items()))
    assert f"{key}={value}" in str(caught.value)


def test_instance_that_is_not_the_nodes_provider_id_is_refused() -> None:
    view = InstanceView(
        instance_id="i-0aaaaaaaaaaaaaaa1", state="running", tags={f"kubernetes.io/cluster/{CLUSTER}": "owned"}
    )
    with pytest.raises(OwnershipVerificationError, match="names i-0bbbbbbbbbbbbbbb2"):
        verify_ownership(view, cluster=CLUSTER, node=_node("i-0bbbbbbbbbbbbbbb2"))


def test_node_without_ec2_provider_id_is_refused() -> None:
    node = LiveNode(
        name="kind-worker",
        uid="u",
        resource_version="1",
        provider_id="kind://docker/kind/kind-worker",
        labels={},
        annotations={},
        unschedulable=False,
        taints=(),
        conditions={},
        boot_id="",
    )
    view = InstanceView(
        instance_id="i-0aaaaaaaaaaaaaaa1", state="running", tags={"eks:cluster-name": CLUSTER}
    )
    with pytest.raises(OwnershipVerificationError, match="names no EC2 instance"):
        verify_ownership(view, cluster=CLUSTER, node=node)


def test_ownership_against_moto_instance(ec2: Any) -> None:
    owned = _launch(ec2, {"eks:eks-cluster-name": CLUSTER})
    foreign = _launch(ec2, {"eks:eks-cluster-name": "someone-else"})
    instances = Ec2Instances(ec2)
    owned_view = instances.describe(owned)
    foreign_view = instances.describe(foreign)
    assert owned_view is not None and foreign_view is not None
    verify_ownership(owned_view, cluster=CLUSTER, node=_node(owned))
    with pytest.raises(OwnershipVerificationError):
        verify_ownership(foreign_view, cluster=CLUSTER, node=_node(foreign))
