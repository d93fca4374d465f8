"""A deployed NodeHeal stack as the operator's tools read it: every call here only reads.

``nodeheal doctor`` checks a deployment through this adapter (and :mod:`nodeheal.aws.eks_access`):
CloudFormation for the stack and its outputs, Step Functions for the deployed settings, Lambda for
the live mode (D4), EventBridge for the rules and ``TestEventPattern``, CloudWatch for the exporter's
heartbeats and their alarm. The IAM actions it needs are listed in docs/operations.md ("Checking a
deployment: nodeheal doctor"); none of them writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nodeheal.actions import Mode
from nodeheal.aws.executions import deployed_settings
from nodeheal.config import RemediationSettings

#: CloudWatch's GetMetricStatistics answers at most this many datapoints per call.
MAX_DATAPOINTS = 1440


@dataclass(frozen=True, slots=True)
class StackView:
    name: str
    status: str
    outputs: Mapping[str, str]
    status_reason: str = ""


@dataclass(frozen=True, slots=True)
class DeployedRule:
    name: str
    pattern: Mapping[str, Any]
    state: str
    targets: int


@dataclass(frozen=True, slots=True)
class AlarmView:
    name: str
    namespace: str
    metric: str
    dimensions: Mapping[str, str]
    period_seconds: int
    evaluation_periods: int
    state: str
    actions: Sequence[str] = field(default_factory=tuple)

    @property
    def window_minutes(self) -> int:
        """How long the metric may stay below threshold before the alarm fires."""
        return self.period_seconds * self.evaluation_periods // 60


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, Mapping) else ""


class BotoDeployment:
    """Reads of one region's NodeHeal resources through a boto3 session."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._clients: dict[str, Any] = {}

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._session.client(service)
        return self._clients[service]

    def stack(self, name: str) -> StackView | None:
        try:
            stacks = self._client("cloudformation").describe_stacks(StackName=name)["Stacks"]
        except Exception as exc:
            # DescribeStacks answers a stack that does not exist with a ValidationError.
            if _code(exc) == "ValidationError":
                return None
            raise
        if not stacks:
            return None
        stack = stacks[0]
        return StackView(
            name=str(stack.get("StackName", name)),
            status=str(stack.get("StackStatus", "")),
            outputs={str(o["OutputKey"]): str(o.get("OutputValue", "")) for o in stack.get("Outputs", [])},
            status_reason=str(stack.get("StackStatusReason", "")),
        )

    def state_machine(self, arn: str) -> tuple[str, RemediationSettings]:
        """(status, the settings every execution gets) of the deployed state machine."""
        client = self._client("stepfunctions")
        status = str(client.describe_state_machine(stateMachineArn=arn).get("status", ""))
        return status, deployed_settings(client, arn)

    def function_mode(self, function_name: str) -> Mode | None:
        """The ``NODEHEAL_MODE`` a function runs with (what every mutating step reads, D4)."""
        configuration = self._client("lambda").get_function_configuration(FunctionName=function_name)
        value = (configuration.get("Environment") or {}).get("Variables", {}).get("NODEHEAL_MODE")
        return Mode(value) if value in {m.value for m in Mode} else None

    def rules(self, bus: str) -> list[DeployedRule]:
        events = self._client("events")
        rules = []
        for page in events.get_paginator("list_rules").paginate(EventBusName=bus):
            for rule in page.get("Rules", []):
                if not rule.get("EventPattern"):
                    continue  # scheduled rules
                targets = events.list_targets_by_rule(Rule=rule["Name"], EventBusName=bus).get("Targets", [])
                rules.append(
                    DeployedRule(
                        name=str(rule["Name"]),
                        pattern=json.loads(rule["EventPattern"]),
                        state=str(rule.get("State", "")),
                        targets=len(targets),
                    )
                )
        return rules

    def matches(self, pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
        """EventBridge's own verdict (``TestEventPattern``)."""
        answer = self._client("events").test_event_pattern(
            EventPattern=json.dumps(pattern), Event=json.dumps(event)
        )
        result = answer.get("Result")
        if not isinstance(result, bool):
            raise ValueError("TestEventPattern answered without a result")
        return result

    def alarms_notifying(self, topic_arn: str) -> list[AlarmView]:
        """The metric alarms that notify ``topic_arn``: the stack's own alarms."""
        alarms = []
        paginator = self._client("cloudwatch").get_paginator("describe_alarms")
        for page in paginator.paginate(AlarmTypes=["MetricAlarm"], ActionPrefix=topic_arn):
            for alarm in page.get("MetricAlarms", []):
                if topic_arn not in alarm.get("AlarmActions", []) or "MetricName" not in alarm:
                    continue
                alarms.append(
                    AlarmView(
                        name=str(alarm["AlarmName"]),
                        namespace=str(alarm.get("Namespace", "")),
                        metric=str(alarm["MetricName"]),
                        dimensions={str(d["Name"]): str(d["Value"]) for d in alarm.get("Dimensions", [])},
                        period_seconds=int(alarm.get("Period", 60)),
                        evaluation_periods=int(alarm.get("EvaluationPeriods", 1)),
                        state=str(alarm.get("StateValue", "")),
                        actions=tuple(alarm.get("AlarmActions", [])),
                    )
                )
        return alarms

    def last_datapoint(self, alarm: AlarmView, since: datetime, until: datetime) -> datetime | None:
        """The newest minute in which the alarm's metric had a sum above zero, or None."""
        period = max(60, alarm.period_seconds)
        span = (until - since).total_seconds()
        # Stay within one call's datapoint limit (the span and the one period added below): widen
        # the period for long spans.
        while (span + period) / period > MAX_DATAPOINTS:
            period *= 2
        answer = self._client("cloudwatch").get_metric_statistics(
            Namespace=alarm.namespace,
            MetricName=alarm.metric,
            Dimensions=[{"Name": k, "Value": v} for k, v in sorted(alarm.dimensions.items())],
            StartTime=since,
            # EndTime is exclusive: one period more, so a datapoint stamped in the current second
            # (or period) is not left out. Nothing is stamped in the future.
            EndTime=until + timedelta(seconds=period),
            Period=period,
            Statistics=["Sum"],
        )
        seen = [point["Timestamp"] for point in answer.get("Datapoints", []) if point.get("Sum", 0) > 0]
        return max(seen) if seen else None
