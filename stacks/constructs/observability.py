"""Alarms that page a person through the notifications topic.

Every alarm fires on the first occurrence: a failed or stuck remediation leaves a node cordoned
(capacity lost) and a dead letter is an event that never became a remediation. Missing data is
not breaching: no executions and empty queues are the healthy steady state.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

#: Evaluation period of every alarm; Step Functions and SQS publish these metrics every minute.
PERIOD = Duration.minutes(5)


class ObservabilityConstruct(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        state_machine: sfn.StateMachine,
        dead_letter_queues: Sequence[sqs.IQueue],
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, id_)
        self._action = cloudwatch_actions.SnsAction(topic)
        self.alarms: list[cloudwatch.Alarm] = []
        self._build_execution_alarms(state_machine)
        self._build_dead_letter_alarms(dead_letter_queues)

    def _build_execution_alarms(self, state_machine: sfn.StateMachine) -> None:
        outcomes = (
            ("ExecutionsFailed", state_machine.metric_failed, "ended in Record failure or failed outright"),
            ("ExecutionsTimedOut", state_machine.metric_timed_out, "hit the workflow timeout"),
            ("ExecutionsAborted", state_machine.metric_aborted, "were stopped by hand or by a redeploy"),
        )
        for name, metric, meaning in outcomes:
            self._alarm(
                name,
                metric(period=PERIOD, statistic=cloudwatch.Stats.SUM),
                f"NodeHeal remediations {meaning}; the node may be left cordoned. "
                "See the execution history and the ledger record.",
            )

    def _build_dead_letter_alarms(self, queues: Sequence[sqs.IQueue]) -> None:
        for queue in queues:
            self._alarm(
                f"{queue.node.id}Depth",
                queue.metric_approximate_number_of_messages_visible(
                    period=PERIOD, statistic=cloudwatch.Stats.MAXIMUM
                ),
                f"Node condition events are waiting in the dead-letter queue {queue.node.id}: they never "
                "started a remediation. Inspect them, fix the cause, then redrive or delete.",
            )

    def _alarm(self, id_: str, metric: cloudwatch.Metric, description: str) -> None:
        alarm = cloudwatch.Alarm(
            self,
            id_,
            metric=metric,
            alarm_description=description,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(self._action)
        self.alarms.append(alarm)
