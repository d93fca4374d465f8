"""The EKS access adapter: boto3 against a Stubber with the API reference's response shapes, and the
in-memory stand-in the doctor tests use (moto has no access entries), held to the same contract."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from nodeheal.aws.eks_access import AccessEntry, BotoEksAccess, ClusterAccess, EksAccess
from tests.deployment import MemoryEksAccess
from tests.unit.workflow.fakes import CLUSTER

ROLE = "arn:aws:iam::123456789012:role/NodeHeal-WorkflowFunctionsadmitRole-1A2B3C"
UNKNOWN_ROLE = "arn:aws:iam::123456789012:role/someone-else"
USERNAME = "arn:aws:sts::123456789012:assumed-role/NodeHeal-WorkflowFunctionsadmitRole-1A2B3C/{{SessionName}}"
WHEN = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

#: DescribeCluster's answer, trimmed to the documented members an access check reads and the
#: required ones around them (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeCluster.html).
DESCRIBE_CLUSTER = {
    "cluster": {
        "name": CLUSTER,
        "arn": f"arn:aws:eks:us-west-2:123456789012:cluster/{CLUSTER}",
        "createdAt": WHEN,
        "version": "1.33",
        "endpoint": "https://0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com",
        "roleArn": "arn:aws:iam::123456789012:role/eks-cluster",
        "status": "ACTIVE",
        "certificateAuthority": {"data": "LS0tLS1CRUdJTi=="},
        "platformVersion": "eks.5",
        "accessConfig": {
            "bootstrapClusterCreatorAdminPermissions": True,
            "authenticationMode": "API_AND_CONFIG_MAP",
        },
    }
}
#: DescribeAccessEntry's answer (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeAccessEntry.html).
DESCRIBE_ACCESS_ENTRY = {
    "accessEntry": {
        "clusterName": CLUSTER,
        "principalArn": ROLE,
        "kubernetesGroups": ["nodeheal-admit"],
        "accessEntryArn": f"arn:aws:eks:us-west-2:123456789012:access-entry/{CLUSTER}/role/123456789012/"
        "NodeHeal-WorkflowFunctionsadmitRole-1A2B3C/a2c6b1f0-1d2e-3f4a-5b6c-7d8e9f0a1b2c",
        "createdAt": WHEN,
        "modifiedAt": WHEN,
        "tags": {"app": "nodeheal"},
        "username": USERNAME,
        "type": "STANDARD",
    }
}


@pytest.fixture
def stubbed() -> Iterator[tuple[BotoEksAccess, Stubber]]:
    client = boto3.client("eks", region_name="us-west-2")
    with Stubber(client) as stubber:
        yield BotoEksAccess(client), stubber
        stubber.assert_no_pending_responses()


def _boto(stubbed: tuple[BotoEksAccess, Stubber]) -> EksAccess:
    access, stubber = stubbed
    stubber.add_response("describe_cluster", DESCRIBE_CLUSTER, {"name": CLUSTER})
    stubber.add_client_error(
        "describe_cluster",
        service_error_code="ResourceNotFoundException",
        service_message="No cluster found for name: gone.",
        http_status_code=404,
        expected_params={"name": "gone"},
    )
    stubber.add_response(
        "describe_access_entry", DESCRIBE_ACCESS_ENTRY, {"clusterName": CLUSTER, "principalArn": ROLE}
    )
    stubber.add_client_error(
        "describe_access_entry",
        service_error_code="ResourceNotFoundException",
        service_message=f"The specified access entry resource is not found: {UNKNOWN_ROLE}",
        http_status_code=404,
        expected_params={"clusterName": CLUSTER, "principalArn": UNKNOWN_ROLE},
    )
    return access


def _memory() -> EksAccess:
    memory = MemoryEksAccess(clusters={CLUSTER: ClusterAccess("ACTIVE", "API_AND_CONFIG_MAP")})
    memory.add(CLUSTER, ROLE, ("nodeheal-admit",))
    return memory


@pytest.mark.parametrize("which", ["boto3", "memory"])
def test_contract(which: str, stubbed: tuple[BotoEksAccess, Stubber]) -> None:
    access = _boto(stubbed) if which == "boto3" else _memory()
    if which == "memory":
        stubbed[1].deactivate()
    assert access.cluster(CLUSTER) == ClusterAccess(status="ACTIVE", authentication_mode="API_AND_CONFIG_MAP")
    assert access.cluster("gone") is None
    entry = access.access_entry(CLUSTER, ROLE)
    assert entry == AccessEntry(
        principal_arn=ROLE, kubernetes_groups=("nodeheal-admit",), username=USERNAME, type="STANDARD"
    )
    assert entry.username_for_session("NodeHeal-admit") == USERNAME.replace(
        "{{SessionName}}", "NodeHeal-admit"
    )
    assert access.access_entry(CLUSTER, UNKNOWN_ROLE) is None


def test_a_cluster_that_predates_access_entries_has_no_mode(stubbed: tuple[BotoEksAccess, Stubber]) -> None:
    access, stubber = stubbed
    old: dict[str, Any] = {
        "cluster": {k: v for k, v in DESCRIBE_CLUSTER["cluster"].items() if k != "accessConfig"}
    }
    stubber.add_response("describe_cluster", old, {"name": CLUSTER})
    assert access.cluster(CLUSTER) == ClusterAccess(status="ACTIVE", authentication_mode=None)


def test_other_errors_are_not_hidden(stubbed: tuple[BotoEksAccess, Stubber]) -> None:
    access, stubber = stubbed
    stubber.add_client_error(
        "describe_access_entry",
        service_error_code="AccessDeniedException",
        service_message="User is not authorized to perform: eks:DescribeAccessEntry",
        http_status_code=403,
    )
    with pytest.raises(ClientError, match="AccessDeniedException"):
        access.access_entry(CLUSTER, ROLE)
