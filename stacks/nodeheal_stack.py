"""The NodeHeal stack of this repository's app: the :class:`~nodeheal.cdk.NodeHeal` construct and the
outputs operators look up."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from nodeheal import stack_outputs
from nodeheal.cdk import NodeHeal
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.events import cluster_source

#: The construct's id: CDK leaves "Default" out of logical IDs, so every resource keeps the logical ID
#: it had when the stack built the capabilities itself (a changed ID would replace the resource).
NODEHEAL_CONSTRUCT_ID = "Default"


class NodeHealStack(Stack):
    def __init__(self, scope: Construct, id_: str, *, config: NodeHealConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            id_,
            description="NodeHeal: event-driven remediation of unhealthy GPU nodes on Amazon EKS",
            **kwargs,
        )
        self.config = config
        self.nodeheal = NodeHeal(self, NODEHEAL_CONSTRUCT_ID, config=config)
        # The capabilities under their old names: tests and tools address them through the stack.
        self.encryption = self.nodeheal.encryption
        self.ledger = self.nodeheal.ledger
        self.notifications = self.nodeheal.notifications
        self.workflow = self.nodeheal.workflow
        self.ingest = self.nodeheal.ingest
        self.finalizer = self.nodeheal.finalizer
        self.access = self.nodeheal.access
        self.exporter_access = self.nodeheal.exporter_access
        self.event_schemas = self.nodeheal.event_schemas
        self.observability = self.nodeheal.observability
        self._build_outputs()

    def _build_outputs(self) -> None:
        CfnOutput(
            self,
            stack_outputs.EVENT_BUS_NAME,
            value=self.ingest.bus.event_bus_name,
            description="Bus the exporter publishes to (exporter --event-bus)",
        )
        CfnOutput(
            self,
            stack_outputs.EVENT_BUS_ARN,
            value=self.ingest.bus.event_bus_arn,
            description="Bus the exporters put events on (only their roles may)",
        )
        for cluster, role in self.exporter_access.roles.items():
            CfnOutput(
                self,
                stack_outputs.exporter_role_output(cluster),
                value=role.role_arn,
                description=f"Role the exporter of {cluster} assumes through EKS Pod Identity "
                f"(events:PutEvents on the bus as {cluster_source(self.config.event_source, cluster)})",
            )
        CfnOutput(
            self,
            stack_outputs.STATE_MACHINE_ARN,
            value=self.workflow.state_machine.state_machine_arn,
            description="Remediation workflow; each execution is one remediation",
        )
        CfnOutput(
            self,
            stack_outputs.LEDGER_TABLE_NAME,
            value=self.ledger.table.table_name,
            description="Locks, remediation records, budgets and circuit breaker",
        )
        CfnOutput(
            self,
            stack_outputs.SCHEMA_REGISTRY_NAME,
            value=self.event_schemas.registry.attr_registry_name,
            description="EventBridge schema registry with the event contract (code bindings for consumers)",
        )
        CfnOutput(
            self,
            stack_outputs.NOTIFICATIONS_TOPIC_ARN,
            value=self.notifications.topic.topic_arn,
            description="Subscribe people or chat integrations here",
        )
        CfnOutput(
            self,
            stack_outputs.DASHBOARD_URL,
            value=(
                f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
                f"#dashboards:name={self.config.stack_name}"
            ),
            description="CloudWatch dashboard: remediations, timings, PDB-blocked drains, breaker, exporter",
        )
        for name, function in self.workflow.functions.items():
            if function.spec.kubernetes:
                CfnOutput(
                    self,
                    stack_outputs.remediator_role_output(name),
                    value=function.role.role_arn,
                    description=f"IAM role of the {name} task, mapped to the Kubernetes group(s) "
                    f"{', '.join(self.config.kubernetes_groups(name))} by an EKS access entry",
                )
