"""``NodeHeal``: the whole of NodeHeal as one construct, for this repository's stack and for any CDK app.

The stack of this repository (``stacks/nodeheal_stack.py``) is this construct plus the stack outputs
operators look up. Another app places it in a stack of its own::

    from nodeheal.cdk import NodeHeal

    NodeHeal(stack, "NodeHeal", config={"clusters": ["training"]}, event_bus=existing_bus)

``config`` is what ``context.nodeheal`` of cdk.json holds, as the typed
:class:`~nodeheal.deploy_config.NodeHealConfig` or as the same dict (checked the same way).
``stackName`` of the config prefixes the names of the functions, the state machine, the dashboard
and the schema registry, so two NodeHeal constructs in one account and Region need different ones.

Existing resources may be passed in instead of created:

* ``event_bus``: the bus the exporters write to. NodeHeal adds its archive, rules and the
  per-exporter policy statements to it, but not the statement that denies every other producer
  (that one is only safe on a bus of NodeHeal's own).
* ``topic``: the notifications topic. The configured e-mails and Slack channel subscribe to it; its
  key policy (if encrypted) must let CloudWatch alarms and the functions' roles use the key.
* ``vpc`` (with ``vpc_subnets`` and ``security_groups``): where the Kubernetes-facing functions
  run, for clusters with a private API endpoint; overrides ``lambdaNetwork`` of the config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from nodeheal import stack_outputs
from nodeheal.cdk.constructs.access import AccessConstruct
from nodeheal.cdk.constructs.contracts import EventSchemasConstruct
from nodeheal.cdk.constructs.encryption import EncryptionConstruct
from nodeheal.cdk.constructs.exporter_access import ExporterAccess
from nodeheal.cdk.constructs.finalizer import FinalizerConstruct
from nodeheal.cdk.constructs.ingest import IngestConstruct
from nodeheal.cdk.constructs.lambda_function import FunctionNetwork, NodeHealFunction
from nodeheal.cdk.constructs.ledger import LedgerConstruct
from nodeheal.cdk.constructs.notifications import NotificationsConstruct
from nodeheal.cdk.constructs.observability import ObservabilityConstruct
from nodeheal.cdk.constructs.signal_counter import SignalCounterConstruct
from nodeheal.cdk.constructs.workflow import WorkflowConstruct
from nodeheal.cdk.lambda_asset import lambda_code
from nodeheal.deploy_config import CONTEXT_KEY, NodeHealConfig
from nodeheal.events import cluster_source


class NodeHeal(Construct):
    """Ingest, the remediation workflow, the counting of signals, the ledger, notifications, access
    and observability."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: NodeHealConfig | Mapping[str, Any],
        event_bus: events.IEventBus | None = None,
        topic: sns.ITopic | None = None,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] = (),
        lambda_wheelhouse: str | Path | None = None,
    ) -> None:
        """``lambda_wheelhouse``: where the Lambda asset's wheels are (see
        :mod:`nodeheal.cdk.lambda_asset`); by default ``NODEHEAL_WHEELHOUSE``, else the checkout's
        ``build/wheelhouse``, else a per-user cache filled on the first synth."""
        super().__init__(scope, id_)
        if (vpc_subnets is not None or security_groups) and vpc is None:
            raise ValueError("NodeHeal: vpc_subnets and security_groups need vpc")
        self.config = (
            config
            if isinstance(config, NodeHealConfig)
            else NodeHealConfig.from_cdk_context(dict(config), where=CONTEXT_KEY)
        )
        config = self.config
        Tags.of(self).add("app", "nodeheal")
        code = lambda_code(Path(lambda_wheelhouse) if lambda_wheelhouse is not None else None)
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
            topic=topic,
        )
        self.workflow = WorkflowConstruct(
            self,
            "Workflow",
            config=config,
            code=code,
            ledger_table_name=self.ledger.table.table_name,
            topic_arn=self.notifications.topic.topic_arn,
            log_key=log_key,
            network=(
                FunctionNetwork(vpc=vpc, subnets=vpc_subnets, security_groups=tuple(security_groups))
                if vpc is not None
                else None
            ),
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
            bus=event_bus,
        )
        self.signal_counter = SignalCounterConstruct(
            self,
            "SignalCounter",
            config=config,
            code=code,
            bus=self.ingest.bus,
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
            counter_function=self.signal_counter.function,
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
            exclusive_bus=self.ingest.bus_is_owned,
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
            dead_letter_queues=(*self.ingest.dead_letter_queues, *self.signal_counter.dead_letter_queues),
            topic=self.notifications.topic,
            clusters=config.clusters,
            heartbeat_missing_minutes=config.heartbeat_missing_minutes,
            dashboard_name=config.stack_name,
        )

    def add_stack_outputs(self) -> None:
        """Declare the outputs the operator commands look a deployment up by (``nodeheal doctor
        --stack``, ``history``, ``breaker``, ...; :mod:`nodeheal.stack_outputs` names them) on this
        construct's stack. One NodeHeal per stack can: the output names are fixed."""
        stack = Stack.of(self)
        CfnOutput(
            stack,
            stack_outputs.EVENT_BUS_NAME,
            value=self.ingest.bus.event_bus_name,
            description="Bus the exporter publishes to (exporter --event-bus)",
        )
        CfnOutput(
            stack,
            stack_outputs.EVENT_BUS_ARN,
            value=self.ingest.bus.event_bus_arn,
            description="Bus the exporters put events on (only their roles may)",
        )
        for cluster, role in self.exporter_access.roles.items():
            CfnOutput(
                stack,
                stack_outputs.exporter_role_output(cluster),
                value=role.role_arn,
                description=f"Role the exporter of {cluster} assumes through EKS Pod Identity "
                f"(events:PutEvents on the bus as {cluster_source(self.config.event_source, cluster)})",
            )
        CfnOutput(
            stack,
            stack_outputs.STATE_MACHINE_ARN,
            value=self.workflow.state_machine.state_machine_arn,
            description="Remediation workflow; each execution is one remediation",
        )
        CfnOutput(
            stack,
            stack_outputs.LEDGER_TABLE_NAME,
            value=self.ledger.table.table_name,
            description="Locks, remediation records, budgets and circuit breaker",
        )
        CfnOutput(
            stack,
            stack_outputs.SCHEMA_REGISTRY_NAME,
            value=self.event_schemas.registry.attr_registry_name,
            description="EventBridge schema registry with the event contract (code bindings for consumers)",
        )
        CfnOutput(
            stack,
            stack_outputs.NOTIFICATIONS_TOPIC_ARN,
            value=self.notifications.topic.topic_arn,
            description="Subscribe people or chat integrations here",
        )
        CfnOutput(
            stack,
            stack_outputs.DASHBOARD_URL,
            value=(
                f"https://{stack.region}.console.aws.amazon.com/cloudwatch/home?region={stack.region}"
                f"#dashboards:name={self.config.stack_name}"
            ),
            description="CloudWatch dashboard: remediations, timings, PDB-blocked drains, breaker, exporter",
        )
        for name, function in self.workflow.functions.items():
            if function.spec.kubernetes:
                CfnOutput(
                    stack,
                    stack_outputs.remediator_role_output(name),
                    value=function.role.role_arn,
                    description=f"IAM role of the {name} task, mapped to the Kubernetes group(s) "
                    f"{', '.join(self.config.kubernetes_groups(name))} by an EKS access entry",
                )

    @property
    def state_machine(self) -> sfn.StateMachine:
        """The remediation workflow; each execution is one remediation."""
        return self.workflow.state_machine

    @property
    def event_bus(self) -> events.IEventBus:
        """The bus the exporters put events on (the one passed in, or NodeHeal's own)."""
        return self.ingest.bus

    @property
    def topic(self) -> sns.ITopic:
        """Where people and chat integrations are notified (the one passed in, or NodeHeal's own)."""
        return self.notifications.topic

    @property
    def ledger_table(self) -> dynamodb.Table:
        """Locks, remediation records, budgets and the circuit breaker."""
        return self.ledger.table

    @property
    def functions(self) -> dict[str, lambda_.Function]:
        """Every NodeHeal Lambda function by task name: the workflow's, ``ingest``,
        ``count-signals`` and ``finalize``."""
        everything: list[NodeHealFunction] = [
            *self.workflow.functions.values(),
            self.ingest.function,
            self.signal_counter.function,
            self.finalizer.function,
        ]
        return {function.spec.name: function.function for function in everything}
