"""Ingest: the custom bus the exporter writes to, the rule, its archive, and the ingest Lambda.

EventBridge invokes Lambda asynchronously, so two distinct failures need two dead-letter queues:
the rule target's DLQ catches events EventBridge could not deliver (throttling, missing
permission, expired retries); the function's on-failure destination catches events the handler
failed on after Lambda's own retries (with the error in the record). Both queues are encrypted
with a customer managed key (:mod:`nodeheal.cdk.constructs.encryption`) that lets EventBridge write to
them.

The function has reserved concurrency (``ingest.reservedConcurrency``): an event storm occupies at
most that many instances, so it cannot starve the account's other functions, and those instances
are always there for ingest. EventBridge hands events to Lambda's asynchronous queue, which keeps
throttled events and retries them until their maximum age (the stale bound below), so a storm is
slowed down, not dropped: what outlives the bound lands in the failure DLQ, and ingest would
have dropped it as stale anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from nodeheal.cdk.constructs.lambda_function import NodeHealFunction
from nodeheal.cdk.rule_pattern import build_event_pattern, build_heartbeat_pattern
from nodeheal.cdk.workflow_tasks import INGEST_TASK
from nodeheal.deploy_config import NodeHealConfig

#: EventBridge retries a failed delivery with backoff this many times (within the event age below).
TARGET_RETRY_ATTEMPTS = 8
#: Lambda retries a failed async invocation this many times (its maximum) before the destination.
FUNCTION_RETRY_ATTEMPTS = 2
#: EventBridge and Lambda accept event ages between one minute and this bound (seconds).
MIN_EVENT_AGE_SECONDS = 60
MAX_EVENT_AGE_SECONDS = 21_600
#: Dead letters wait this long for a person (the SQS maximum).
DLQ_RETENTION = Duration.days(14)
ARCHIVE_DESCRIPTION = "Every event the ingest rule matches, for replay and forensics"


class IngestConstruct(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: NodeHealConfig,
        code: lambda_.Code,
        ledger_table_name: str,
        state_machine: sfn.IStateMachine,
        queue_key: kms.IKey,
        log_key: kms.IKey | None = None,
        bus: events.IEventBus | None = None,
    ) -> None:
        """``bus``: an existing bus the exporters write to; without it the construct creates one
        named ``eventBus.name``. Either way the archive and the rules are NodeHeal's own."""
        super().__init__(scope, id_)
        self._config = config
        self._queue_key = queue_key
        self._log_key = log_key
        self.event_pattern = build_event_pattern(config)
        self.bus_is_owned = bus is None
        self.bus: events.IEventBus
        if bus is None:
            owned_bus = self._build_bus()
            self.bus = owned_bus
            self.archive = self._build_archive(owned_bus)
        else:
            self.bus = bus
            self.archive = self._build_archive_of_existing_bus(bus)
        self.delivery_dlq = self._build_dead_letter_queue(
            "DeliveryDLQ", "events EventBridge could not deliver to the ingest function"
        )
        self.failure_dlq = self._build_dead_letter_queue(
            "FailureDLQ", "events the ingest function failed on after Lambda's retries"
        )
        self.function = self._build_function(code, ledger_table_name, state_machine)
        self.rule = self._build_rule(self.bus, self.function.function)
        self.heartbeat_rule = self._build_heartbeat_rule(self.bus, self.function.function)

    @property
    def dead_letter_queues(self) -> tuple[sqs.Queue, ...]:
        return (self.delivery_dlq, self.failure_dlq)

    def _max_event_age(self) -> Duration:
        # An event older than the stale bound is dropped by ingest anyway; retrying it longer only
        # delays the dead letter a person should see.
        seconds = min(max(self._config.stale_event_seconds, MIN_EVENT_AGE_SECONDS), MAX_EVENT_AGE_SECONDS)
        return Duration.seconds(seconds)

    def _build_bus(self) -> events.EventBus:
        return events.EventBus(self, "Bus", event_bus_name=self._config.event_bus_name)

    def _archive_retention(self) -> Duration | None:
        # Retention 0 means "keep forever" to EventBridge.
        retention = self._config.archive_retention_days
        return Duration.days(retention) if retention else None

    def _build_archive(self, bus: events.EventBus) -> events.Archive:
        return bus.archive(
            "Archive",
            description=ARCHIVE_DESCRIPTION,
            event_pattern=to_event_pattern(self.event_pattern),
            retention=self._archive_retention(),
        )

    def _build_archive_of_existing_bus(self, bus: events.IEventBus) -> events.Archive:
        # Created here, not with bus.archive(): that would place it under the bus's construct, which
        # may live in another stack of the app.
        return events.Archive(
            self,
            "Archive",
            source_event_bus=bus,
            description=ARCHIVE_DESCRIPTION,
            event_pattern=to_event_pattern(self.event_pattern),
            retention=self._archive_retention(),
        )

    def _build_dead_letter_queue(self, id_: str, holds: str) -> sqs.Queue:
        return dead_letter_queue(self, id_, key=self._queue_key, holds=holds)

    def _build_function(
        self, code: lambda_.Code, ledger_table_name: str, state_machine: sfn.IStateMachine
    ) -> NodeHealFunction:
        config = self._config
        node_heal_function = NodeHealFunction(
            self,
            "Ingest",
            spec=INGEST_TASK,
            code=code,
            function_name=f"{config.stack_name}-{INGEST_TASK.name}",
            environment={
                "NODEHEAL_STATE_MACHINE_ARN": state_machine.state_machine_arn,
                "NODEHEAL_CLUSTERS": ",".join(config.clusters),
                "NODEHEAL_STALE_EVENT_SECONDS": str(config.stale_event_seconds),
                "NODEHEAL_EVENT_SOURCE": config.event_source,
                "NODEHEAL_LEDGER_TABLE": ledger_table_name,
            },
            log_retention_days=config.log_retention_days,
            log_key=self._log_key,
            reserved_concurrency=config.ingest_reserved_concurrency,
        )
        fail_to_queue(node_heal_function, self.failure_dlq, max_event_age=self._max_event_age())
        return node_heal_function

    def _build_rule(self, bus: events.IEventBus, function: lambda_.IFunction) -> events.Rule:
        return rule_to_function(
            self,
            "Rule",
            bus=bus,
            function=function,
            pattern=self.event_pattern,
            description="Unhealthy Node condition transitions of the configured clusters -> ingest",
            dead_letter_queue=self.delivery_dlq,
            max_event_age=self._max_event_age(),
        )

    def _build_heartbeat_rule(self, bus: events.IEventBus, function: lambda_.IFunction) -> events.Rule:
        # Same function as the remediation rule: one place validates what the exporter sends, and
        # ingest turns each heartbeat into a per-cluster metric the "no heartbeat" alarm watches.
        return rule_to_function(
            self,
            "HeartbeatRule",
            bus=bus,
            function=function,
            pattern=build_heartbeat_pattern(self._config),
            description="Exporter heartbeats of the configured clusters -> ingest (counted per cluster)",
            dead_letter_queue=self.delivery_dlq,
            max_event_age=Duration.seconds(MIN_EVENT_AGE_SECONDS),
        )


