"""The counting function of counted signals (D22): its rule, its dead-letter queues, its
environment and its role."""

from __future__ import annotations

import json
from typing import Any

from nodeheal.cdk.constructs.ingest import FUNCTION_RETRY_ATTEMPTS, TARGET_RETRY_ATTEMPTS
from nodeheal.cdk.constructs.signal_counter import MAX_EVENT_AGE, RESERVED_CONCURRENCY
from nodeheal.cdk.rule_pattern import build_node_event_pattern
from nodeheal.cdk.workflow_tasks import COUNT_SIGNALS_TASK
from nodeheal.events import DETAIL_TYPE_NODE_EVENT
from nodeheal.patterns import match
from nodeheal.runtime import COUNTED_SIGNALS_VARIABLE, LambdaEnvironment
from tests.infrastructure.conftest import (
    Synthesized,
    actions_of,
    function_resource,
    resources_of,
    role_statements,
)


def only(resources: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.items()))


def counting_rule(synthesized: Synthesized) -> dict[str, Any]:
    _, rule = only(
        {
            logical: rule
            for logical, rule in synthesized.resources("AWS::Events::Rule").items()
            if rule["Properties"].get("EventPattern", {}).get("detail-type") == [DETAIL_TYPE_NODE_EVENT]
        }
    )
    return rule


def function_id(synthesized: Synthesized) -> str:
    return next(
        logical
        for logical, resource in synthesized.resources("AWS::Lambda::Function").items()
        if resource["Properties"]["Handler"] == COUNT_SIGNALS_TASK.handler
    )


def node_event(source: str, cluster: str, event_type: str = "Warning") -> dict[str, Any]:
    return {
        "source": source,
        "detail-type": DETAIL_TYPE_NODE_EVENT,
        "detail": {"cluster": cluster, "event": {"type": event_type, "reason": "GPUInformationalXid"}},
    }


def test_the_rule_routes_the_warning_node_events_of_the_configured_clusters(full_stack: Synthesized) -> None:
    rule = counting_rule(full_stack)["Properties"]
    pattern = build_node_event_pattern(full_stack.config)
    assert rule["EventPattern"] == pattern
    prefix = full_stack.config.event_source
    assert pattern == {
        "source": [{"prefix": f"{prefix}."}],
        "detail-type": ["Node Event Observed"],
        "detail": {"cluster": list(full_stack.config.clusters), "event": {"type": ["Warning"]}},
    }
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function_id(full_stack), "Arn"]}
    for cluster in full_stack.config.clusters:
        assert match(pattern, node_event(f"{prefix}.{cluster}", cluster)).matched
        # A Normal Event counts for no signal; the legacy Source never sends contract 1.1.
        assert not match(pattern, node_event(f"{prefix}.{cluster}", cluster, "Normal")).matched
        assert not match(pattern, node_event(prefix, cluster)).matched
    assert not match(pattern, node_event(f"{prefix}.elsewhere", "elsewhere")).matched
    # On NodeHeal's bus, like ingest's rule.
    _, bus = only(full_stack.resources("AWS::Events::EventBus"))
    assert rule["EventBusName"] == {"Ref": next(iter(full_stack.resources("AWS::Events::EventBus")))}
    assert bus["Properties"]["Name"] == full_stack.config.event_bus_name


