"""The NodeHeal stack: wires one construct per capability and exports what operators look up."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from constructs import Construct

from nodeheal import stack_outputs
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.events import cluster_source
from stacks.constructs.access import AccessConstruct
from stacks.constructs.contracts import EventSchemasConstruct
from stacks.constructs.encryption import EncryptionConstruct
from stacks.constructs.exporter_access import ExporterAccess
from stacks.constructs.finalizer import FinalizerConstruct
from stacks.constructs.ingest import IngestConstruct
from stacks.constructs.ledger import LedgerConstruct
from stacks.constructs.notifications import NotificationsConstruct
from stacks.constructs.observability import ObservabilityConstruct
from stacks.constructs.workflow import WorkflowConstruct
from stacks.lambda_asset import lambda_code


class NodeHealStack(Stack):
    def __init__(self, scope: Construct, id_: str, *, config: NodeHealConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            id_,
            description="NodeHeal: event-driven remediation of unhealthy GPU nodes on Amazon EKS",
            **kwargs,
        )
        self.config = config
        Tags.of(self).add("app", "nodeheal")
        code = lambda_code()
        self.encryption = EncryptionConstruct(self, "Encryption", customer_key=config.customer_key)
        log_key = self.encryption.customer_key
        self.ledger = LedgerConstruct(self, "Ledger", encryption_key=self.encryption.customer_key)
        self.notifications = NotificationsConstruct(
            self,
            "Notifications",
            emails=config.notification_emails,
            key=self.encryption.messages_key,
            slack=config.slack,
            name_prefix=config.stack_name,
        )
        self.workflow = WorkflowConstruct(
            self,
            "Workflow",
            config=config,
            code=code,
            ledger_table_name=self.ledger.table.table_name,
            topic_arn=self.notifications.topic.topic_arn,
            log_key=log_key,
        )
        self.ingest = IngestConstruct(
            self,
            "Ingest",
            config=config,
            code=code,
            ledger_table_name=self.ledger.table.table_name,
            state_machine=self.workflow.state_machine,
            queue_key=self.encryption.messages_key,
            log_key=log_key,
        )
        self.finalizer = FinalizerConstruct(
            self,
            "Finalizer",
            config=config,
            code=code,
            state_machine=self.workflow.state_machine,
            ledger_table=self.ledger.table,
            topic=self.notifications.topic,
            log_key=log_key,
        )
        self.access = AccessConstruct(
            self,
            "Access",
            config=config,
            workflow_functions=list(self.workflow.functions.values()),
            ingest_function=self.ingest.function,
            finalizer_function=self.finalizer.function,
            ledger_table=self.ledger.table,
            topic=self.notifications.topic,
            state_machine=self.workflow.state_machine,
            ledger_key=self.encryption.customer_key,
        )
        self.exporter_access = ExporterAccess(
            self,
            "ExporterAccess",
            bus=self.ingest.bus,
            clusters=config.clusters,
            source_prefix=config.event_source,
            namespace=config.exporter_namespace,
            service_account=config.exporter_service_account,
        )
        self.event_schemas = EventSchemasConstruct(
            self,
            "EventSchemas",
            registry_name=f"{config.stack_name}-events",
            source_prefix=config.event_source,
        )
        self.observability = ObservabilityConstruct(
            self,
            "Observability",
            state_machine=self.workflow.state_machine,
            dead_letter_queues=self.ingest.dead_letter_queues,
            topic=self.notifications.topic,
            clusters=config.clusters,
            heartbeat_missing_minutes=config.heartbeat_missing_minutes,
            dashboard_name=config.stack_name,
        )
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
