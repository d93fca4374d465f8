"""The remediation workflow: one Lambda per task of WORKFLOW_TASKS and the Standard state machine.

The graph itself is :func:`nodeheal.cdk.workflow_definition.build_definition`; this construct provides
the functions it invokes and the machine's operational settings (logs, tracing, timeout).
"""

from __future__ import annotations

from typing import cast

from aws_cdk import Acknowledgment, Annotations, CfnElement, Duration, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from nodeheal.cdk.constructs.lambda_function import (
    LOG_GROUP_REMOVAL_POLICY,
    FunctionNetwork,
    NodeHealFunction,
    apply_retention,
)
from nodeheal.cdk.workflow_definition import build_definition
from nodeheal.cdk.workflow_tasks import WORKFLOW_TASKS, TaskSpec
from nodeheal.deploy_config import LambdaNetwork, NodeHealConfig


class WorkflowConstruct(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: NodeHealConfig,
        code: lambda_.Code,
        ledger_table_name: str,
        topic_arn: str,
        log_key: kms.IKey | None = None,
        network: FunctionNetwork | None = None,
    ) -> None:
        """``network`` places the Kubernetes-facing functions in a VPC given as constructs; without
        it, ``lambdaNetwork`` of the config (IDs) does, and without either they run outside a VPC."""
        super().__init__(scope, id_)
        self._config = config
        self._log_key = log_key
        self.state_machine_name = config.state_machine_name
        self.network = network or self._build_network(config.lambda_network)
        self.functions = self._build_functions(code, ledger_table_name, topic_arn)
        self.log_group = self._build_log_group()
        self.state_machine = self._build_state_machine()

    def _build_network(self, network: LambdaNetwork | None) -> FunctionNetwork | None:
        if network is None:
            return None
        # Imported by attributes, never looked up: synthesis stays offline and deterministic.
        vpc = ec2.Vpc.from_vpc_attributes(
            self, "Vpc", vpc_id=network.vpc_id, availability_zones=list(network.availability_zones)
        )
        subnets = [
            ec2.Subnet.from_subnet_id(self, f"Subnet{index}", subnet_id)
            for index, subnet_id in enumerate(network.subnet_ids)
        ]
        for subnet in subnets:
            Annotations.of(subnet).acknowledge_warning(
                "@aws-cdk/aws-ec2:noSubnetRouteTableId",
                "Lambda placement needs only the subnet ID; nothing in the stack routes through it.",
            )
        security_groups = [
            ec2.SecurityGroup.from_security_group_id(self, f"SecurityGroup{index}", group_id, mutable=False)
            for index, group_id in enumerate(network.security_group_ids)
        ]
        return FunctionNetwork(
            vpc=vpc, subnets=ec2.SubnetSelection(subnets=subnets), security_groups=security_groups
        )

    def _build_functions(
        self, code: lambda_.Code, ledger_table_name: str, topic_arn: str
    ) -> dict[str, NodeHealFunction]:
        functions = Construct(self, "Functions")
        return {
            spec.name: NodeHealFunction(
                functions,
                spec.name,
                spec=spec,
                code=code,
                function_name=f"{self._config.stack_name}-{spec.name}",
                environment=_task_environment(
                    spec, ledger_table_name, topic_arn, self._config.remediation.mode.value
                ),
                log_retention_days=self._config.log_retention_days,
                # Only the tasks that call the (possibly private) EKS API endpoint need the VPC;
                # the others reach DynamoDB and SNS without VPC endpoints or NAT.
                network=self.network if spec.kubernetes else None,
                log_key=self._log_key,
            )
            for spec in WORKFLOW_TASKS
        }

    def _build_log_group(self) -> logs.LogGroup:
        # The /aws/vendedlogs/ prefix keeps Step Functions' log delivery within the CloudWatch Logs
        # resource-policy size limit however many state machines the account has.
        log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/vendedlogs/states/{self.state_machine_name}",
            encryption_key=self._log_key,
            removal_policy=LOG_GROUP_REMOVAL_POLICY,
        )
        apply_retention(log_group, self._config.log_retention_days)
        return log_group

    def _build_state_machine(self) -> sfn.StateMachine:
        definition = build_definition(
            Construct(self, "Definition"),
            functions={name: function.function for name, function in self.functions.items()},
            settings=self._config.remediation,
        )
        state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=self.state_machine_name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            timeout=Duration.minutes(self._config.workflow_timeout_minutes),
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True
            ),
        )
        Validations.of(state_machine).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="Step Functions log delivery (logs:*LogDelivery, DescribeLogGroups, resource "
                "policies) and X-Ray tracing actions support no resource-level permissions.",
            )
        )
        for function in self.functions.values():
            Validations.of(state_machine).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::<{_logical_id(function.function)}.Arn>:*]",
                    reason="LambdaInvoke may call the task function and its versions/aliases (ARN:*), "
                    "nothing else.",
                )
            )
        return state_machine


def _task_environment(spec: TaskSpec, ledger_table_name: str, topic_arn: str, mode: str) -> dict[str, str]:
    # Every step reads the mode from here, live (docs/architecture.md, D4): a redeploy in dry-run changes this
    # variable and stops executions already in flight before their next mutation.
    environment: dict[str, str] = {"NODEHEAL_MODE": mode}
    if spec.ledger:
        environment["NODEHEAL_LEDGER_TABLE"] = ledger_table_name
    if spec.publishes_notifications:
        environment["NODEHEAL_TOPIC_ARN"] = topic_arn
    return environment


def _logical_id(function: lambda_.Function) -> str:
    return function.stack.get_logical_id(cast(CfnElement, function.node.default_child))
