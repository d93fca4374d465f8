"""The counting function of counted signals (docs/architecture.md, D22): its rule on NodeHeal's
bus, its dead-letter queues and the function.

It is no step of the state machine. The exporters ship Kubernetes Warning Events about their
nodes as ``Node Event Observed``; this construct's rule hands those of the configured clusters to
the function, which keeps each instance's windows in the ledger and, when one crosses its
threshold, starts a remediation the way ingest does (``nodeheal.workflow.counting``). Its role is
its own: the access construct grants it the window items, dropped-event records and
StartExecution, nothing of what the steps touch.

Delivery and failure are handled as for ingest (:mod:`nodeheal.cdk.constructs.ingest`): the rule
target's DLQ catches what EventBridge could not deliver, the function's on-failure destination
what failed after Lambda's retries, both queues encrypted with the messages key and alarmed.
"""

from __future__ import annotations

import json

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from nodeheal.cdk.constructs.ingest import (
    MAX_EVENT_AGE_SECONDS,
    dead_letter_queue,
    fail_to_queue,
    rule_to_function,
)
from nodeheal.cdk.constructs.lambda_function import NodeHealFunction
from nodeheal.cdk.rule_pattern import build_node_event_pattern
from nodeheal.cdk.workflow_tasks import COUNT_SIGNALS_TASK
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.runtime import COUNTED_SIGNALS_VARIABLE

#: Reserved concurrency of the counting function: its ceiling, and what it always has. A storm of
#: Warning Events (a noisy detector on every node of a fleet, a driver fault repeating on each
#: GPU) is far more events than ingest ever sees, and unbounded it would take the account's
#: unreserved concurrency from every other function, NodeHeal's steps included. Five instances
#: count a hundred Events a second or more (one consistent GetItem and one conditional PutItem
#: each), and fewer concurrent writers to one instance's window mean fewer lost conditional writes
#: (``nodeheal.workflow.counting.MAX_WRITE_ATTEMPTS``). What a storm leaves throttled waits in
#: Lambda's asynchronous queue (below), so it is counted late rather than lost; a window is dated
#: by the Events' own timestamps, so a late count lands in the window it belongs to. With ingest's
#: 10 this reserves 15 of the account's concurrency; Lambda keeps 100 unreserved in any case.
RESERVED_CONCURRENCY = 5
#: How long a throttled or failing Event is retried (EventBridge's and Lambda's maximum, 6 hours):
#: an occurrence counts in its window whenever it is counted, and the function ignores what
#: happened before its signal's window, so there is no staleness bound to match as ingest has.
MAX_EVENT_AGE = Duration.seconds(MAX_EVENT_AGE_SECONDS)


class SignalCounterConstruct(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: NodeHealConfig,
        code: lambda_.Code,
        bus: events.IEventBus,
        ledger_table_name: str,
        state_machine: sfn.IStateMachine,
        queue_key: kms.IKey,
        log_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self.event_pattern = build_node_event_pattern(config)
        # Alarms are named after the queues' IDs (ObservabilityConstruct), so these differ from ingest's.
        self.delivery_dlq = dead_letter_queue(
            self,
            "SignalDeliveryDLQ",
            key=queue_key,
            holds="Node Events EventBridge could not deliver to the counting function",
        )
        self.failure_dlq = dead_letter_queue(
            self,
            "SignalFailureDLQ",
            key=queue_key,
            holds="Node Events the counting function failed on after Lambda's retries",
        )
        self.function = self._build_function(code, ledger_table_name, state_machine, log_key)
        self.rule = self._build_rule(bus, self.function.function)

    @property
    def dead_letter_queues(self) -> tuple[sqs.Queue, ...]:
        return (self.delivery_dlq, self.failure_dlq)

    def _build_function(
        self,
        code: lambda_.Code,
        ledger_table_name: str,
        state_machine: sfn.IStateMachine,
        log_key: kms.IKey | None,
    ) -> NodeHealFunction:
        config = self._config
        policy = config.remediation.policy
        node_heal_function = NodeHealFunction(
            self,
            "CountSignals",
            spec=COUNT_SIGNALS_TASK,
            code=code,
            function_name=f"{config.stack_name}-{COUNT_SIGNALS_TASK.name}",
            environment={
                "NODEHEAL_STATE_MACHINE_ARN": state_machine.state_machine_arn,
                "NODEHEAL_CLUSTERS": ",".join(config.clusters),
                "NODEHEAL_STALE_EVENT_SECONDS": str(config.stale_event_seconds),
                "NODEHEAL_EVENT_SOURCE": config.event_source,
                "NODEHEAL_LEDGER_TABLE": ledger_table_name,
                # The state machine carries the policy in each execution's settings (Load settings);
                # this function runs outside it, so it reads policy.countedSignals from here, checked
                # at its cold start as cdk.json is at synth. Only the rules that differ from the
                # defaults: a few hundred bytes of Lambda's 4 KB of environment.
                COUNTED_SIGNALS_VARIABLE: json.dumps(
                    policy.to_json()["countedSignals"], separators=(",", ":"), sort_keys=True
                ),
            },
            log_retention_days=config.log_retention_days,
            log_key=log_key,
            reserved_concurrency=RESERVED_CONCURRENCY,
        )
        fail_to_queue(node_heal_function, self.failure_dlq, max_event_age=MAX_EVENT_AGE)
        return node_heal_function

    def _build_rule(self, bus: events.IEventBus, function: lambda_.IFunction) -> events.Rule:
        return rule_to_function(
            self,
            "Rule",
            bus=bus,
            function=function,
            pattern=self.event_pattern,
            description="Warning Node Events of the configured clusters -> count-signals (instance windows)",
            dead_letter_queue=self.delivery_dlq,
            max_event_age=MAX_EVENT_AGE,
        )
