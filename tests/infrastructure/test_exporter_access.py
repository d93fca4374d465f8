"""ExporterAccess synthesized alone with a bus: a least-privilege role per cluster, Pod Identity, bus
policy. What the policies allow and deny is checked by evaluation in ``test_bus_identity``."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events
from aws_cdk.assertions import Template

from nodeheal.cdk.constructs.exporter_access import ExporterAccess


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
        source_prefix="nodeheal.exporter",
        namespace="nodeheal",
        service_account="nodeheal-exporter",
    )
    return Template.from_stack(stack)


def only(template: Template, resource_type: str) -> dict[str, Any]:
    resources = template.find_resources(resource_type)
    assert len(resources) == 1, resources
    return next(iter(resources.values()))


def test_role_trusts_pod_identity_of_its_own_cluster_namespace_and_service_account() -> None:
    template = synth(["training-on-eks"])
    role = only(template, "AWS::IAM::Role")
    statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statements == [
        {
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Condition": {
                "StringEquals": {
                    "aws:RequestTag/eks-cluster-name": "training-on-eks",
                    "aws:RequestTag/kubernetes-namespace": "nodeheal",
                    "aws:RequestTag/kubernetes-service-account": "nodeheal-exporter",
                }
            },
        }
    ]


def test_defect_9_role_may_only_put_its_own_clusters_source_on_the_bus() -> None:
    template = synth(["training-on-eks"])
    policy = only(template, "AWS::IAM::Policy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    bus_logical_id = next(iter(template.find_resources("AWS::Events::EventBus")))
    assert statements == [
        {
            "Sid": "PutOwnClusterEvents",
            "Action": "events:PutEvents",
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [bus_logical_id, "Arn"]},
            "Condition": {
                "ForAllValues:StringEquals": {
                    "events:source": ["nodeheal.exporter.training-on-eks", "nodeheal.exporter"]
                },
                "Null": {"events:source": "false"},
            },
        }
    ]
    assert len(template.find_resources("AWS::IAM::ManagedPolicy")) == 0


def test_defect_9_one_role_and_one_pod_identity_association_per_cluster() -> None:
    template = synth(["training-on-eks", "inference-eks"])
    roles = template.find_resources("AWS::IAM::Role")
    assert len(roles) == 2
    associations = template.find_resources("AWS::EKS::PodIdentityAssociation")
    by_cluster = {a["Properties"]["ClusterName"]: a["Properties"] for a in associations.values()}
    assert sorted(by_cluster) == ["inference-eks", "training-on-eks"]
    role_of = {}
    for properties in by_cluster.values():
        assert properties["Namespace"] == "nodeheal"
        assert properties["ServiceAccount"] == "nodeheal-exporter"
        role_of[properties["ClusterName"]] = properties["RoleArn"]["Fn::GetAtt"][0]
    assert set(role_of.values()) == set(roles)
    for cluster, role_id in role_of.items():
        trust = roles[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
        assert trust["Condition"]["StringEquals"]["aws:RequestTag/eks-cluster-name"] == cluster


def test_defect_9_bus_policy_statements_are_applied_one_at_a_time() -> None:
    template = synth(["training-on-eks", "inference-eks"])
    bus_id = next(iter(template.find_resources("AWS::Events::EventBus")))
    policies = template.find_resources("AWS::Events::EventBusPolicy")
    # Per cluster an Allow of its own sources and a Deny of any other; one Deny for everyone else.
    assert len(policies) == 5
    for policy in policies.values():
        assert policy["Properties"]["EventBusName"] == {"Ref": bus_id}
        assert policy["Properties"]["Statement"]["Sid"] == policy["Properties"]["StatementId"]
    # EventBridge rewrites the whole bus policy on each statement: CloudFormation must not race them.
    chained = [p for p in policies.values() if p.get("DependsOn")]
    assert len(chained) == len(policies) - 1


def test_no_cluster_is_a_configuration_error() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Empty")
    bus = events.EventBus(stack, "Bus")
    with pytest.raises(ValueError, match="at least one cluster"):
        ExporterAccess(
            stack,
            "ExporterAccess",
            bus=bus,
            clusters=[],
            source_prefix="nodeheal.exporter",
            namespace="n",
            service_account="s",
        )
