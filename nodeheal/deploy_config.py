"""The deployment's typed configuration, built once from the ``nodeheal`` object in ``cdk.json``.

Reports every problem at once, each naming its key, before any construct is created. The
remediation part (mode, policy, budgets, drain, reboot) is :class:`nodeheal.config.RemediationSettings`,
shared with the Lambdas; this module adds what only the deployment needs.

It lives in the package, not beside the CDK code in ``stacks/``, because the CLI reads the same
``cdk.json`` (``explain --config``, ``demo``, ``breaker reset --config``) and must accept exactly
what ``cdk synth`` accepts: one parser, so no list of keys the CLI skips can go stale. Nothing here
imports the CDK.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nodeheal import worst_case
from nodeheal.config import (
    DEFAULT_SCOPE_CONDITIONS,
    RemediationSettings,
    ScopeCondition,
    ScopeSettings,
)
from nodeheal.errors import ConfigurationError
from nodeheal.events import DEFAULT_SOURCE
from nodeheal.rbac import DEFAULT_GROUP_PREFIX, groups_of
from nodeheal.settings_reader import SettingsReader, all_problems, problem, salvage

CONTEXT_KEY = "nodeheal"
#: How a command that reads cdk.json itself names the object in its errors.
FILE_CONTEXT_PATH = f"context.{CONTEXT_KEY}"

_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")  # EKS CreateCluster constraint
_BUS_NAME = re.compile(r"^[/\.\-_A-Za-z0-9]{1,256}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
#: AWS Chatbot's constraints on SlackTeamId and SlackChannelId.
_SLACK_WORKSPACE = re.compile(r"^[0-9A-Z]{1,255}$")
_SLACK_CHANNEL = re.compile(r"^[A-Za-z0-9]+$")
#: ``<prefix>-<function>`` names a ClusterRole (a DNS subdomain) and an EKS access entry group; the
#: longest function suffix, ``-terminate-delete-nodes``, must fit in the 63 characters of a label.
_GROUP_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
#: A KMS key ARN: ``arn:<partition>:kms:<region>:<account>:key/<key id>``, the key id a UUID or, for a
#: multi-Region key, ``mrk-`` and 32 hex digits (KMS "Key identifiers (KeyId)").
_KMS_KEY_ARN = re.compile(
    r"^arn:(?P<partition>aws(-[a-z]+)*):kms:(?P<region>[a-z]{2}(-[a-z]+)+-\d+):(?P<account>\d{12}):"
    r"key/(?P<key_id>mrk-[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
)
#: Reserved concurrency of the ingest function. Ingest validates an event and starts one execution
#: (a few hundred milliseconds), so 10 instances take tens of events a second: a whole fleet
#: faulting at once is through in well under a minute, while the rest of the account's Lambda
#: concurrency stays free. Lambda keeps throttled asynchronous events and retries them for up to the
#: event's maximum age (``ingest.staleEventSeconds``), so a cap delays a storm rather than losing it.
DEFAULT_INGEST_RESERVED_CONCURRENCY = 10

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
        # An empty id was refused by the read already.
        if channel.workspace_id and not _SLACK_WORKSPACE.match(channel.workspace_id):
            problem(
                f"{reader.where('workspaceId')} must be a Slack workspace id like T0123ABCD, "
                f"got {channel.workspace_id!r}"
            )
        if channel.channel_id and not _SLACK_CHANNEL.match(channel.channel_id):
            problem(
                f"{reader.where('channelId')} must be a Slack channel id like C0123ABCD, "
                f"got {channel.channel_id!r}"
            )
        return channel


@dataclass(frozen=True, slots=True)
class CustomerKey:
    """An existing customer managed KMS key (``security.kmsKeyArn``) that encrypts the ledger, every
    log group, the notifications topic and the dead-letter queues. NodeHeal imports it and cannot
    edit its key policy: README "Hardening" lists what that policy must allow."""

    arn: str
    partition: str
    region: str
    account: str

    @classmethod
    def parse(cls, arn: str, where: str) -> CustomerKey:
        match = _KMS_KEY_ARN.match(arn)
        if match:
            return cls(
                arn=arn, partition=match["partition"], region=match["region"], account=match["account"]
            )
        if ":alias/" in arn or arn.startswith("alias/"):
            problem = (
                "names an alias: CloudWatch Logs accepts only a key ARN, and IAM grants on an alias "
                "do not cover the key"
            )
        elif ":" not in arn:
            problem = "is a bare key id: give the whole ARN, so the Region and account are explicit"
        else:
            problem = "is not a KMS key ARN"
        raise ConfigurationError(
            f"{where} {problem}; expected arn:<partition>:kms:<region>:<account>:key/<key id>, "
            f"e.g. arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab; got {arn!r}"
        )


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
    #: Reserved concurrency of the ingest function: the most instances an event storm can occupy,
    #: and the instances ingest always has, whatever else runs in the account.
    ingest_reserved_concurrency: int
    remediation: RemediationSettings
    notification_emails: tuple[str, ...]
    #: Optional Slack channel the notifications topic is mirrored to through AWS Chatbot.
    slack: SlackChannel | None
    #: The exporter of a cluster has sent no heartbeat for this long -> alarm. The exporter sends
    #: one a minute by default, so the default tolerates a rolling restart and a slow leader handover.
    heartbeat_missing_minutes: int
    lambda_network: LambdaNetwork | None
    #: Overall timeout of one execution: longer, by a margin, than the worst case of waiting behind
    #: the node's lock holder and then remediating (``nodeheal.worst_case.execution_worst_case``).
    workflow_timeout_minutes: int
    #: Each Kubernetes-facing function's EKS access entry names the group ``<prefix>-<function>``,
    #: which deploy/rbac/remediator.yaml (rendered for this prefix) binds to its own ClusterRole.
    kubernetes_group_prefix: str
    #: Where the exporter runs (deploy/exporter): its EKS Pod Identity association targets this
    #: namespace and service account in every configured cluster.
    exporter_namespace: str
    exporter_service_account: str
    log_retention_days: int
    #: ``security.kmsKeyArn``; None: every resource keeps its service's default encryption.
    customer_key: CustomerKey | None

    @property
    def state_machine_name(self) -> str:
        """The remediation state machine's name, as the console lists it."""
        return f"{self.stack_name}-remediation"

    @classmethod
    def from_cdk_context(cls, context: Any, where: str = CONTEXT_KEY) -> NodeHealConfig:
        """Build from ``app.node.try_get_context("nodeheal")``; raises one ConfigurationError that
        lists every problem, each starting with its key's path, the timing checks' last.

        ``where`` names the object in errors: ``nodeheal`` for the CDK app, ``context.nodeheal``
        for a command that reads the file itself, so each error names the key as its reader sees it.
        """
        if context is None:
            raise ConfigurationError(f"cdk.json has no {CONTEXT_KEY!r} context object")
        with all_problems():
            return cls._read(SettingsReader(context, where))

    @classmethod
    def _read(cls, reader: SettingsReader) -> NodeHealConfig:
        clusters = reader.string_list("clusters", non_empty=True)
        for name in clusters:
            if not _CLUSTER_NAME.match(name):
                problem(f"{reader.where('clusters')} has an invalid EKS cluster name {name!r}")
        if len(set(clusters)) != len(clusters):
            problem(f"{reader.where('clusters')} lists a cluster twice")
        bus = reader.child("eventBus")
        bus_name = bus.string("name", "nodeheal")
        if bus_name == "default" or not _BUS_NAME.match(bus_name):
            problem(
                f"{bus.where('name')} must be a custom bus name (letters, digits, . - _ /), got {bus_name!r}"
            )
        source = bus.string("source", DEFAULT_SOURCE)
        if source.startswith("aws."):
            problem(f"{bus.where('source')} must not start with 'aws.'")
        archive_days = bus.integer("archiveRetentionDays", 14, minimum=0, maximum=3650)
        bus.finish()
        rule = RuleSettings.read(reader.child("rule"))
        ingest = reader.child("ingest")
        stale = ingest.integer("staleEventSeconds", 900, minimum=30, maximum=86_400)
        # At least 1: Lambda reads 0 as "throttle every invocation", which would stop NodeHeal.
        reserved = ingest.integer(
            "reservedConcurrency", DEFAULT_INGEST_RESERVED_CONCURRENCY, minimum=1, maximum=10_000
        )
        ingest.finish()
        # The rule's scope rides along in every execution's settings: admit re-checks it live. The
        # timing checks run once every key has been read (below).
        remediation = replace(RemediationSettings.read(reader), scope=rule)
        notifications = reader.child("notifications")
        emails = notifications.string_list("emails", ())
        for email in emails:
            if not _EMAIL.match(email):
                problem(f"{notifications.where('emails')} has an invalid address {email!r}")
        slack_raw = notifications.mapping("slack", {})
        slack = (
            SlackChannel.read(SettingsReader(slack_raw, notifications.where("slack"))) if slack_raw else None
        )
        notifications.finish()
        observability = reader.child("observability")
        heartbeat_minutes = observability.integer("heartbeatMissingMinutes", 10, minimum=2, maximum=1440)
        observability.finish()
        network_raw = reader.mapping("lambdaNetwork", {})
        network = (
            LambdaNetwork.read(SettingsReader(network_raw, reader.where("lambdaNetwork")))
            if network_raw
            else None
        )
        workflow = reader.child("workflow")
        timeout_minutes = workflow.integer("timeoutMinutes", 1320, minimum=5, maximum=7 * 24 * 60)
        workflow.finish()
        exporter = reader.child("exporter")
        config = cls(
            stack_name=reader.string("stackName", "NodeHeal"),
            clusters=clusters,
            event_bus_name=bus_name,
            event_source=source,
            archive_retention_days=archive_days,
            rule=rule,
            stale_event_seconds=stale,
            ingest_reserved_concurrency=reserved,
            remediation=remediation,
            notification_emails=emails,
            slack=slack,
            heartbeat_missing_minutes=heartbeat_minutes,
            lambda_network=network,
            workflow_timeout_minutes=timeout_minutes,
            kubernetes_group_prefix=_group_prefix(reader),
            exporter_namespace=exporter.string("namespace", "nodeheal"),
            exporter_service_account=exporter.string("serviceAccount", "nodeheal-exporter"),
            log_retention_days=reader.integer("logRetentionDays", 30, minimum=1, maximum=3653),
            customer_key=_customer_key(reader.child("security")),
        )
        exporter.finish()
        reader.finish()
        worst_case.report_timing(remediation, reader)
        _check_workflow_timeout(timeout_minutes, remediation, workflow.where("timeoutMinutes"))
        return config

    def kubernetes_groups(self, function: str) -> list[str]:
        """The groups the function's EKS access entries name (see :mod:`nodeheal.rbac`)."""
        return groups_of(
            function,
            prefix=self.kubernetes_group_prefix,
            delete_node_after_terminate=self.remediation.delete_node_after_terminate,
            delete_nodeclaim=self.remediation.replace.deletes_nodeclaim,
        )


