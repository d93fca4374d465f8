"""Functions, state machine, ledger, notifications, alarms and outputs."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from nodeheal.cdk.constructs.lambda_function import CLOUDWATCH_RETENTION_DAYS, retention_in_days
from nodeheal.cdk.workflow_tasks import ALL_TASKS, WORKFLOW_TASKS, TaskSpec
from nodeheal.rbac import KUBERNETES_RULES
from nodeheal.stack_outputs import required_outputs
from nodeheal.steps import MUTATION_GUARD
from nodeheal.worst_case import (
    MUTATING_TASKS,
    NOT_IDEMPOTENT_TASKS,
    TASK_TIMEOUT_SECONDS,
    contended_retry_clause,
    contended_wait_seconds,
    holding_worst_case,
    task_retry_clauses,
    task_worst_case_seconds,
)
from tests.infrastructure.conftest import Synthesized, function_resource


def only(resources: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.items()))


@pytest.mark.parametrize("spec", ALL_TASKS, ids=lambda spec: spec.name)
def test_function_follows_its_spec(default_stack: Synthesized, spec: TaskSpec) -> None:
    properties = function_resource(default_stack, spec.name)["Properties"]
    assert properties["Handler"] == spec.handler
    assert properties["Runtime"] == "python3.12"
    assert properties["Architectures"] == ["x86_64"]
    assert properties["Timeout"] == spec.timeout_seconds
    assert properties["MemorySize"] == spec.memory_mb
    assert properties["TracingConfig"] == {"Mode": "Active"}
    assert properties["LoggingConfig"]["LogFormat"] == "JSON"
    log_group_id = properties["LoggingConfig"]["LogGroup"]["Ref"]
    log_group = default_stack.json["Resources"][log_group_id]
    assert log_group["Properties"]["LogGroupName"] == f"/aws/lambda/NodeHeal-{spec.name}"
    assert log_group["Properties"]["RetentionInDays"] == 30


@pytest.mark.parametrize("spec", WORKFLOW_TASKS, ids=lambda spec: spec.name)
def test_workflow_function_environment(default_stack: Synthesized, spec: TaskSpec) -> None:
    variables = function_resource(default_stack, spec.name)["Properties"]["Environment"]["Variables"]
    table_id, _ = only(default_stack.resources("AWS::DynamoDB::Table"))
    topic_id, _ = only(default_stack.resources("AWS::SNS::Topic"))
    expected: dict[str, Any] = {
        "POWERTOOLS_SERVICE_NAME": "nodeheal",
        "POWERTOOLS_METRICS_NAMESPACE": "NodeHeal",
        "LOG_LEVEL": "INFO",
        # Read live by every mutating step (D4): a redeploy in another mode stops executions in flight.
        "NODEHEAL_MODE": default_stack.config.remediation.mode.value,
    }
    if spec.ledger:
        expected["NODEHEAL_LEDGER_TABLE"] = {"Ref": table_id}
    if spec.publishes_notifications:
        expected["NODEHEAL_TOPIC_ARN"] = {"Ref": topic_id}
    assert variables == expected


def test_all_functions_share_one_code_asset(default_stack: Synthesized) -> None:
    codes = {
        json.dumps(f["Properties"]["Code"], sort_keys=True)
        for f in default_stack.resources("AWS::Lambda::Function").values()
    }
    assert len(codes) == 1


def test_kubernetes_tasks_run_in_the_configured_vpc(full_stack: Synthesized) -> None:
    for spec in ALL_TASKS:
        vpc_config = function_resource(full_stack, spec.name)["Properties"].get("VpcConfig")
        if not spec.kubernetes:
            assert vpc_config is None, spec.name
            continue
        assert vpc_config == {
            "SubnetIds": ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"],
            "SecurityGroupIds": ["sg-0ccccccccccccccc3"],
        }


def test_default_stack_is_not_in_a_vpc(default_stack: Synthesized) -> None:
    for function in default_stack.resources("AWS::Lambda::Function").values():
        assert "VpcConfig" not in function["Properties"]


def test_log_retention_rounds_up_to_a_cloudwatch_value(full_stack: Synthesized) -> None:
    # logRetentionDays 45 is not a CloudWatch value; 60 is the next one that keeps 45 days.
    for log_group in full_stack.resources("AWS::Logs::LogGroup").values():
        assert log_group["Properties"]["RetentionInDays"] == 60
    assert [retention_in_days(d) for d in (1, 2, 30, 31, 3653)] == [1, 3, 30, 60, 3653]
    assert all(retention_in_days(d) == d for d in CLOUDWATCH_RETENTION_DAYS)


def test_state_machine_is_standard_traced_logged_and_time_bounded(default_stack: Synthesized) -> None:
    _, machine = only(default_stack.resources("AWS::StepFunctions::StateMachine"))
    properties = machine["Properties"]
    assert properties["StateMachineType"] == "STANDARD"
    assert properties["StateMachineName"] == "NodeHeal-remediation"
    assert properties["TracingConfiguration"] == {"Enabled": True}
    logging = properties["LoggingConfiguration"]
    assert logging["Level"] == "ALL"
    assert logging["IncludeExecutionData"] is True
    (destination,) = logging["Destinations"]
    log_group_id = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    log_group = default_stack.json["Resources"][log_group_id]["Properties"]
    assert log_group["LogGroupName"] == "/aws/vendedlogs/states/NodeHeal-remediation"
    assert log_group["RetentionInDays"] == 30
    definition = _definition(properties)
    assert definition["TimeoutSeconds"] == 1320 * 60


def test_state_machine_invokes_every_workflow_function(default_stack: Synthesized) -> None:
    _, machine = only(default_stack.resources("AWS::StepFunctions::StateMachine"))
    rendered = json.dumps(machine["Properties"]["DefinitionString"])
    for spec in WORKFLOW_TASKS:
        function_id = next(
            logical_id
            for logical_id, resource in default_stack.resources("AWS::Lambda::Function").items()
            if resource["Properties"]["FunctionName"] == f"NodeHeal-{spec.name}"
        )
        assert function_id in rendered, spec.name
    ingest_id = next(
        logical_id
        for logical_id, resource in default_stack.resources("AWS::Lambda::Function").items()
        if resource["Properties"]["FunctionName"] == "NodeHeal-ingest"
    )
    assert ingest_id not in rendered


def test_defect_6_the_worst_case_counts_every_retry_the_state_machine_has(default_stack: Synthesized) -> None:
    """The lock TTL and workflow timeout checks are only as good as their model of the ASL: each task
    state's Retry clauses and its function's timeout must give the worst case nodeheal.worst_case uses."""
    _, machine = only(default_stack.resources("AWS::StepFunctions::StateMachine"))
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    # Each Lambda task's Resource is its function's ARN: keep the function's logical id in its place.
    text = "".join(part if isinstance(part, str) else part.get("Fn::GetAtt", ["TOKEN"])[0] for part in parts)
    states = json.loads(text)["States"]
    functions = default_stack.resources("AWS::Lambda::Function")
    retry = default_stack.config.remediation.retry
    seen = set()
    for state_name, state in states.items():
        if state["Type"] != "Task":
            continue
        function = functions[state["Resource"]]["Properties"]
        task = function["FunctionName"].removeprefix("NodeHeal-")
        clauses = task_retry_clauses(retry, idempotent=task not in NOT_IDEMPOTENT_TASKS)
        retries = state.get("Retry", [])
        if task in MUTATING_TASKS:
            # Held back by a contender: counted once in the holding worst case, with no jitter so
            # the retries span the contender's whole mark.
            *retries, contended = retries
            expected = contended_retry_clause(default_stack.config.remediation)
            assert contended == {
                "ErrorEquals": list(expected.errors),
                "IntervalSeconds": expected.interval_seconds,
                "MaxAttempts": expected.max_attempts,
                "BackoffRate": expected.backoff_rate,
                "JitterStrategy": "NONE",
            }, state_name
        assert [tuple(retry["ErrorEquals"]) for retry in retries] == [c.errors for c in clauses], state_name
        attempts = 1 + sum(retry.get("MaxAttempts", 3) for retry in retries)
        backoff = sum(
            retry.get("IntervalSeconds", 1) * retry.get("BackoffRate", 2.0) ** k
            for retry in retries
            for k in range(retry.get("MaxAttempts", 3))
        )
        assert function["Timeout"] == TASK_TIMEOUT_SECONDS[task], state_name
        assert math.ceil(attempts * function["Timeout"] + backoff) == task_worst_case_seconds(
            TASK_TIMEOUT_SECONDS[task], clauses
        ), state_name
        seen.add(task)
    assert seen == set(TASK_TIMEOUT_SECONDS)

    # The steps the contended retry covers are exactly those granted the mutation claim.
    # The guard's live reads and its lock claim come first in a mutating step's grants (its episode
    # write may be joined with the step's own reads of the same items, as reboot's is).
    claim = MUTATION_GUARD[:2]
    assert {task.name for task in WORKFLOW_TASKS if task.ledger[:2] == claim} == MUTATING_TASKS
    holding = holding_worst_case(default_stack.config.remediation)
    assert holding.seconds("a contender that never takes over") == contended_wait_seconds(
        default_stack.config.remediation, TASK_TIMEOUT_SECONDS
    )


def _definition(properties: dict[str, Any]) -> dict[str, Any]:
    """The ASL with every CloudFormation token replaced by a placeholder string."""
    parts = properties["DefinitionString"]["Fn::Join"][1]
    text = "".join(part if isinstance(part, str) else '"TOKEN"' for part in parts)
    # Tokens sit inside quoted strings, so the substitution can leave doubled quotes behind.
    return json.loads(text.replace('""TOKEN""', '"TOKEN"'))  # type: ignore[no-any-return]


def test_ledger_table(default_stack: Synthesized) -> None:
    _, table = only(default_stack.resources("AWS::DynamoDB::Table"))
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"
    properties = table["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert properties["TimeToLiveSpecification"] == {"AttributeName": "expiresAt", "Enabled": True}
    assert properties["DeletionProtectionEnabled"] is True
    assert properties["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert properties["GlobalSecondaryIndexes"] == [
        {
            "IndexName": "byCluster",
            "KeySchema": [
                {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        }
    ]
    assert sorted(properties["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == [
        {"AttributeName": name, "AttributeType": "S"} for name in ("gsi1pk", "gsi1sk", "pk", "sk")
    ]


def test_topic_is_encrypted_with_a_rotated_key_cloudwatch_can_use(default_stack: Synthesized) -> None:
    key_id, key = only(default_stack.resources("AWS::KMS::Key"))
    _, topic = only(default_stack.resources("AWS::SNS::Topic"))
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert key["Properties"]["EnableKeyRotation"] is True
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} for s in statements)
    _, topic_policy = only(default_stack.resources("AWS::SNS::TopicPolicy"))
    assert any(
        s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        for s in topic_policy["Properties"]["PolicyDocument"]["Statement"]
    )


def test_email_subscriptions_come_from_the_config(
    default_stack: Synthesized, full_stack: Synthesized
) -> None:
    assert default_stack.resources("AWS::SNS::Subscription") == {}
    endpoints = sorted(
        s["Properties"]["Endpoint"] for s in full_stack.resources("AWS::SNS::Subscription").values()
    )
    assert endpoints == ["gpu-oncall@example.com", "sre@example.com"]
    for subscription in full_stack.resources("AWS::SNS::Subscription").values():
        assert subscription["Properties"]["Protocol"] == "email"


def test_alarms_notify_the_topic(default_stack: Synthesized) -> None:
    topic_id, _ = only(default_stack.resources("AWS::SNS::Topic"))
    alarms = list(default_stack.resources("AWS::CloudWatch::Alarm").values())
    by_metric = {
        (a["Properties"]["Namespace"], a["Properties"]["MetricName"]): a["Properties"] for a in alarms
    }
    assert set(by_metric) == {
        ("AWS/States", "ExecutionsFailed"),
        ("AWS/States", "ExecutionsTimedOut"),
        ("AWS/States", "ExecutionsAborted"),
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
        ("NodeHeal", "BreakerOpened"),
        ("NodeHeal", "ExporterHeartbeats"),
    }
    assert len(alarms) == 9, "one depth alarm per dead-letter queue, one heartbeat alarm per cluster"
    queue_ids = set(default_stack.resources("AWS::SQS::Queue"))
    alarmed_queues = {
        a["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for a in alarms
        if a["Properties"]["Namespace"] == "AWS/SQS"
    }
    assert alarmed_queues == queue_ids
    for alarm in alarms:
        properties = alarm["Properties"]
        assert properties["AlarmActions"] == [{"Ref": topic_id}]
        if properties["MetricName"] == "ExporterHeartbeats":
            continue  # silence is the failure there: tests/infrastructure/test_observability.py
        assert properties["ComparisonOperator"] == "GreaterThanThreshold"
        assert properties["Threshold"] == 0
        assert properties["TreatMissingData"] == "notBreaching"


@pytest.mark.parametrize("which", ["default_stack", "full_stack"])
def test_outputs_are_the_ones_the_cli_and_doctor_read(which: str, request: pytest.FixtureRequest) -> None:
    synthesized: Synthesized = request.getfixturevalue(which)
    outputs = synthesized.json["Outputs"]
    kubernetes_functions = [spec.name for spec in WORKFLOW_TASKS if spec.kubernetes]
    # nodeheal/rbac.py holds the rules of exactly the functions that reach the cluster.
    assert sorted(kubernetes_functions) == sorted(KUBERNETES_RULES)
    assert sorted(outputs) == sorted(required_outputs(synthesized.config.clusters, kubernetes_functions))
