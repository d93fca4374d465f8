"""The ``NodeHeal`` construct in a stack of another app: existing bus, topic and VPC passed in.

Synthesized in-process without bundling (tests/infrastructure/test_external_app.py synthesizes an app
outside the checkout against the built distribution, with the real asset).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_sns as sns

from nodeheal.cdk import NodeHeal
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.errors import ConfigurationError
from nodeheal.stack_outputs import EVENT_BUS_NAME, required_outputs

SHARED_BUS = "platform-events"
TOPIC_ARN = "arn:aws:sns:us-west-2:111122223333:platform-alerts"
ENVIRONMENT = Environment(account="111122223333", region="us-west-2")


def resources_of(template: dict[str, Any], resource_type: str) -> list[dict[str, Any]]:
    return [resource for resource in template["Resources"].values() if resource["Type"] == resource_type]


def synthesize(tmp_path: Path, **props: Any) -> tuple[NodeHeal, dict[str, Any]]:
    app = App(outdir=str(tmp_path), context={"aws:cdk:bundling-stacks": []})
    stack = Stack(app, "Platform", env=ENVIRONMENT)
    props = {key: value(stack) if callable(value) else value for key, value in props.items()}
    nodeheal = NodeHeal(stack, "NodeHeal", **props)
    return nodeheal, app.synth().get_stack_by_name("Platform").template


def shared_bus(scope: Stack) -> events.IEventBus:
    return events.EventBus.from_event_bus_name(scope, "SharedBus", SHARED_BUS)


def test_a_passed_bus_is_used_and_no_bus_is_created(tmp_path: Path) -> None:
    nodeheal, template = synthesize(tmp_path, config={"clusters": ["gpu-a"]}, event_bus=shared_bus)
    assert resources_of(template, "AWS::Events::EventBus") == []
    assert nodeheal.event_bus.event_bus_name == SHARED_BUS
    rules = [
        rule for rule in resources_of(template, "AWS::Events::Rule") if "EventBusName" in rule["Properties"]
    ]
    assert len(rules) == 3  # remediation, heartbeats and the counted signals' Node Events
    assert {rule["Properties"]["EventBusName"] for rule in rules} == {SHARED_BUS}
    (archive,) = resources_of(template, "AWS::Events::Archive")
    assert SHARED_BUS in str(archive["Properties"]["SourceArn"])
    statements = {
        policy["Properties"]["StatementId"]
        for policy in resources_of(template, "AWS::Events::EventBusPolicy")
    }
    # The per-exporter statements are added; the deny-all would lock every other producer out.
    assert statements == {"ExporterGpuAPutOwnEvents", "ExporterGpuANoOtherSource"}
    assert len(resources_of(template, "AWS::StepFunctions::StateMachine")) == 1


def test_without_a_bus_the_construct_owns_one_and_denies_other_producers(tmp_path: Path) -> None:
    _, template = synthesize(tmp_path, config={"clusters": ["gpu-a"]})
    (bus,) = resources_of(template, "AWS::Events::EventBus")
    assert bus["Properties"]["Name"] == "nodeheal"
    statements = {
        policy["Properties"]["StatementId"]
        for policy in resources_of(template, "AWS::Events::EventBusPolicy")
    }
    assert "OnlyExportersPutEvents" in statements


def test_a_passed_topic_receives_the_notifications(tmp_path: Path) -> None:
    def topic(scope: Stack) -> sns.ITopic:
        return sns.Topic.from_topic_arn(scope, "Alerts", TOPIC_ARN)

    nodeheal, template = synthesize(
        tmp_path,
        config={"clusters": ["gpu-a"], "notifications": {"emails": ["sre@example.com"]}},
        topic=topic,
    )
    assert resources_of(template, "AWS::SNS::Topic") == []
    assert nodeheal.topic.topic_arn == TOPIC_ARN
    (subscription,) = resources_of(template, "AWS::SNS::Subscription")
    assert subscription["Properties"]["TopicArn"] == TOPIC_ARN
    published_to = {
        function["Properties"]["Environment"]["Variables"].get("NODEHEAL_TOPIC_ARN")
        for function in resources_of(template, "AWS::Lambda::Function")
    }
    assert TOPIC_ARN in published_to
    alarm_actions = {
        action
        for alarm in resources_of(template, "AWS::CloudWatch::Alarm")
        for action in alarm["Properties"].get("AlarmActions", [])
    }
    assert alarm_actions == {TOPIC_ARN}


def test_a_passed_vpc_places_the_kubernetes_functions_in_its_subnets(tmp_path: Path) -> None:
    def vpc(scope: Stack) -> ec2.IVpc:
        return ec2.Vpc.from_vpc_attributes(
            scope,
            "Vpc",
            vpc_id="vpc-0123456789abcdef0",
            availability_zones=["us-west-2a", "us-west-2b"],
            private_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"],
        )

    def security_groups(scope: Stack) -> list[ec2.ISecurityGroup]:
        return [ec2.SecurityGroup.from_security_group_id(scope, "Sg", "sg-0ccccccccccccccc3", mutable=False)]

    nodeheal, template = synthesize(
        tmp_path, config={"clusters": ["gpu-a"]}, vpc=vpc, security_groups=security_groups
    )
    placed = {
        function["Properties"]["FunctionName"]: function["Properties"].get("VpcConfig")
        for function in resources_of(template, "AWS::Lambda::Function")
    }
    for name, function in nodeheal.workflow.functions.items():
        config = placed[f"NodeHeal-{name}"]
        if function.spec.kubernetes:
            assert config == {
                "SecurityGroupIds": ["sg-0ccccccccccccccc3"],
                "SubnetIds": ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"],
            }, name
        else:
            assert config is None, name


def test_typed_attributes_name_the_resources(tmp_path: Path) -> None:
    config = NodeHealConfig.from_cdk_context({"clusters": ["gpu-a"], "stackName": "GpuHeal"})
    nodeheal, template = synthesize(tmp_path, config=config)
    assert nodeheal.config is config
    assert set(nodeheal.functions) >= {
        "ingest",
        "count-signals",
        "finalize",
        "cordon",
        "drain",
        "reboot",
        "terminate",
    }
    names = {
        function["Properties"]["FunctionName"] for function in resources_of(template, "AWS::Lambda::Function")
    }
    assert names == {f"GpuHeal-{name}" for name in nodeheal.functions}
    (machine,) = resources_of(template, "AWS::StepFunctions::StateMachine")
    assert machine["Properties"]["StateMachineName"] == "GpuHeal-remediation"
    assert len(resources_of(template, "AWS::DynamoDB::Table")) == 1


def test_a_dict_config_is_checked_like_cdk_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="maxInflight"):
        synthesize(tmp_path, config={"clusters": ["gpu-a"], "budgets": {"maxInflight": 3}})


def test_a_dict_config_lists_every_problem(tmp_path: Path) -> None:
    config = {"clusters": ["gpu-a"], "budgets": {"maxInFlight": -1}, "lockTtlSeconds": 100, "drian": {}}
    with pytest.raises(ConfigurationError) as caught:
        synthesize(tmp_path, config=config)
    message = str(caught.value)
    assert message.startswith("3 problems"), message
    for path in ("nodeheal.budgets.maxInFlight", "nodeheal.drian", "nodeheal.lockTtlSeconds"):
        assert path in message


def test_without_a_mode_the_functions_run_dry_run(tmp_path: Path) -> None:
    """The README's app leaves ``mode`` out: it decides and records, and changes nothing, as the
    shipped cdk.json does. ``full`` is only ever asked for."""
    _, template = synthesize(tmp_path, config={"clusters": ["gpu-a"]})
    modes = {
        function["Properties"]["Environment"]["Variables"].get("NODEHEAL_MODE")
        for function in resources_of(template, "AWS::Lambda::Function")
        if "NODEHEAL_MODE" in function["Properties"].get("Environment", {}).get("Variables", {})
    }
    assert modes == {"dry-run"}


def test_subnets_without_a_vpc_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="need vpc"):
        synthesize(tmp_path, config={"clusters": ["gpu-a"]}, vpc_subnets=ec2.SubnetSelection())


def test_stack_outputs_are_the_ones_the_operator_commands_read(tmp_path: Path) -> None:
    app = App(outdir=str(tmp_path), context={"aws:cdk:bundling-stacks": []})
    stack = Stack(app, "Platform", env=ENVIRONMENT)
    nodeheal = NodeHeal(stack, "NodeHeal", config={"clusters": ["gpu-a"]}, event_bus=shared_bus(stack))
    _, without_outputs = synthesize(tmp_path / "none", config={"clusters": ["gpu-a"]})
    assert "Outputs" not in without_outputs
    nodeheal.add_stack_outputs()
    template = app.synth().get_stack_by_name("Platform").template
    config = nodeheal.config
    kubernetes_tasks = [
        name for name, function in nodeheal.workflow.functions.items() if function.spec.kubernetes
    ]
    assert set(template["Outputs"]) == set(required_outputs(config.clusters, kubernetes_tasks))
    assert template["Outputs"][EVENT_BUS_NAME]["Value"] == SHARED_BUS
