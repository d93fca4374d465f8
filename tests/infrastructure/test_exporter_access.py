"""ExporterAccess synthesized alone with a bus: least-privilege role, Pod Identity, bus policy."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events
from aws_cdk.assertions import Template

from stacks.constructs.exporter_access import ExporterAccess


def synth(clusters: list[str]) -> Template:
    app = cdk.App()
    stack = cdk.Stack(
        app, "ExporterAccessTest", env=cdk.Environment(account="123456789012", region="us-west-2")
    )
    bus = events.EventBus(stack, "Bus", event_bus_name="nodeheal")
    ExporterAccess(
        stack,
        "ExporterAccess",
        bus=bus,
        clusters=clusters,
        namespace="nodeheal",
        service_account="nodeheal-exporter",
    )
    return Template.from_stack(stack)


def only(template: Template, resource_type: str) -> dict[str, Any]:
    resources = template.find_resources(resource_type)
    assert len(resources) == 1, resources
    return next(iter(resources.values()))


def test_role_trusts_pod_identity_with_assume_role_and_tag_session() -> None:
    template = synth(["training-on-eks"])
    role = only(template, "AWS::IAM::Role")
    statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statements == [
        {
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
        }
    ]


def test_role_may_only_put_events_on_the_bus() -> None:
    template = synth(["training-on-eks"])
    policy = only(template, "AWS::IAM::Policy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert len(statements) == 1
    assert statements[0]["Action"] == "events:PutEvents"
    assert statements[0]["Effect"] == "Allow"
    bus_logical_id = next(iter(template.find_resources("AWS::Events::EventBus")))
    assert statements[0]["Resource"] == {"Fn::GetAtt": [bus_logical_id, "Arn"]}
    assert len(template.find_resources("AWS::IAM::ManagedPolicy")) == 0


def test_one_pod_identity_association_per_cluster() -> None:
    template = synth(["training-on-eks", "inference-eks"])
    associations = template.find_resources("AWS::EKS::PodIdentityAssociation")
    assert sorted(a["Properties"]["ClusterName"] for a in associations.values()) == [
        "inference-eks",
        "training-on-eks",
    ]
    role_id = next(iter(template.find_resources("AWS::IAM::Role")))
    for association in associations.values():
        assert association["Properties"]["Namespace"] == "nodeheal"
        assert association["Properties"]["ServiceAccount"] == "nodeheal-exporter"
        assert association["Properties"]["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}


def test_bus_policy_allows_exactly_the_role() -> None:
    template = synth(["training-on-eks"])
    role_id = next(iter(template.find_resources("AWS::IAM::Role")))
    bus_id = next(iter(template.find_resources("AWS::Events::EventBus")))
    policy = only(template, "AWS::Events::EventBusPolicy")["Properties"]
    assert policy["EventBusName"] == {"Ref": bus_id}
    assert policy["StatementId"] == "NodeHealExporterPutEvents"
    assert policy["Statement"] == {
        "Sid": "NodeHealExporterPutEvents",
        "Effect": "Allow",
        "Principal": {"AWS": {"Fn::GetAtt": [role_id, "Arn"]}},
        "Action": "events:PutEvents",
        "Resource": {"Fn::GetAtt": [bus_id, "Arn"]},
    }


def test_no_cluster_is_a_configuration_error() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Empty")
    bus = events.EventBus(stack, "Bus")
    with pytest.raises(ValueError, match="at least one cluster"):
        ExporterAccess(stack, "ExporterAccess", bus=bus, clusters=[], namespace="n", service_account="s")
