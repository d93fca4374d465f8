"""Dashboard, alarms, the heartbeat rule and the optional Slack channel, asserted in the template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeheal.cdk.rule_pattern import (
    build_event_pattern,
    build_heartbeat_pattern,
    build_node_event_pattern,
)
from nodeheal.commands.rule_matching import template_rules
from nodeheal.events import DETAIL_TYPE_EXPORTER_HEARTBEAT
from nodeheal.patterns import match
from nodeheal.workflow.records import Outcome
from tests.infrastructure.conftest import FULL_CONTEXT, Synthesized, synthesize


def alarms(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in synthesized.resources("AWS::CloudWatch::Alarm").items()}


def topic_ref(synthesized: Synthesized) -> dict[str, str]:
    (logical,) = synthesized.resources("AWS::SNS::Topic")
    return {"Ref": logical}


def by_metric(synthesized: Synthesized, name: str) -> list[dict[str, Any]]:
    return [p for p in alarms(synthesized).values() if p.get("MetricName") == name]


def test_every_alarm_notifies_the_topic(default_stack: Synthesized) -> None:
    found = alarms(default_stack)
    # Three execution ends, four dead-letter queues (ingest's and the counting function's), the
    # breaker, one heartbeat per cluster.
    assert len(found) == 9
    for properties in found.values():
        assert properties["AlarmActions"] == [topic_ref(default_stack)]
        assert properties["AlarmDescription"]


def test_execution_and_dead_letter_alarms_fire_on_the_first_occurrence(default_stack: Synthesized) -> None:
    names = {p["MetricName"] for p in alarms(default_stack).values()}
    assert {
        "ExecutionsFailed",
        "ExecutionsTimedOut",
        "ExecutionsAborted",
        "ApproximateNumberOfMessagesVisible",
    } <= names
    for properties in alarms(default_stack).values():
        if properties["MetricName"] != "ExporterHeartbeats":
            assert properties["Threshold"] == 0
            assert properties["ComparisonOperator"] == "GreaterThanThreshold"
            assert properties["TreatMissingData"] == "notBreaching"


def test_breaker_alarm_reads_the_admit_metric(default_stack: Synthesized) -> None:
    (breaker,) = by_metric(default_stack, "BreakerOpened")
    assert breaker["Namespace"] == "NodeHeal"
    assert breaker["Dimensions"] == [{"Name": "service", "Value": "nodeheal"}]
    assert breaker["Statistic"] == "Sum"
    assert "nodeheal breaker reset" in breaker["AlarmDescription"]


def test_one_heartbeat_alarm_per_cluster_where_silence_breaches(full_stack: Synthesized) -> None:
    heartbeats = by_metric(full_stack, "ExporterHeartbeats")
    assert sorted(d["Value"] for p in heartbeats for d in p["Dimensions"] if d["Name"] == "cluster") == [
        "inference-b",
        "training-a",
    ]
    for properties in heartbeats:
        assert properties["ComparisonOperator"] == "LessThanThreshold"
        assert properties["Threshold"] == 1
        assert properties["TreatMissingData"] == "breaching"
        assert properties["Period"] == 60
        assert properties["EvaluationPeriods"] == properties["DatapointsToAlarm"] == 10
        assert properties["OKActions"] == properties["AlarmActions"] == [topic_ref(full_stack)]


def test_heartbeat_window_is_configurable(tmp_path: Path) -> None:
    synthesized = synthesize(tmp_path, {**FULL_CONTEXT, "observability": {"heartbeatMissingMinutes": 15}})
    for properties in by_metric(synthesized, "ExporterHeartbeats"):
        assert properties["EvaluationPeriods"] == 15


def dashboard_body(synthesized: Synthesized) -> dict[str, Any]:
    (dashboard,) = synthesized.resources("AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == synthesized.config.stack_name
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    # Only the alarm ARNs and the region are tokens; the metric definitions are literal.
    text = "".join(part if isinstance(part, str) else '"TOKEN"' for part in parts)
    return json.loads(text.replace('""TOKEN""', '"TOKEN"').replace('"TOKEN"TOKEN"', '"TOKEN"'))


def widget_metrics(widget: dict[str, Any]) -> list[list[Any]]:
    return list(widget.get("properties", {}).get("metrics", []))


def titled(body: dict[str, Any], title: str) -> dict[str, Any]:
    return next(w for w in body["widgets"] if w.get("properties", {}).get("title", "").startswith(title))


def test_dashboard_widgets(default_stack: Synthesized) -> None:
    body = dashboard_body(default_stack)
    titles = [w["properties"].get("title", "") for w in body["widgets"] if w["type"] != "text"]
    assert titles == [
        "Alarms",
        "Remediations by outcome",
        "Remediations by action",
        "Time to cordon (fault -> cordoned), seconds",
        "Time to replace (fault -> instance terminated), seconds",
        "Time to reboot (fault -> reboot issued), seconds",
        "Drains held up by PodDisruptionBudgets",
        "Breaker and budgets",
        "Events reaching ingest",
        "Executions",
        "Dead-letter queues (messages waiting)",
        "Kubernetes Events not written",
        "Exporter heartbeats (per 5 min; expect ~5)",
        "Exporter publish failures",
        "Exporter events dropped (queue overflow)",
        "Exporter queue depth",
    ]
    outcomes = widget_metrics(titled(body, "Remediations by outcome"))
    assert outcomes[0][:6] == ["NodeHeal", "Remediations", "outcome", "replaced", "service", "nodeheal"]
    assert len(outcomes) == len(Outcome)
    replace = widget_metrics(titled(body, "Time to replace"))
    assert [m[-1]["stat"] for m in replace] == ["p50", "p90", "p99"]
    assert all(
        m[:6] == ["NodeHeal", "TimeToInstanceAction", "action", "replace", "service", "nodeheal"]
        for m in replace
    )
    cordon = widget_metrics(titled(body, "Time to cordon"))
    assert all(m[:4] == ["NodeHeal", "TimeToCordon", "service", "nodeheal"] for m in cordon)
    assert widget_metrics(titled(body, "Drains held up"))[0][:2] == ["NodeHeal", "DrainsBlockedByPdb"]
    assert {m[1] for m in widget_metrics(titled(body, "Breaker and budgets"))} == {
        "BreakerOpened",
        "AdmissionsRefused",
    }
    heartbeats = widget_metrics(titled(body, "Exporter heartbeats"))
    assert heartbeats[0][:6] == [
        "NodeHeal",
        "ExporterHeartbeats",
        "cluster",
        "training-on-eks",
        "service",
        "nodeheal",
    ]
    assert {m[1] for m in widget_metrics(titled(body, "Kubernetes Events not written"))} == {
        "KubernetesEventsFailed",
        "KubernetesEventsSkipped",
    }
    assert len(titled(body, "Alarms")["properties"]["alarms"]) == 9


def test_dashboard_url_output(default_stack: Synthesized) -> None:
    assert "DashboardUrl" in default_stack.json["Outputs"]


def test_heartbeat_rule_routes_only_heartbeats_to_ingest(default_stack: Synthesized) -> None:
    rules = {rule.name: rule.pattern for rule in template_rules(default_stack.json)}

    def canonical(pattern: dict[str, Any]) -> str:
        return json.dumps(pattern, sort_keys=True)

    assert sorted(map(canonical, rules.values())) == sorted(
        map(
            canonical,
            [
                build_event_pattern(default_stack.config),
                build_heartbeat_pattern(default_stack.config),
                build_node_event_pattern(default_stack.config),
            ],
        )
    )
    heartbeat = build_heartbeat_pattern(default_stack.config)
    beat = {
        "source": "nodeheal.exporter.training-on-eks",
        "detail-type": DETAIL_TYPE_EXPORTER_HEARTBEAT,
        "detail": {"cluster": "training-on-eks"},
    }
    assert match(heartbeat, beat).matched
    assert not match(build_event_pattern(default_stack.config), beat).matched
    assert not match(build_node_event_pattern(default_stack.config), beat).matched
    ingest_rules = [
        r
        for r in default_stack.resources("AWS::Events::Rule").values()
        if "heartbeats" in r["Properties"].get("Description", "")
    ]
    (rule,) = ingest_rules
    (target,) = rule["Properties"]["Targets"]
    assert target["DeadLetterConfig"]
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60


def test_no_slack_by_default(default_stack: Synthesized) -> None:
    assert default_stack.resources("AWS::Chatbot::SlackChannelConfiguration") == {}


@pytest.fixture(scope="module")
def slack_stack(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    context = {
        **FULL_CONTEXT,
        "notifications": {"emails": [], "slack": {"workspaceId": "T0123ABCD", "channelId": "C0456EFGH"}},
    }
    return synthesize(tmp_path_factory.mktemp("slack"), context)


def test_slack_channel_through_chatbot(slack_stack: Synthesized) -> None:
    (channel,) = slack_stack.resources("AWS::Chatbot::SlackChannelConfiguration").values()
    properties = channel["Properties"]
    assert properties["SlackWorkspaceId"] == "T0123ABCD"
    assert properties["SlackChannelId"] == "C0456EFGH"
    assert properties["SnsTopicArns"] == [topic_ref(slack_stack)]
    assert properties["ConfigurationName"] == "NodeHealStaging-notifications"
    guardrails = json.dumps(properties["GuardrailPolicies"])
    assert "CloudWatchReadOnlyAccess" in guardrails and "AdministratorAccess" not in guardrails
    role = slack_stack.json["Resources"][properties["IamRoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert "ManagedPolicyArns" not in role and "Policies" not in role


def test_slack_stack_is_nag_clean(slack_stack: Synthesized) -> None:
    report_path = Path(slack_stack.assembly.directory) / "validation-report.json"
    if report_path.exists():
        report = json.loads(report_path.read_text())
        assert [v for plugin in report["pluginReports"] for v in plugin.get("violations", [])] == []