def read_cdk_json(path: str | Path) -> dict[str, Any]:
    """The ``context.nodeheal`` object of a cdk.json file, unparsed; ConfigurationError if absent."""
    nodeheal = _nodeheal_object(path)
    if nodeheal is None:
        raise ConfigurationError(f"{path} has no {FILE_CONTEXT_PATH} object")
    return nodeheal


def _nodeheal_object(path: str | Path) -> dict[str, Any] | None:
    """The ``context.nodeheal`` object of a cdk.json, None when it has none; ConfigurationError when
    the file cannot be read, is not JSON, or holds something else than an object there."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"{path} is not UTF-8 text") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{path} is not valid JSON: {exc}") from None
    context = document.get("context") if isinstance(document, dict) else None
    nodeheal = context.get(CONTEXT_KEY) if isinstance(context, dict) else None
    if nodeheal is None:
        return None
    if not isinstance(nodeheal, dict):
        raise ConfigurationError(f"{path} has no {FILE_CONTEXT_PATH} object")
    return nodeheal


#: The cdk.json a command reads when it is given none: the working directory's, as ``cdk synth``.
DEFAULT_CDK_JSON = "cdk.json"


@dataclass(frozen=True, slots=True)
class ConfigSource:
    """The ``context.nodeheal`` a command runs with, and where it came from, for the command to say."""

    #: None: NodeHeal's built-in defaults.
    context: dict[str, Any] | None
    #: The file, or why the built-in defaults: what follows ``settings:`` in the command's output.
    description: str


def config_source(path: str | Path | None) -> ConfigSource:
    """The configuration of every command that reads one: the cdk.json ``path`` names (it must hold
    ``context.nodeheal``), else ``./cdk.json`` when it is there and holds one, else the built-in
    defaults. Unparsed: the command validates it as ``cdk synth`` does."""
    if path is not None:
        return ConfigSource(read_cdk_json(path), str(path))
    default = Path(DEFAULT_CDK_JSON).resolve()
    if not default.is_file():
        return ConfigSource(None, f"NodeHeal's built-in defaults (no {DEFAULT_CDK_JSON} in {default.parent})")
    nodeheal = _nodeheal_object(default)
    if nodeheal is None:
        return ConfigSource(None, f"NodeHeal's built-in defaults ({default} has no {FILE_CONTEXT_PATH})")
    return ConfigSource(nodeheal, str(default))


def load_cdk_json(path: str | Path) -> NodeHealConfig:
    """The deployment configuration of a cdk.json, validated exactly as ``cdk synth`` validates it."""
    return NodeHealConfig.from_cdk_context(read_cdk_json(path), FILE_CONTEXT_PATH)


def _check_workflow_timeout(timeout_minutes: int, remediation: RemediationSettings, where: str) -> None:
    """Refuse a workflow timeout that could stop a healthy execution before it releases its lock."""
    execution = worst_case.execution_worst_case(remediation)
    required = worst_case.required_workflow_timeout_minutes(remediation)
    if timeout_minutes < required:
        margin = worst_case.margin_seconds(execution.total_seconds)
        problem(
            f"{where} ({timeout_minutes}) must be at least {required}: one execution can run "
            f"{execution.total_seconds} s ({worst_case.format_duration(execution.total_seconds)}), waiting "
            f"behind the node's lock holder and then remediating, and needs a margin of {margin} s "
            f"({worst_case.MARGIN_SHARE:.0%}, at least {worst_case.MIN_MARGIN_SECONDS} s). "
            f"Worst case: {execution.describe()}"
        )


def _customer_key(security: SettingsReader) -> CustomerKey | None:
    arn = security.optional_string("kmsKeyArn")
    security.finish()
    if arn is None:
        return None
    return salvage(lambda: CustomerKey.parse(arn.strip(), security.where("kmsKeyArn")), None)


def _group_prefix(reader: SettingsReader) -> str:
    if "kubernetesGroup" in reader.key_names():
        reader.refuse(
            "kubernetesGroup",
            f"{reader.where('kubernetesGroup')} was replaced by "
            f"{reader.where('kubernetesGroupPrefix')}: every "
            "function now has its own group and ClusterRole, <prefix>-<function> (for example "
            f'"{DEFAULT_GROUP_PREFIX}-drain"). Set kubernetesGroupPrefix (default "{DEFAULT_GROUP_PREFIX}"), '
            "apply deploy/rbac/remediator.yaml rendered for it (make rbac), then delete the old "
            "group's binding (kubectl delete clusterrolebinding,clusterrole nodeheal-remediator)",
        )
    prefix = reader.string("kubernetesGroupPrefix", DEFAULT_GROUP_PREFIX)
    if not _GROUP_PREFIX.match(prefix):
        problem(
            f"{reader.where('kubernetesGroupPrefix')} must be 1-40 lowercase letters, digits or '-', "
            f"starting and ending with a letter or digit (it names ClusterRoles and groups "
            f"<prefix>-<function>), got {prefix!r}"
        )
        return DEFAULT_GROUP_PREFIX
    return prefix