def test_undeliverable_and_failed_events_land_in_dead_letter_queues_of_their_own(
    default_stack: Synthesized,
) -> None:
    rule = counting_rule(default_stack)["Properties"]
    (target,) = rule["Targets"]
    assert target["RetryPolicy"] == {
        "MaximumEventAgeInSeconds": int(MAX_EVENT_AGE.to_seconds()),
        "MaximumRetryAttempts": TARGET_RETRY_ATTEMPTS,
    }
    delivery_dlq = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    (invoke_config,) = [
        config
        for config in default_stack.resources("AWS::Lambda::EventInvokeConfig").values()
        if config["Properties"]["FunctionName"] == {"Ref": function_id(default_stack)}
    ]
    properties = invoke_config["Properties"]
    assert properties["MaximumRetryAttempts"] == FUNCTION_RETRY_ATTEMPTS
    assert properties["MaximumEventAgeInSeconds"] == int(MAX_EVENT_AGE.to_seconds())
    failure_dlq = properties["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0]
    queues = default_stack.resources("AWS::SQS::Queue")
    assert {delivery_dlq, failure_dlq} <= set(queues)
    assert delivery_dlq != failure_dlq
    # Not ingest's queues: a person tells a lost Warning Event from a lost condition transition.
    ingest_targets = [
        t
        for r in default_stack.resources("AWS::Events::Rule").values()
        if r["Properties"].get("EventPattern", {}).get("detail-type") == ["Node Condition Changed"]
        for t in r["Properties"]["Targets"]
    ]
    assert {t["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0] for t in ingest_targets}.isdisjoint(
        {delivery_dlq, failure_dlq}
    )
    # Both alarmed when a message waits.
    alarmed = {
        alarm["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for alarm in default_stack.resources("AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("Namespace") == "AWS/SQS"
    }
    assert {delivery_dlq, failure_dlq} <= alarmed


def test_the_function_has_reserved_concurrency_and_the_policy_of_the_deployment(
    full_stack: Synthesized,
) -> None:
    properties = function_resource(full_stack, COUNT_SIGNALS_TASK.name)["Properties"]
    assert properties["ReservedConcurrentExecutions"] == RESERVED_CONCURRENCY
    variables = properties["Environment"]["Variables"]
    assert variables["NODEHEAL_CLUSTERS"] == ",".join(full_stack.config.clusters)
    assert variables["NODEHEAL_EVENT_SOURCE"] == full_stack.config.event_source
    assert "NODEHEAL_LEDGER_TABLE" in variables and "NODEHEAL_STATE_MACHINE_ARN" in variables
    policy = full_stack.config.remediation.policy
    assert policy.counted_signals, "the full context sets a counted signal's rule"
    assert json.loads(variables[COUNTED_SIGNALS_VARIABLE]) == policy.to_json()["countedSignals"]
    # What the function reads back at its cold start is the deployment's policy.
    environment = LambdaEnvironment.from_environ(
        {"AWS_REGION": "us-west-2", COUNTED_SIGNALS_VARIABLE: variables[COUNTED_SIGNALS_VARIABLE]}
    )
    assert environment.counting_policy.counted_signals == policy.counted_signals


def test_its_role_may_count_drop_and_start_nothing_else(default_stack: Synthesized) -> None:
    statements = role_statements(default_stack, COUNT_SIGNALS_TASK.name)
    state_machine_id, _ = only(default_stack.resources("AWS::StepFunctions::StateMachine"))
    by_service: dict[str, list[dict[str, Any]]] = {}
    for statement in statements:
        services = {action.split(":")[0] for action in actions_of(statement)}
        for service in services:
            by_service.setdefault(service, []).append(statement)
    assert [(actions_of(s), resources_of(s)) for s in by_service.pop("states")] == [
        (["states:StartExecution"], [{"Ref": state_machine_id}])
    ]
    ledger = by_service.pop("dynamodb")
    assert sorted(
        (sorted(actions_of(s)), s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])
        for s in ledger
    ) == [
        (["dynamodb:GetItem", "dynamodb:PutItem"], ["SIGNALS#training-on-eks#*"]),
        (["dynamodb:PutItem"], ["DROPPED#*"]),
    ]
    # The rest is what every event function has: its logs, its traces, its failure DLQ (and the key).
    assert set(by_service) <= {"logs", "xray", "sqs", "kms"}, by_service.keys()
    assert {a for s in by_service.get("sqs", []) for a in actions_of(s)} <= {
        "sqs:SendMessage",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
    }
