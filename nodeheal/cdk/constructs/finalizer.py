"""The finalizer and its sweeper (docs/architecture.md, D6): no execution ends unrecorded.

A workflow timeout, an abort or a data limit ends an execution where no Catch sees it, so
``Record failure`` never runs. Step Functions reports those ends as "Step Functions Execution Status
Change" events on the account's **default** bus (it sends them nowhere else); a rule there invokes
the finalizer. The events are best-effort, so a schedule also runs the function as a sweeper that
lists the executions that ended FAILED, TIMED_OUT or ABORTED. Both paths are idempotent with the
workflow's own record steps.
"""

from __future__ import annotations

from typing import cast

from aws_cdk import Acknowledgment, ArnFormat, CfnElement, Duration, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from nodeheal.cdk.constructs.lambda_function import NodeHealFunction
from nodeheal.cdk.workflow_tasks import FINALIZER_TASK
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.workflow.finalizer import UNCAUGHT_END_STATUSES

#: How often the sweeper runs: the longest an end can go unrecorded when its event was lost.
SWEEP_INTERVAL = Duration.minutes(5)
#: How far back each sweep looks; overlapping sweeps are harmless (the finalizer is idempotent),
#: and a day covers a sweeper that failed for hours.
SWEEP_LOOK_BACK = Duration.days(1)
STATUS_CHANGE = "Step Functions Execution Status Change"


class FinalizerConstruct(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: NodeHealConfig,
        code: lambda_.Code,
        state_machine: sfn.StateMachine,
        ledger_table: dynamodb.Table,
        topic: sns.ITopic,
        log_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._stack = Stack.of(self)
        self.function = self._build_function(code, state_machine, ledger_table, topic, log_key)
        self._grant(state_machine)
        self.status_change_rule = self._build_status_change_rule(state_machine)
        self.sweep_rule = self._build_sweep_rule()

    def _build_function(
        self,
        code: lambda_.Code,
        state_machine: sfn.StateMachine,
        ledger_table: dynamodb.Table,
        topic: sns.ITopic,
        log_key: kms.IKey | None,
    ) -> NodeHealFunction:
        config = self._config
        return NodeHealFunction(
            self,
            "Finalize",
            spec=FINALIZER_TASK,
            code=code,
            function_name=f"{config.stack_name}-{FINALIZER_TASK.name}",
            environment={
                "NODEHEAL_STATE_MACHINE_ARN": state_machine.state_machine_arn,
                "NODEHEAL_LEDGER_TABLE": ledger_table.table_name,
                "NODEHEAL_TOPIC_ARN": topic.topic_arn,
                "NODEHEAL_SWEEP_LOOK_BACK_SECONDS": str(int(SWEEP_LOOK_BACK.to_seconds())),
                "NODEHEAL_LONGEST_EXECUTION_SECONDS": str(config.workflow_timeout_minutes * 60),
            },
            log_retention_days=config.log_retention_days,
            log_key=log_key,
        )

    def _grant(self, state_machine: sfn.StateMachine) -> None:
        role = self.function.role
        executions = self._stack.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{state_machine.state_machine_name}:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["states:DescribeExecution", "states:GetExecutionHistory"],
                resources=[executions],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["states:ListExecutions"], resources=[state_machine.state_machine_arn]
            )
        )
        # The ledger and the topic are granted by the access construct, from FINALIZER_TASK.
        machine_id = self._stack.get_logical_id(cast(CfnElement, state_machine.node.default_child))
        for finding, reason in (
            (
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
                f"execution:<{machine_id}.Name>:*]",
                "Reads back executions of the remediation state machine only (any execution name).",
            ),
        ):
            Validations.of(role).acknowledge(Acknowledgment(id=finding, reason=reason))

    def _build_status_change_rule(self, state_machine: sfn.StateMachine) -> events.Rule:
        return events.Rule(
            self,
            "ExecutionEnded",
            description="Remediations that ended FAILED, TIMED_OUT or ABORTED -> finalizer",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=[STATUS_CHANGE],
                detail={
                    "status": list(UNCAUGHT_END_STATUSES),
                    "stateMachineArn": [state_machine.state_machine_arn],
                },
            ),
            targets=[targets.LambdaFunction(self.function.function, retry_attempts=8)],
        )

    def _build_sweep_rule(self) -> events.Rule:
        return events.Rule(
            self,
            "Sweep",
            description="Find remediations whose end event was lost, and record them",
            schedule=events.Schedule.rate(SWEEP_INTERVAL),
            targets=[targets.LambdaFunction(self.function.function, retry_attempts=2)],
        )