def dead_letter_queue(scope: Construct, id_: str, *, key: kms.IKey, holds: str) -> sqs.Queue:
    """A dead-letter queue of NodeHeal's event path: encrypted with ``key``, kept 14 days."""
    queue = sqs.Queue(
        scope,
        id_,
        # KMS with an explicit key, not SQS-managed SSE: the key's policy must admit EventBridge.
        encryption=sqs.QueueEncryption.KMS,
        encryption_master_key=key,
        enforce_ssl=True,
        retention_period=DLQ_RETENTION,
    )
    Validations.of(queue).acknowledge(
        Acknowledgment(
            id="AwsSolutions-SQS3",
            reason=f"This queue is itself a dead-letter queue (it holds {holds}); its depth is alarmed.",
        )
    )
    return queue


def rule_to_function(
    scope: Construct,
    id_: str,
    *,
    bus: events.IEventBus,
    function: lambda_.IFunction,
    pattern: Mapping[str, Any],
    description: str,
    dead_letter_queue: sqs.IQueue,
    max_event_age: Duration,
) -> events.Rule:
    """A rule of NodeHeal's event path: ``pattern`` on ``bus`` to ``function``, retried
    :data:`TARGET_RETRY_ATTEMPTS` times, and what EventBridge still cannot deliver kept in
    ``dead_letter_queue``."""
    return events.Rule(
        scope,
        id_,
        event_bus=bus,
        description=description,
        event_pattern=to_event_pattern(pattern),
        targets=[
            targets.LambdaFunction(
                function,
                dead_letter_queue=dead_letter_queue,
                retry_attempts=TARGET_RETRY_ATTEMPTS,
                max_event_age=max_event_age,
            )
        ],
    )


def fail_to_queue(function: NodeHealFunction, failure_dlq: sqs.IQueue, *, max_event_age: Duration) -> None:
    """An asynchronously invoked function of the event path: Lambda retries a failed invocation
    :data:`FUNCTION_RETRY_ATTEMPTS` times, then keeps the event in ``failure_dlq``."""
    function.function.configure_async_invoke(
        on_failure=destinations.SqsDestination(failure_dlq),
        retry_attempts=FUNCTION_RETRY_ATTEMPTS,
        max_event_age=max_event_age,
    )
    acknowledge_failure_destination(function)


def acknowledge_failure_destination(function: NodeHealFunction) -> None:
    """The destination's grant (CDK's Queue.grantSendMessages) includes the queue key's
    encrypt/decrypt actions, wildcards included; the key is the only resource."""
    for action in ("kms:GenerateDataKey*", "kms:ReEncrypt*"):
        Validations.of(function.role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Action::{action}]",
                reason="Sending failed events to the encrypted failure DLQ needs the queue key's "
                "data-key actions (CDK's SQS send grant); that key is the only resource.",
            )
        )


def to_event_pattern(pattern: Mapping[str, Any]) -> events.EventPattern:
    return events.EventPattern(
        source=_source_matcher(pattern["source"]),
        detail_type=pattern["detail-type"],
        detail=pattern["detail"],
    )


def _source_matcher(sources: Sequence[Any]) -> Sequence[str]:
    """The pattern's ``source`` list for CDK, whose typed ``source`` takes strings: a
    ``{"prefix": ...}`` entry becomes ``Match.prefix``; the synthesized JSON is the pattern's own."""
    matchers = [
        events.Match.prefix(entry["prefix"])
        if isinstance(entry, Mapping)
        else events.Match.exact_string(entry)
        for entry in sources
    ]
    return matchers[0] if len(matchers) == 1 else events.Match.any_of(*matchers)
