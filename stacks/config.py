"""The deployment's typed configuration, built once from the ``nodeheal`` object in ``cdk.json``.

Fails fast, naming the offending key, before any construct is created. The remediation part
(mode, policy, budgets, drain, reboot) is :class:`nodeheal.config.RemediationSettings`, shared with
the Lambdas; this module adds what only the deployment needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from nodeheal.config import (
    DEFAULT_SCOPE_CONDITIONS,
    RemediationSettings,
    ScopeCondition,
    ScopeSettings,
)
from nodeheal.errors import ConfigurationError
from nodeheal.events import DEFAULT_SOURCE
from nodeheal.settings_reader import SettingsReader

CONTEXT_KEY = "nodeheal"

_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")  # EKS CreateCluster constraint
_BUS_NAME = re.compile(r"^[/\.\-_A-Za-z0-9]{1,256}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
#: AWS Chatbot's constraints on SlackTeamId and SlackChannelId.
_SLACK_WORKSPACE = re.compile(r"^[0-9A-Z]{1,255}$")
_SLACK_CHANNEL = re.compile(r"^[A-Za-z0-9]+$")

#: The rule's knobs are the workflow's scope: one type, parsed once, so the EventBridge pattern and
#: admit's live check (``nodeheal.workflow.scope``) read the same conditions and labels.
DEFAULT_RULE_CONDITIONS = DEFAULT_SCOPE_CONDITIONS
RuleCondition = ScopeCondition
RuleSettings = ScopeSettings


@dataclass(frozen=True, slots=True)
class LambdaNetwork:
    """Optional VPC placement of the Lambdas (for clusters with a private API endpoint only)."""

    vpc_id: str
    availability_zones: tuple[str, ...]
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]

    @classmethod
    def read(cls, reader: SettingsReader) -> LambdaNetwork:
        network = cls(
            vpc_id=reader.string("vpcId"),
            availability_zones=reader.string_list("availabilityZones", non_empty=True),
            subnet_ids=reader.string_list("subnetIds", non_empty=True),
            security_group_ids=reader.string_list("securityGroupIds", non_empty=True),
        )
        reader.finish()
        return network


@dataclass(frozen=True, slots=True)
class SlackChannel:
    """A Slack channel for AWS Chatbot; the workspace must already be authorized in the Chatbot console."""

    workspace_id: str
    channel_id: str

    @classmethod
    def read(cls, reader: SettingsReader) -> SlackChannel:
        channel = cls(workspace_id=reader.string("workspaceId"), channel_id=reader.string("channelId"))
        reader.finish()
        if not _SLACK_WORKSPACE.match(channel.workspace_id):
            raise ConfigurationError(
                f"{reader.where('workspaceId')} must be a Slack workspace id like T0123ABCD, "
                f"got {channel.workspace_id!r}"
            )
        if not _SLACK_CHANNEL.match(channel.channel_id):
            raise ConfigurationError(
                f"{reader.where('channelId')} must be a Slack channel id like C0123ABCD, "
                f"got {channel.channel_id!r}"
            )
        return channel


@dataclass(frozen=True, slots=True)
class NodeHealConfig:
    stack_name: str
    clusters: tuple[str, ...]
    event_bus_name: str
    event_source: str
    archive_retention_days: int
    rule: RuleSettings
    #: Events whose observedAt is older than this are dropped by ingest (and counted): acting on a
    #: replayed hour-old event would be acting on history, not on the node.
    stale_event_seconds: int
    remediation: RemediationSettings
    notification_emails: tuple[str, ...]
    #: Optional Slack channel the notifications topic is mirrored to through AWS Chatbot.
    slack: SlackChannel | None
    #: The exporter of a cluster has sent no heartbeat for this long -> alarm. The exporter sends
    #: one a minute by default, so the default tolerates a rolling restart and a slow leader handover.
    heartbeat_missing_minutes: int
    lambda_network: LambdaNetwork | None
    #: Overall timeout of one execution; longer than drain timeout + recovery timeout + confirmation.
    workflow_timeout_minutes: int
    #: Kubernetes group the EKS access entries map the workflow roles to (bound by deploy/rbac).
    kubernetes_group: str
    #: Where the exporter runs (deploy/exporter): its EKS Pod Identity association targets this
    #: namespace and service account in every configured cluster.
    exporter_namespace: str
    exporter_service_account: str
    log_retention_days: int

    @classmethod
    def from_cdk_context(cls, context: Any) -> NodeHealConfig:
        """Build from ``app.node.try_get_context("nodeheal")``; raises ConfigurationError."""
        if context is None:
            raise ConfigurationError(f"cdk.json has no {CONTEXT_KEY!r} context object")
        reader = SettingsReader(context, CONTEXT_KEY)
        clusters = reader.string_list("clusters", non_empty=True)
        for name in clusters:
            if not _CLUSTER_NAME.match(name):
                raise ConfigurationError(f"{CONTEXT_KEY}.clusters has an invalid EKS cluster name {name!r}")
        if len(set(clusters)) != len(clusters):
            raise ConfigurationError(f"{CONTEXT_KEY}.clusters lists a cluster twice")
        bus = reader.child("eventBus")
        bus_name = bus.string("name", "nodeheal")
        if bus_name == "default" or not _BUS_NAME.match(bus_name):
            raise ConfigurationError(
                f"{CONTEXT_KEY}.eventBus.name must be a custom bus name (letters, digits, . - _ /), "
                f"got {bus_name!r}"
            )
        source = bus.string("source", DEFAULT_SOURCE)
        if source.startswith("aws."):
            raise ConfigurationError(f"{CONTEXT_KEY}.eventBus.source must not start with 'aws.'")
        archive_days = bus.integer("archiveRetentionDays", 14, minimum=0, maximum=3650)
        bus.finish()
        rule = RuleSettings.read(reader.child("rule"))
        ingest = reader.child("ingest")
        stale = ingest.integer("staleEventSeconds", 900, minimum=30, maximum=86_400)
        ingest.finish()
        # The rule's scope rides along in every execution's settings: admit re-checks it live.
        remediation = replace(RemediationSettings.read(reader), scope=rule)
        notifications = reader.child("notifications")
        emails = notifications.string_list("emails", ())
        for email in emails:
            if not _EMAIL.match(email):
                raise ConfigurationError(
                    f"{CONTEXT_KEY}.notifications.emails has an invalid address {email!r}"
                )
        slack_raw = notifications.mapping("slack", {})
        slack = (
            SlackChannel.read(SettingsReader(slack_raw, f"{CONTEXT_KEY}.notifications.slack"))
            if slack_raw
            else None
        )
        notifications.finish()
        observability = reader.child("observability")
        heartbeat_minutes = observability.integer("heartbeatMissingMinutes", 10, minimum=2, maximum=1440)
        observability.finish()
        network_raw = reader.mapping("lambdaNetwork", {})
        network = (
            LambdaNetwork.read(SettingsReader(network_raw, f"{CONTEXT_KEY}.lambdaNetwork"))
            if network_raw
            else None
        )
        workflow = reader.child("workflow")
        timeout_minutes = workflow.integer("timeoutMinutes", 180, minimum=5, maximum=7 * 24 * 60)
        workflow.finish()
        needed_minutes = (
            remediation.drain.timeout_seconds + remediation.reboot.recovery_timeout_seconds
        ) // 60 + 5
        if timeout_minutes < needed_minutes:
            raise ConfigurationError(
                f"{CONTEXT_KEY}.workflow.timeoutMinutes ({timeout_minutes}) must exceed drain plus "
                f"recovery timeouts with margin ({needed_minutes})"
            )
        exporter = reader.child("exporter")
        config = cls(
            stack_name=reader.string("stackName", "NodeHeal"),
            clusters=clusters,
            event_bus_name=bus_name,
            event_source=source,
            archive_retention_days=archive_days,
            rule=rule,
            stale_event_seconds=stale,
            remediation=remediation,
            notification_emails=emails,
            slack=slack,
            heartbeat_missing_minutes=heartbeat_minutes,
            lambda_network=network,
            workflow_timeout_minutes=timeout_minutes,
            kubernetes_group=reader.string("kubernetesGroup", "nodeheal-remediator"),
            exporter_namespace=exporter.string("namespace", "nodeheal"),
            exporter_service_account=exporter.string("serviceAccount", "nodeheal-exporter"),
            log_retention_days=reader.integer("logRetentionDays", 30, minimum=1, maximum=3653),
        )
        exporter.finish()
        if config.kubernetes_group.startswith("system:"):
            raise ConfigurationError(
                f"{CONTEXT_KEY}.kubernetesGroup must not start with 'system:' (EKS access entries refuse it)"
            )
        reader.finish()
        return config
