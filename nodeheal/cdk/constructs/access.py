"""Least privilege, per function: every grant derives from the function's TaskSpec.

* Kubernetes tasks: ``eks:DescribeCluster`` on the configured clusters only, and an EKS access
  entry per (role, cluster) putting the role in its own group ``<prefix>-<function>`` (plus
  ``<prefix>-terminate-delete-nodes`` for terminate when ``deleteNodeAfterTerminate`` is on, and
  ``<prefix>-terminate-nodeclaims`` when ``replace.method`` is ``delete-nodeclaim``), which
  ``deploy/rbac/remediator.yaml`` binds to the function's ClusterRole (rules: ``nodeheal.rbac``).
* EC2 mutations (reboot, terminate): only on instances carrying a configured cluster's ownership
  tag. The IAM condition repeats safety invariant 2, so a bug in the ownership check cannot reach
  another cluster's or a non-Kubernetes instance.
* Ledger: only the item actions the spec lists, each limited to the partition key prefixes of the
  items the task touches (``dynamodb:LeadingKeys``); no Scan, no index, no batch or table actions.
  With ``security.kmsKeyArn`` the same functions may use that key, and only through DynamoDB
  (``kms:ViaService``), to read and write the encrypted table.
* SNS publish: only where the spec says so. StartExecution: ingest and the counting function only.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, ArnFormat, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from nodeheal.cdk.constructs.lambda_function import NodeHealFunction
from nodeheal.cdk.workflow_tasks import TaskSpec
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.steps import TERMINATE

#: What a function needs on the ledger's customer managed key, through DynamoDB only.
LEDGER_KEY_ACTIONS = ("kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey")


def ownership_conditions(cluster: str) -> tuple[dict[str, dict[str, str]], ...]:
    """Tag conditions proving an instance belongs to ``cluster``; any one suffices (OR).

    ``kubernetes.io/cluster/<name>=owned`` is set by Karpenter and the EKS node groups;
    ``eks:cluster-name`` by managed node groups; ``eks:eks-cluster-name`` by EKS Auto Mode.
    """
    return (
        {"StringEquals": {f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"}},
        {"StringEquals": {"aws:ResourceTag/eks:cluster-name": cluster}},
        {"StringEquals": {"aws:ResourceTag/eks:eks-cluster-name": cluster}},
    )


class AccessConstruct(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: NodeHealConfig,
        workflow_functions: Sequence[NodeHealFunction],
        ingest_function: NodeHealFunction,
        counter_function: NodeHealFunction,
        finalizer_function: NodeHealFunction,
        ledger_table: dynamodb.Table,
        topic: sns.ITopic,
        state_machine: sfn.IStateMachine,
        ledger_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._stack = Stack.of(self)
        everyone = (*workflow_functions, ingest_function, counter_function, finalizer_function)
        self.access_entries = self._build_cluster_access(workflow_functions)
        self._grant_instance_actions(workflow_functions)
        self._grant_ledger(everyone, ledger_table)
        if ledger_key is not None:
            self._grant_ledger_key(everyone, ledger_key)
        self._grant_notifications(everyone, topic)
        # Ingest and the counting function (a crossed window, D22) start remediations; nothing else.
        for starter in (ingest_function, counter_function):
            self._grant_start_execution(starter, state_machine)

    def cluster_arn(self, cluster: str) -> str:
        return self._stack.format_arn(service="eks", resource="cluster", resource_name=cluster)

    def _build_cluster_access(self, functions: Sequence[NodeHealFunction]) -> list[eks.CfnAccessEntry]:
        entries: list[eks.CfnAccessEntry] = []
        cluster_arns = [self.cluster_arn(cluster) for cluster in self._config.clusters]
        for function in functions:
            if not function.spec.kubernetes:
                continue
            # Endpoint and CA for the kubeconfig; the bearer token is a presigned STS call (no IAM).
            function.role.add_to_principal_policy(
                iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=cluster_arns)
            )
            for cluster in self._config.clusters:
                entries.append(
                    eks.CfnAccessEntry(
                        self,
                        f"{function.spec.name}-{cluster}",
                        cluster_name=cluster,
                        principal_arn=function.role.role_arn,
                        type="STANDARD",
                        kubernetes_groups=self._config.kubernetes_groups(function.spec.name),
                    )
                )
        return entries

    def _grant_instance_actions(self, functions: Sequence[NodeHealFunction]) -> None:
        instances = self._stack.format_arn(
            service="ec2",
            resource="instance",
            resource_name="*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        for function in functions:
            spec = function.spec
            reads = (*(("ec2:DescribeInstances",) if spec.ec2_describe else ()), *spec.ec2_reads)
            if reads:
                # Describe actions support no resource-level restriction (resource "*").
                function.role.add_to_principal_policy(
                    iam.PolicyStatement(actions=list(reads), resources=["*"])
                )
            if spec.ec2_untagged_instance_actions:
                # ReportInstanceStatus: the Service Authorization Reference lists the instance
                # resource for it but no tag condition key (only ec2:InstanceID, ec2:Region,
                # ec2:AvailabilityZoneId), so an ownership-tag condition could refuse every report.
                # It changes nothing on the instance; it is limited to this account's instances in
                # the stack's region.
                untagged = list(spec.ec2_untagged_instance_actions)
                function.role.add_to_principal_policy(
                    iam.PolicyStatement(actions=untagged, resources=[instances])
                )
                Validations.of(function.role).acknowledge(
                    Acknowledgment(
                        id=f"AwsSolutions-IAM5[Resource::{_finding_text(self._stack, instances)}]",
                        reason=f"{', '.join(spec.ec2_untagged_instance_actions)} supports no tag condition; "
                        "it is limited to this account's instances in the stack's region and changes none.",
                    )
                )
            mutations = self._instance_mutations(spec)
            if not mutations:
                continue
            # One statement per tag condition: IAM ORs statements, while conditions inside one
            # statement are ANDed.
            for cluster in self._config.clusters:
                for condition in ownership_conditions(cluster):
                    function.role.add_to_principal_policy(
                        iam.PolicyStatement(
                            actions=list(mutations), resources=[instances], conditions=condition
                        )
                    )
            Validations.of(function.role).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::{_finding_text(self._stack, instances)}]",
                    reason=f"{', '.join(mutations)} is limited to instances tagged as "
                    "owned by a configured cluster (aws:ResourceTag condition); instance IDs are unknown "
                    "at deploy time.",
                )
            )

    def _instance_mutations(self, spec: TaskSpec) -> tuple[str, ...]:
        """The EC2 actions a function may take on an instance. With ``replace.method``
        ``delete-nodeclaim`` terminate deletes the NodeClaim and Karpenter terminates the instance:
        the role keeps DescribeInstances (the ownership check) and loses TerminateInstances. An
        execution that started before a redeploy switched the method to delete-nodeclaim still
        carries ec2-terminate: its terminate step fails with AccessDenied, like any failed step."""
        if spec.name == TERMINATE.name and self._config.remediation.replace.deletes_nodeclaim:
            return ()
        return spec.ec2_mutations

    def _grant_ledger(self, functions: Sequence[NodeHealFunction], table: dynamodb.Table) -> None:
        clusters = self._config.clusters
        for function in functions:
            for grant in function.spec.ledger:
                leading_keys = [key for item in grant.items for key in item.leading_keys(clusters)]
                function.role.add_to_principal_policy(
                    iam.PolicyStatement(
                        actions=list(grant.actions),
                        resources=[table.table_arn],
                        # ForAllValues: every partition key the request touches must match. Item
                        # actions (GetItem, PutItem, DeleteItem, Query) always name one.
                        conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": leading_keys}},
                    )
                )

    def _grant_ledger_key(self, functions: Sequence[NodeHealFunction], key: kms.IKey) -> None:
        # DynamoDB calls KMS with the caller's permissions: reads need Decrypt, writes Encrypt and
        # GenerateDataKey. kms:ViaService keeps the grant from being used outside DynamoDB.
        for function in functions:
            if not function.spec.ledger:
                continue
            function.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=list(LEDGER_KEY_ACTIONS),
                    resources=[key.key_arn],
                    conditions={
                        "StringEquals": {"kms:ViaService": f"dynamodb.{self._stack.region}.amazonaws.com"}
                    },
                )
            )

    @staticmethod
    def _grant_notifications(functions: Sequence[NodeHealFunction], topic: sns.ITopic) -> None:
        for function in functions:
            if not function.spec.publishes_notifications:
                continue
            # Also grants kms:Decrypt and kms:GenerateDataKey* on the topic's key (and only that key).
            topic.grant_publish(function.role)
            Validations.of(function.role).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                    reason="Publishing to the encrypted topic needs GenerateDataKey* (plain and "
                    "WithoutPlaintext variants) on the topic's own key, which is the only resource.",
                )
            )

    @staticmethod
    def _grant_start_execution(function: NodeHealFunction, state_machine: sfn.IStateMachine) -> None:
        state_machine.grant_start_execution(function.role)


def _finding_text(stack: Stack, value: str) -> str:
    """``value`` as cdk-nag spells it in a finding ID: ``{"Ref": "AWS::Region"}`` -> ``<AWS::Region>``."""
    resolved = stack.resolve(value)
    if isinstance(resolved, str):
        return resolved
    parts = resolved["Fn::Join"][1]
    return "".join(part if isinstance(part, str) else f"<{part['Ref']}>" for part in parts)
