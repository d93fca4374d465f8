"""One NodeHeal Lambda: the function, its own role and its own log group.

Every function gets a dedicated role that starts empty (only its log group and X-Ray), so the
access construct can grant exactly what its :class:`TaskSpec` says and nothing leaks between tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from nodeheal.cdk.workflow_tasks import TaskSpec

#: Powertools reads these; one service name so every function's logs and metrics group together.
SERVICE_NAME = "nodeheal"
METRICS_NAMESPACE = "NodeHeal"
LOG_LEVEL = "INFO"

VPC_ACCESS_POLICY = "service-role/AWSLambdaVPCAccessExecutionRole"

#: Every log group has a fixed name (the one Lambda and Step Functions would pick), so a person finds
#: it without the stack. A retained group with a fixed name would make the next create of the stack
#: fail ("already exists") after a `cdk destroy`, and after a first deploy that rolled back, since
#: CloudFormation keeps Retain resources then too. So the stack deletes its log groups; the
#: remediation history that must outlive a teardown is the ledger table, which is retained and has a
#: generated name (docs/deploy.md, "Uninstall").
LOG_GROUP_REMOVAL_POLICY = RemovalPolicy.DESTROY


@dataclass(frozen=True, slots=True)
class FunctionNetwork:
    """Where VPC-attached functions run (private EKS API endpoints).

    ``subnets`` None: CDK's default selection (the VPC's private subnets); ``security_groups`` empty:
    Lambda gets a security group of its own per function, allowing all outbound traffic.
    """

    vpc: ec2.IVpc
    subnets: ec2.SubnetSelection | None = None
    security_groups: Sequence[ec2.ISecurityGroup] = ()


class NodeHealFunction(Construct):
    RUNTIME = lambda_.Runtime.PYTHON_3_12
    ARCHITECTURE = lambda_.Architecture.X86_64

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        spec: TaskSpec,
        code: lambda_.Code,
        function_name: str,
        environment: Mapping[str, str],
        log_retention_days: int,
        network: FunctionNetwork | None = None,
        log_key: kms.IKey | None = None,
        reserved_concurrency: int | None = None,
    ) -> None:
        """``log_key``: the customer managed key of the log group (security.kmsKeyArn), if any.
        ``reserved_concurrency``: the function's own share of the account's Lambda concurrency,
        which is also its ceiling; None leaves it in the account's unreserved pool."""
        super().__init__(scope, id_)
        self.spec = spec
        self.role = self._build_role(spec, network)
        self.log_group = self._build_log_group(function_name, log_retention_days, log_key)
        self.function = self._build_function(
            spec, code, function_name, environment, network, reserved_concurrency
        )
        self._acknowledge_findings()

    def _build_role(self, spec: TaskSpec, network: FunctionNetwork | None) -> iam.Role:
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"NodeHeal {spec.name}: {spec.description}"[:1000],
        )
        if network is not None:
            # Lambda validates this exact policy's ENI actions when it attaches the function to the
            # VPC; resource-scoped copies of it are rejected at deploy time.
            role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(VPC_ACCESS_POLICY))
            Validations.of(role).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{VPC_ACCESS_POLICY}]",
                    reason="Lambda needs the AWS-managed VPC access policy to manage its ENIs in the "
                    "configured subnets; it grants no access to data or to other instances.",
                )
            )
        return role

    def _build_log_group(
        self, function_name: str, retention_days: int, key: kms.IKey | None
    ) -> logs.LogGroup:
        log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/lambda/{function_name}",
            encryption_key=key,
            removal_policy=LOG_GROUP_REMOVAL_POLICY,
        )
        apply_retention(log_group, retention_days)
        log_group.grant_write(self.role)
        return log_group

    def _build_function(
        self,
        spec: TaskSpec,
        code: lambda_.Code,
        function_name: str,
        environment: Mapping[str, str],
        network: FunctionNetwork | None,
        reserved_concurrency: int | None,
    ) -> lambda_.Function:
        return lambda_.Function(
            self,
            "Function",
            function_name=function_name,
            description=spec.description[:256],
            runtime=self.RUNTIME,
            architecture=self.ARCHITECTURE,
            code=code,
            handler=spec.handler,
            timeout=Duration.seconds(spec.timeout_seconds),
            memory_size=spec.memory_mb,
            role=self.role,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "LOG_LEVEL": LOG_LEVEL,
                **environment,
            },
            vpc=network.vpc if network else None,
            vpc_subnets=network.subnets if network else None,
            security_groups=list(network.security_groups) if network and network.security_groups else None,
            reserved_concurrent_executions=reserved_concurrency,
        )

    def _acknowledge_findings(self) -> None:
        Validations.of(self.function).acknowledge(
            Acknowledgment(
                id="AwsSolutions-L1",
                reason="Pinned to python3.12: the wheelhouse (lambdas/requirements.txt) is built for cp312 "
                "manylinux2014 and the handlers are tested on it; moving runtimes is a deliberate upgrade.",
            )
        )
        # Lambda adds xray:PutTraceSegments/PutTelemetryRecords on '*' for active tracing; X-Ray
        # has no resource-level permissions. Other '*' grants are acknowledged where they are made.
        Validations.of(self.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="X-Ray PutTraceSegments/PutTelemetryRecords (active tracing) and, for tasks that "
                "resolve instances, ec2:DescribeInstances support no resource-level permissions.",
            )
        )


#: The values CloudWatch Logs accepts for RetentionInDays.
CLOUDWATCH_RETENTION_DAYS: tuple[int, ...] = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
)  # fmt: skip


def apply_retention(log_group: logs.LogGroup, days: int) -> None:
    """Keep ``log_group`` at least ``days`` (config takes any day count, CloudWatch a fixed set)."""
    cast(logs.CfnLogGroup, log_group.node.default_child).retention_in_days = retention_in_days(days)


def retention_in_days(days: int) -> int:
    """The shortest retention CloudWatch accepts that keeps logs at least ``days``."""
    return next((allowed for allowed in CLOUDWATCH_RETENTION_DAYS if allowed >= days), 3653)
