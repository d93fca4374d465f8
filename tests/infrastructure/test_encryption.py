"""Which key protects what (nodeheal/cdk/constructs/encryption.py), and the event functions'
reserved concurrency."""

from __future__ import annotations

from typing import Any

import pytest

from nodeheal.cdk.constructs.access import LEDGER_KEY_ACTIONS
from nodeheal.cdk.constructs.signal_counter import RESERVED_CONCURRENCY as COUNTER_RESERVED_CONCURRENCY
from nodeheal.cdk.workflow_tasks import ALL_TASKS, COUNT_SIGNALS_TASK, INGEST_TASK
from tests.infrastructure.conftest import (
    CUSTOMER_KEY_ARN,
    Synthesized,
    function_resource,
    role_statements,
)


def only(resources: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.items()))


def key_statements(synthesized: Synthesized, service: str) -> list[dict[str, Any]]:
    _, key = only(synthesized.resources("AWS::KMS::Key"))
    return [
        s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Principal") == {"Service": service}
    ]


def ledger_key_statements(synthesized: Synthesized, task: str) -> list[dict[str, Any]]:
    """The task's statements on the customer key that only DynamoDB can exercise (publishing to the
    topic and sending to the failure DLQ are granted on the same key, without the condition)."""
    return [
        s
        for s in role_statements(synthesized, task)
        if s["Resource"] == CUSTOMER_KEY_ARN
        and "kms:ViaService" in s.get("Condition", {}).get("StringEquals", {})
    ]


def test_without_a_key_the_stack_owns_one_for_the_topic_and_the_queues(default_stack: Synthesized) -> None:
    key_id, key = only(default_stack.resources("AWS::KMS::Key"))
    assert key["Properties"]["EnableKeyRotation"] is True
    key_arn = {"Fn::GetAtt": [key_id, "Arn"]}
    _, topic = only(default_stack.resources("AWS::SNS::Topic"))
    assert topic["Properties"]["KmsMasterKeyId"] == key_arn
    queues = default_stack.resources("AWS::SQS::Queue").values()
    # Ingest's and the counting function's delivery and failure DLQs.
    assert [q["Properties"]["KmsMasterKeyId"] for q in queues] == [key_arn] * 4


@pytest.mark.parametrize("service", ["cloudwatch.amazonaws.com", "events.amazonaws.com"])
def test_the_stack_key_admits_alarms_and_eventbridge_to_data_keys_only(
    default_stack: Synthesized, service: str
) -> None:
    (statement,) = key_statements(default_stack, service)
    assert statement["Effect"] == "Allow"
    assert sorted(statement["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]


def test_without_a_key_the_ledger_and_the_logs_keep_their_services_encryption(
    default_stack: Synthesized,
) -> None:
    _, table = only(default_stack.resources("AWS::DynamoDB::Table"))
    assert "SSESpecification" not in table["Properties"]
    for log_group in default_stack.resources("AWS::Logs::LogGroup").values():
        assert "KmsKeyId" not in log_group["Properties"]
    assert "CustomerKeyRegion" not in str(default_stack.json.get("Rules", {}))


def test_a_customer_key_encrypts_ledger_logs_topic_and_queues(keyed_stack: Synthesized) -> None:
    assert keyed_stack.resources("AWS::KMS::Key") == {}
    _, table = only(keyed_stack.resources("AWS::DynamoDB::Table"))
    assert table["Properties"]["SSESpecification"] == {
        "KMSMasterKeyId": CUSTOMER_KEY_ARN,
        "SSEEnabled": True,
        "SSEType": "KMS",
    }
    log_groups = keyed_stack.resources("AWS::Logs::LogGroup").values()
    assert len(log_groups) == len(ALL_TASKS) + 1  # and the state machine's
    assert {g["Properties"]["KmsKeyId"] for g in log_groups} == {CUSTOMER_KEY_ARN}
    _, topic = only(keyed_stack.resources("AWS::SNS::Topic"))
    assert topic["Properties"]["KmsMasterKeyId"] == CUSTOMER_KEY_ARN
    queues = keyed_stack.resources("AWS::SQS::Queue").values()
    # Ingest's and the counting function's delivery and failure DLQs.
    assert [q["Properties"]["KmsMasterKeyId"] for q in queues] == [CUSTOMER_KEY_ARN] * 4


def test_a_deployment_outside_the_keys_region_is_refused_before_it_starts(keyed_stack: Synthesized) -> None:
    (rule,) = [
        r for name, r in keyed_stack.json["Rules"].items() if name.startswith("EncryptionCustomerKeyRegion")
    ]
    (assertion,) = rule["Assertions"]
    assert assertion["Assert"] == {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-west-2"]}
    assert "us-west-2" in assertion["AssertDescription"]


@pytest.mark.parametrize("spec", ALL_TASKS, ids=lambda spec: spec.name)
def test_ledger_users_may_use_the_key_through_dynamodb_only(keyed_stack: Synthesized, spec: Any) -> None:
    statements = ledger_key_statements(keyed_stack, spec.name)
    if not spec.ledger:
        assert statements == []
        return
    (statement,) = statements
    assert sorted(statement["Action"]) == sorted(LEDGER_KEY_ACTIONS)
    via = statement["Condition"]["StringEquals"]["kms:ViaService"]
    assert via == {"Fn::Join": ["", ["dynamodb.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}


def test_only_the_event_functions_have_reserved_concurrency_and_ingest_s_is_configurable(
    default_stack: Synthesized, full_stack: Synthesized
) -> None:
    """Ingest and the counting function, which EventBridge invokes for every event they match: a
    storm may not take the account's concurrency, nor the account's take theirs."""
    for synthesized, expected in ((default_stack, 10), (full_stack, 25)):
        assert synthesized.config.ingest_reserved_concurrency == expected
        by_spec = {INGEST_TASK.name: expected, COUNT_SIGNALS_TASK.name: COUNTER_RESERVED_CONCURRENCY}
        for spec in ALL_TASKS:
            reserved = function_resource(synthesized, spec.name)["Properties"].get(
                "ReservedConcurrentExecutions"
            )
            assert reserved == by_spec.get(spec.name), spec.name
