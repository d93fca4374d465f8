"""The ingest path: bus, rule pattern, archive, dead-letter queues and the ingest function."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match

from nodeheal.cdk.rule_pattern import build_event_pattern
from nodeheal.deploy_config import DEFAULT_RULE_CONDITIONS, NodeHealConfig
from nodeheal.events import DEFAULT_SOURCE, DETAIL_TYPE_CONDITION_CHANGED
from tests.infrastructure.conftest import Synthesized, function_resource


def only(resources: dict[str, Any]) -> dict[str, Any]:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.values()))


def remediation_rules(synthesized: Synthesized) -> dict[str, Any]:
    """The rule that starts remediations (the other one routes exporter heartbeats)."""
    return {
        logical: rule
        for logical, rule in synthesized.resources("AWS::Events::Rule").items()
        if rule["Properties"].get("EventPattern", {}).get("detail-type") == ["Node Condition Changed"]
    }


def config_with(**context: Any) -> NodeHealConfig:
    return NodeHealConfig.from_cdk_context({"clusters": ["training-on-eks"], **context})


def test_rule_pattern_is_build_event_pattern_of_the_config(default_stack: Synthesized) -> None:
    rule = only(remediation_rules(default_stack))
    assert rule["Properties"]["EventPattern"] == build_event_pattern(default_stack.config)


def test_default_pattern_matches_contract_v1_bad_transitions() -> None:
    pattern = build_event_pattern(config_with())
    # Every cluster exporter's own source, and (until 0.2.0) the legacy one of contract "1" exporters.
    assert pattern["source"] == [{"prefix": f"{DEFAULT_SOURCE}."}, DEFAULT_SOURCE]
    assert pattern["detail-type"] == [DETAIL_TYPE_CONDITION_CHANGED] == ["Node Condition Changed"]
    assert pattern["detail"]["cluster"] == ["training-on-eks"]
    branches = pattern["detail"]["$or"]
    # Each default condition is matched in exactly one branch, with exactly its bad statuses...
    for condition_type, statuses in DEFAULT_RULE_CONDITIONS:
        (branch,) = [b["condition"] for b in branches if condition_type in b["condition"]["type"]]
        assert branch["status"] == sorted(statuses), condition_type
    # ...and branches are per status set: problem conditions True, *Ready False, Ready also Unknown.
    assert len({tuple(b["condition"]["status"]) for b in branches}) == len(branches)
    by_type = {t: b["condition"]["status"] for b in branches for t in b["condition"]["type"]}
    assert by_type["GPUProblem"] == ["True"]
    assert by_type["AcceleratedHardwareReady"] == ["False"]
    assert by_type["Ready"] == ["False", "Unknown"]
    # No label filter configured: the pattern must not constrain node labels at all.
    assert "node" not in pattern["detail"]


def test_single_condition_group_is_a_plain_match_and_labels_filter_node_labels() -> None:
    pattern = build_event_pattern(
        config_with(
            rule={
                "conditions": [
                    {"type": "GPUProblem", "statuses": ["True"]},
                    {"type": "KernelDeadlock", "statuses": ["True"]},
                ],
                "nodeLabels": {
                    "karpenter.sh/nodepool": ["gpu"],
                    "node.kubernetes.io/instance-type": ["p5.48xlarge"],
                },
            },
            eventBus={"source": "acme.gpu"},
        )
    )
    assert pattern["source"] == [{"prefix": "acme.gpu."}, "acme.gpu"]
    assert "$or" not in pattern["detail"]
    assert pattern["detail"]["condition"] == {"type": ["GPUProblem", "KernelDeadlock"], "status": ["True"]}
    assert pattern["detail"]["node"] == {
        "labels": {"karpenter.sh/nodepool": ["gpu"], "node.kubernetes.io/instance-type": ["p5.48xlarge"]}
    }


def test_full_config_pattern_lists_both_clusters_and_the_label_filter(full_stack: Synthesized) -> None:
    rule = only(remediation_rules(full_stack))
    detail = rule["Properties"]["EventPattern"]["detail"]
    assert detail["cluster"] == ["training-a", "inference-b"]
    assert detail["node"] == {"labels": {"karpenter.sh/nodepool": ["gpu", "gpu-spot"]}}
    assert rule["Properties"]["EventPattern"]["source"] == [{"prefix": "acme.nodeheal."}, "acme.nodeheal"]


def test_rule_is_on_the_custom_bus_and_targets_ingest_with_retry_policy_and_dlq(
    default_stack: Synthesized,
) -> None:
    bus_id = next(iter(default_stack.resources("AWS::Events::EventBus")))
    default_stack.template.has_resource_properties("AWS::Events::EventBus", {"Name": "nodeheal"})
    rule = only(remediation_rules(default_stack))
    assert rule["Properties"]["EventBusName"] == {"Ref": bus_id}
    (target,) = rule["Properties"]["Targets"]
    ingest_id = next(
        logical_id
        for logical_id, resource in default_stack.resources("AWS::Lambda::Function").items()
        if resource["Properties"]["FunctionName"] == "NodeHeal-ingest"
    )
    assert target["Arn"] == {"Fn::GetAtt": [ingest_id, "Arn"]}
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 900, "MaximumRetryAttempts": 8}
    dlq_id = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    assert default_stack.json["Resources"][dlq_id]["Type"] == "AWS::SQS::Queue"


def test_event_age_is_bounded_by_the_stale_event_setting_and_eventbridge_minimum(
    full_stack: Synthesized,
) -> None:
    # staleEventSeconds 30 is below EventBridge's 60 s minimum event age.
    rule = only(remediation_rules(full_stack))
    assert rule["Properties"]["Targets"][0]["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60


def test_handler_failures_go_to_their_own_dead_letter_queue(default_stack: Synthesized) -> None:
    ingest_id = next(
        logical
        for logical, function in default_stack.resources("AWS::Lambda::Function").items()
        if function["Properties"]["Handler"] == "lambdas.ingest.handler"
    )
    invoke_config = only(
        {
            logical: config
            for logical, config in default_stack.resources("AWS::Lambda::EventInvokeConfig").items()
            if config["Properties"]["FunctionName"] == {"Ref": ingest_id}
        }
    )["Properties"]
    assert invoke_config["MaximumRetryAttempts"] == 2
    assert invoke_config["MaximumEventAgeInSeconds"] == 900
    failure_queue = invoke_config["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0]
    rule = only(remediation_rules(default_stack))
    delivery_queue = rule["Properties"]["Targets"][0]["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    assert failure_queue != delivery_queue


def test_dead_letter_queues_are_encrypted_and_refuse_plain_http(default_stack: Synthesized) -> None:
    queues = default_stack.resources("AWS::SQS::Queue")
    # Ingest's two, and the counting function's (tests/infrastructure/test_signal_counter.py).
    assert len(queues) == 4
    (key_id,) = default_stack.resources("AWS::KMS::Key")
    for queue in queues.values():
        # The stack's own customer managed key, which EventBridge may use (tests/infrastructure/test_encryption.py).
        assert queue["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
        assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    for policy in default_stack.resources("AWS::SQS::QueuePolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
            for s in statements
        )


def test_archive_keeps_the_rule_events_for_the_configured_retention(default_stack: Synthesized) -> None:
    archive = only(default_stack.resources("AWS::Events::Archive"))["Properties"]
    assert archive["RetentionDays"] == 14
    assert archive["EventPattern"] == build_event_pattern(default_stack.config)
    bus_id = next(iter(default_stack.resources("AWS::Events::EventBus")))
    assert archive["SourceArn"] == {"Fn::GetAtt": [bus_id, "Arn"]}


def test_archive_retention_zero_keeps_events_indefinitely(full_stack: Synthesized) -> None:
    archive = only(full_stack.resources("AWS::Events::Archive"))["Properties"]
    assert archive.get("RetentionDays", 0) == 0


def test_ingest_environment(default_stack: Synthesized) -> None:
    variables = function_resource(default_stack, "ingest")["Properties"]["Environment"]["Variables"]
    state_machine_id = next(iter(default_stack.resources("AWS::StepFunctions::StateMachine")))
    table_id = next(iter(default_stack.resources("AWS::DynamoDB::Table")))
    assert variables == {
        "POWERTOOLS_SERVICE_NAME": "nodeheal",
        "POWERTOOLS_METRICS_NAMESPACE": "NodeHeal",
        "LOG_LEVEL": "INFO",
        "NODEHEAL_STATE_MACHINE_ARN": {"Ref": state_machine_id},
        "NODEHEAL_CLUSTERS": "training-on-eks",
        "NODEHEAL_STALE_EVENT_SECONDS": "900",
        "NODEHEAL_EVENT_SOURCE": "nodeheal.exporter",
        "NODEHEAL_LEDGER_TABLE": {"Ref": table_id},
    }


def test_ingest_environment_lists_every_cluster(full_stack: Synthesized) -> None:
    variables = function_resource(full_stack, "ingest")["Properties"]["Environment"]["Variables"]
    assert variables["NODEHEAL_CLUSTERS"] == "training-a,inference-b"
    assert variables["NODEHEAL_EVENT_SOURCE"] == "acme.nodeheal"
    assert variables["NODEHEAL_STALE_EVENT_SECONDS"] == "30"


def test_eventbridge_may_invoke_only_the_ingest_function_from_the_rule(default_stack: Synthesized) -> None:
    rule_id = next(iter(remediation_rules(default_stack)))
    default_stack.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [rule_id, "Arn"]},
            "FunctionName": Match.any_value(),
        },
    )
