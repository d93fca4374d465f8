"""What a `cdk destroy` leaves behind, and that the next deploy works after it (docs/deploy.md).

Only the ledger outlives the stack, under a generated name; every log group has the fixed name a
person looks for and goes with the stack. The lifecycle test runs the synthesized log groups and
ledger table through moto's CloudFormation (which keeps Retain resources on delete, and whose
CloudWatch Logs refuses a second group of the same name, as AWS does): create, delete, create again,
then the uninstall commands of docs/deploy.md for what stayed.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodeheal.cdk.workflow_tasks import ALL_TASKS
from tests.infrastructure.conftest import Synthesized

#: The DeletionPolicy values under which a resource outlives its stack.
KEPT = {"Retain", "RetainExceptOnCreate", "Snapshot"}


def expected_log_groups(config_stack_name: str, state_machine_name: str) -> set[str]:
    functions = [spec.name for spec in ALL_TASKS]
    return {f"/aws/lambda/{config_stack_name}-{name}" for name in functions} | {
        f"/aws/vendedlogs/states/{state_machine_name}"
    }


def literal_names(properties: dict[str, Any]) -> dict[str, str]:
    """The physical-name properties a template fixes (``TableName``, ``LogGroupName``...)."""
    return {
        key: value for key, value in properties.items() if key.endswith("Name") and isinstance(value, str)
    }


@pytest.mark.parametrize("stack", ["default_stack", "full_stack"])
def test_only_the_ledger_outlives_the_stack_and_under_a_generated_name(
    stack: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(stack)
    kept = {
        logical_id: resource
        for logical_id, resource in synthesized.json["Resources"].items()
        if resource.get("DeletionPolicy") in KEPT or resource.get("UpdateReplacePolicy") in KEPT
    }
    assert [resource["Type"] for resource in kept.values()] == ["AWS::DynamoDB::Table"]
    (table,) = kept.values()
    assert table["DeletionPolicy"] == "Retain"
    assert table["Properties"]["DeletionProtectionEnabled"] is True
    # A fixed name on anything kept would make the next create of the stack fail on that name.
    assert literal_names(table["Properties"]) == {}


@pytest.mark.parametrize("stack", ["default_stack", "full_stack"])
def test_every_log_group_has_its_fixed_name_and_goes_with_the_stack(
    stack: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(stack)
    groups = synthesized.resources("AWS::Logs::LogGroup").values()
    assert {group["Properties"]["LogGroupName"] for group in groups} == expected_log_groups(
        synthesized.config.stack_name, synthesized.config.state_machine_name
    )
    assert {(group["DeletionPolicy"], group["UpdateReplacePolicy"]) for group in groups} == {
        ("Delete", "Delete")
    }


def teardown_template(synthesized: Synthesized) -> str:
    """The stack's log groups and ledger table exactly as synthesized (policies included)."""
    kinds = {"AWS::Logs::LogGroup", "AWS::DynamoDB::Table"}
    resources = {
        logical_id: resource
        for logical_id, resource in synthesized.json["Resources"].items()
        if resource["Type"] in kinds
    }
    return json.dumps({"Resources": resources})


def test_a_deploy_after_destroy_succeeds_and_the_documented_uninstall_removes_the_ledger(
    default_stack: Synthesized,
) -> None:
    template = teardown_template(default_stack)
    stack_name = default_stack.config.stack_name
    names = expected_log_groups(stack_name, default_stack.config.state_machine_name)
    with mock_aws():
        cloudformation = boto3.client("cloudformation")
        logs = boto3.client("logs")
        dynamodb = boto3.client("dynamodb")

        def log_groups() -> set[str]:
            return {group["logGroupName"] for group in logs.describe_log_groups()["logGroups"]}

        def ledger_table() -> str:
            (stack,) = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
            (table_id,) = [r for r in json.loads(template)["Resources"] if r.startswith("Ledger")]
            resource = cloudformation.describe_stack_resource(
                StackName=stack_name, LogicalResourceId=table_id
            )
            assert stack["StackStatus"] == "CREATE_COMPLETE"
            return str(resource["StackResourceDetail"]["PhysicalResourceId"])

        cloudformation.create_stack(StackName=stack_name, TemplateBody=template)
        first_ledger = ledger_table()
        assert log_groups() == names

        cloudformation.delete_stack(StackName=stack_name)
        assert log_groups() == set()
        assert dynamodb.list_tables()["TableNames"] == [first_ledger]

        # The next deploy creates its log groups again and a ledger of its own.
        cloudformation.create_stack(StackName=stack_name, TemplateBody=template)
        second_ledger = ledger_table()
        assert log_groups() == names
        assert second_ledger != first_ledger

        # docs/deploy.md, "Uninstall": the kept table refuses deletion until its protection is off.
        with pytest.raises(ClientError, match="DeletionProtectionEnabled"):
            dynamodb.delete_table(TableName=first_ledger)
        dynamodb.update_table(TableName=first_ledger, DeletionProtectionEnabled=False)
        dynamodb.delete_table(TableName=first_ledger)
        assert dynamodb.list_tables()["TableNames"] == [second_ledger]
