"""The whole NodeHeal pipeline on one machine, for the demo, the end-to-end tests and benchmarks.

A fault set on a simulated Node travels the real path: the real exporter watches the fake API
server and calls ``events:PutEvents`` on the moto bus; the rule synthesized from the CDK stack
matches it with its real pattern and hands it (through an SQS probe, see
:class:`~nodeheal.sim.stack.rule_targets.RuleTargetPump`) to the real ingest handler, which starts the
state machine moto executes with the real task handlers. The simulated cluster (Karpenter, the
scheduler, the kubelet after a reboot) reacts to what the workflow does.

Timings: the workflow's waits come from the cdk context the template was synthesized with
(:data:`~nodeheal.sim.stack.context.FAST_CONTEXT` for tests, cdk.json through
:func:`~nodeheal.sim.stack.context.demo_context` for the demo); the
cluster's own delays (pod shutdown, node boot, ...) are real-world durations divided by ``speed``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from nodeheal.aws.executions import deployed_settings
from nodeheal.aws.ledger import BY_CLUSTER_INDEX, Ledger
from nodeheal.conditions import Condition, is_bad_status
from nodeheal.config import RemediationSettings
from nodeheal.errors import STOP_ERRORS
from nodeheal.events import (
    DETAIL_TYPE_CONDITION_CHANGED,
    DETAIL_TYPE_NODE_EVENT,
    NodeConditionEvent,
    PreviousState,
    cluster_source,
    node_identity,
)
from nodeheal.exporter.app import Exporter
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.patterns import match
from nodeheal.sim.apiserver.authorizer import (
    FunctionCredentials,
    RbacAuthorizer,
    exporter_user,
    nodeheal_authorizer,
)
from nodeheal.sim.apiserver.server import FakeKubeApiServer
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.cluster.layout import ClusterLayout, ClusterTimings
from nodeheal.sim.cluster.simulated_cluster import SimulatedCluster
from nodeheal.sim.local_aws import Invocation, LocalAws
from nodeheal.sim.stack.context import CLUSTER
from nodeheal.sim.stack.rule_targets import Delivery, RuleTargetPump
from nodeheal.sim.stack.synthesized_app import SynthesizedApp
from nodeheal.sim.timeline import Timeline, describe_task, short_node
from nodeheal.steps import RECORD, RECORD_FAILURE, STEPS
from nodeheal.timestamps import parse_timestamp, utc_now
from nodeheal.workflow.records import DroppedEvent, RemediationRecord

_T = TypeVar("_T")

#: A task that raises one of these stopped on purpose (nodeheal.errors.STOP_ERRORS), not failed.
STOP_ERROR_NAMES = frozenset(error.__name__ for error in STOP_ERRORS)

#: The simulated cluster's delays in tests: 300x real time (a 30 s pod shutdown takes 0.1 s).
FAST_SPEED = 300.0

#: Handlers whose successful return means the execution's remediation record is in the ledger.
RECORD_HANDLERS = frozenset({RECORD.handler, RECORD_FAILURE.handler})
#: Handlers that may publish to the notification topic (the functions granted sns:Publish).
NOTIFYING_HANDLERS = frozenset(step.handler for step in STEPS if step.publishes_notifications) | {
    "lambdas.finalize.handler"
}
#: The SQS queue :class:`LocalPipeline` subscribes to the topic when asked to read notifications.
NOTIFICATION_INBOX = "nodeheal-notifications-inbox"
#: Waits for ledger records re-read the ledger at least this often even when no record task
#: was seen finishing (the tasks are what wakes them; this only bounds a missed wake-up). Each
#: recheck that finds nothing doubles the next one: a read of the ledger holds every Lambda
#: invocation off (moto's tables are not thread-safe) for as long as moto takes to answer it, and
#: in a 1,000-node storm rechecks every 30 s read the growing ledger 16 times, 3 to 35 s each.
LEDGER_RECHECK_SECONDS = 30.0


def _node_and_instance(detail: Any) -> tuple[str, str | None]:
    """The node name and instance id an event detail is about (empty name when it names no node;
    no instance when it names none, so that the timeline uses the node's)."""
    node = detail.get("node") if isinstance(detail, Mapping) else None
    if not isinstance(node, Mapping):
        return "", None
    return str(node.get("name") or ""), str(node.get("instanceID") or "") or None


class PipelineStoppedError(Exception):
    """What the pipeline saw makes waiting for what follows pointless (the message says why): an
    event the exporter sent for a bad condition that no rule matched never reaches ingest."""


def wait_until(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout:g}s")
        time.sleep(interval)


def align_to_second() -> None:
    """Sleep to just past the next whole second. Condition timestamps have one-second resolution
    and the ledger measures every stage from the fault's lastTransitionTime; a fault set right
    after a second boundary makes those durations exact (and gives a flapping condition a new
    transition time)."""
    now = time.time()
    time.sleep(1.0 - (now % 1.0) + 0.005)


@dataclass(frozen=True, slots=True)
class ReceivedNotification:
    """A message as a subscriber of the notification topic received it from SNS."""

    subject: str
    message: str
    #: The SNS message attributes (severity, cluster, node, outcome, action).
    attributes: Mapping[str, str]

    @property
    def node(self) -> str:
        return self.attributes.get("node", "")


@dataclass(frozen=True, slots=True)
class Publication:
    """An entry the exporter's PutEvents call got accepted, as it was sent."""

    entry: Mapping[str, Any]
    event_id: str
    #: time.monotonic() when PutEvents was sent: the rule may deliver the event (and the timeline
    #: show it matched) before the call returns, so the timeline places "published" by this.
    at: float

    @property
    def detail(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.entry["Detail"])
        return value


class ObservedEvents:
    """The exporter's EventBridge client: moto's, noting each accepted entry on the way."""

    def __init__(self, client: Any, on_published: Callable[[Publication], None]) -> None:
        self._client = client
        self._on_published = on_published

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803 - boto3's name
        sent = time.monotonic()
        response: dict[str, Any] = self._client.put_events(Entries=Entries)
        for entry, result in zip(Entries, response.get("Entries", []), strict=False):
            if result.get("EventId"):
                self._on_published(Publication(entry=entry, event_id=result["EventId"], at=sent))
        return response


class LocalPipeline:
    """Fake API server + simulated cluster + moto stack + rule target + real exporter.

    Use as a context manager; on exit it stops the exporter, waits (bounded) for running
    executions so moto is not torn down under them, and stops everything else.
    """

    def __init__(
        self,
        app: SynthesizedApp,
        *,
        layout: ClusterLayout | None = None,
        timings: ClusterTimings | None = None,
        speed: float = FAST_SPEED,
        timeline: Timeline | None = None,
        exporter_overrides: Mapping[str, Any] | None = None,
        authorizer: RbacAuthorizer | None = None,
        read_notifications: bool = False,
    ) -> None:
        """``read_notifications``: subscribe one more queue to the notification topic and read it
        after every task that may publish, so that each notification is on the timeline and in
        :attr:`notifications` as a person's subscription receives it (the demo shows them). Off by
        default: it adds SQS calls to every execution's path, and the probe queue
        (:meth:`LocalAws.notifications`) serves the tests."""
        self.app = app
        self.layout = layout or ClusterLayout()
        self.speed = speed
        self.timings = (timings or ClusterTimings()).scaled(speed)
        self.timeline = timeline or Timeline()
        self._exporter_overrides = dict(exporter_overrides or {})
        # Graceful pod deletion (a pod's terminationGracePeriodSeconds) runs at the same speed.
        self.store = ClusterStore(time_scale=1.0 / speed)
        # Every function and the exporter run under their own RBAC roles (docs/architecture.md, D8); pass an
        # authorizer to share what was used across pipelines.
        self.authorizer = authorizer if authorizer is not None else nodeheal_authorizer()
        self.server = FakeKubeApiServer(self.store, authorizer=self.authorizer)
        self._aws: LocalAws | None = None
        self._cluster: SimulatedCluster | None = None
        self._pump: RuleTargetPump | None = None
        self._exporter: Exporter | None = None
        self._publications: list[Publication] = []
        self._lock = threading.Lock()
        # What record tasks and ingest drops reported, per node: wakes the waits for ledger records
        # so they read the ledger once when it can be complete, not ten times a second.
        self._decisions = threading.Condition()
        self._recorded: Counter[str] = Counter()
        self._dropped: Counter[str] = Counter()
        self._read_notifications = read_notifications
        self._inbox_url = ""
        self._notifications: list[ReceivedNotification] = []
        #: The pattern of each rule that hands events to ingest, as deployed on the bus.
        self._rule_patterns: dict[str, Mapping[str, Any]] = {}
        #: Why waiting is pointless (see :meth:`stop_waiting`); empty while it is not.
        self._stopped = ""
        self.cluster_name = CLUSTER
        #: The deployment's Source prefix, and the Source this cluster's exporter sends.
        self.event_source_prefix = ""
        self.event_source = ""

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> LocalPipeline:
        self.server.start()
        try:
            aws = LocalAws(
                self.app, kube_provider_factory=FunctionCredentials(self.server.url, self.authorizer, CLUSTER)
            )
            self._aws = aws.__enter__()
            ingest = aws.runtime_for(aws.function_logical_id("lambdas.ingest.handler")).ingest_settings
            self.cluster_name = sorted(ingest.clusters)[0]
            self.event_source_prefix = ingest.event_source
            self.event_source = cluster_source(ingest.event_source, self.cluster_name)
            if self._read_notifications:
                self._inbox_url = aws.subscribe_queue(NOTIFICATION_INBOX)
            aws.on_invocation.append(self._on_invocation)
            self._cluster = SimulatedCluster(
                self.store,
                aws,
                self.timeline,
                cluster=self.cluster_name,
                layout=self.layout,
                timings=self.timings,
            )
            self._cluster.build()
            self._cluster.start()
            self._pump = aws.start_rule_targets()
            self._pump.on_matched.append(self._on_matched)
            self._pump.on_delivery.append(self._on_delivery)
            self._rule_patterns = self._deployed_patterns()
            self.start_exporter()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop_exporter()
        if self._aws is not None:
            try:
                self._wait_for_executions(timeout=30.0)
            finally:
                if self._cluster is not None:
                    self._cluster.stop()
                self._aws.__exit__(None, None, None)
                self._aws = None
        self.server.stop()

    @property
    def aws(self) -> LocalAws:
        if self._aws is None:
            raise RuntimeError("the pipeline is not running")
        return self._aws

    @property
    def cluster(self) -> SimulatedCluster:
        if self._cluster is None:
            raise RuntimeError("the pipeline is not running")
        return self._cluster

    @property
    def pump(self) -> RuleTargetPump:
        if self._pump is None:
            raise RuntimeError("the pipeline is not running")
        return self._pump

    @property
    def exporter(self) -> Exporter | None:
        return self._exporter

    def exporter_settings(self) -> ExporterSettings:
        values: dict[str, Any] = {
            "cluster_name": self.cluster_name,
            "event_bus": self.aws.event_bus_name,
            "source": self.event_source_prefix,
            "watch_timeout_seconds": 60,
            "watch_client_margin_seconds": 5.0,
            "request_timeout_seconds": 5.0,
            "backoff_initial_seconds": 0.05,
            "backoff_max_seconds": 0.5,
            "publish_backoff_initial_seconds": 0.02,
            "publish_backoff_max_seconds": 0.2,
            "liveness_max_api_silence_seconds": 120.0,
            "resync_seconds": 0.0,
            "http_host": "127.0.0.1",
            "http_port": 0,
            "identity": "nodeheal-exporter-sim",
        }
        values.update(self._exporter_overrides)
        return ExporterSettings(**values)

    def start_exporter(self) -> Exporter:
        if self._exporter is not None:
            return self._exporter
        events = ObservedEvents(self.aws.client("events"), self._on_published)
        api_client = self.server.api_client(token=self.authorizer.token_for(exporter_user()))
        exporter = Exporter(self.exporter_settings(), api_client, events)
        exporter.start(serve_http=False)
        self._exporter = exporter
        # Faults injected before the first list would reach the bus as resyncs, not transitions, and
        # Node Events recorded before the Events list are history the exporter never ships.
        wait_until(
            lambda: exporter.failed
            or (exporter.health.ready and (exporter.node_events is None or exporter.node_events.listed)),
            timeout=30,
            what="exporter's first lists",
        )
        return exporter

    def stop_exporter(self) -> None:
        exporter, self._exporter = self._exporter, None
        if exporter is not None:
            exporter.stop()

    def restart_exporter(self) -> Exporter:
        """A new exporter process: it re-lists every Node and re-emits what is bad (``resync``)."""
        self.stop_exporter()
        self.timeline.emit("exporter", "restarted", "exporter restarted (new process: re-lists every Node)")
        return self.start_exporter()

    # -- the timeline --------------------------------------------------------------------------------

    def _on_published(self, publication: Publication) -> None:
        with self._lock:
            self._publications.append(publication)
        if publication.entry.get("DetailType") != DETAIL_TYPE_CONDITION_CHANGED:
            return
        detail = publication.detail
        node, instance = _node_and_instance(detail)
        condition = detail.get("condition", {})
        previous = detail.get("previous") or {}
        before = previous.get("status", "?") if previous else "(first seen)"
        resync = " [resync]" if detail.get("resync") else ""
        observed = detail.get("observedAt")
        seen_at = self.timeline.monotonic_of(parse_timestamp(observed, "observedAt")) if observed else None
        faults = self.timeline.events("fault", node=node)
        if seen_at is not None and faults:
            # observedAt has millisecond resolution (and the two clocks are sampled apart): the
            # exporter cannot have seen a transition before the fault that caused it.
            seen_at = max(seen_at, faults[-1].at)
        if seen_at is not None:
            # Nor after it published it: under load the two clocks' sampling can put observedAt
            # past the PutEvents call, and the timeline would show the event sent before it was seen.
            seen_at = min(seen_at, publication.at)
        self.timeline.emit(
            "exporter",
            "transition",
            f"saw {condition.get('type')} {before} -> {condition.get('status')} "
            f"on {short_node(node)}{resync}",
            node=node,
            instance=instance,
            at=seen_at,
        )
        self.timeline.emit(
            "exporter",
            "published",
            f"PutEvents to bus {self.aws.event_bus_name}: event {publication.event_id[:8]}",
            node=node,
            instance=instance,
            at=publication.at,
        )
        # A recovery is meant to match no rule. A bad condition the rules do not forward is never
        # remediated: nothing a scenario waits for can follow, and the person watching is told why.
        if not is_bad_status(str(condition.get("type", "")), str(condition.get("status", ""))):
            return
        why = self._why_not_matched(publication)
        if not why:
            return
        self.timeline.emit(
            "eventbridge",
            "not-matched",
            f"no rule matched event {publication.event_id[:8]}: {why}",
            node=node,
            instance=instance,
        )
        self.stop_waiting(
            f"no rule matched the exporter's event for {short_node(node)} "
            f"({condition.get('type')}={condition.get('status')}), so nothing follows it: {why} "
            "(`nodeheal test-pattern` gives the same answer for this event)"
        )

    def _deployed_patterns(self) -> dict[str, Mapping[str, Any]]:
        """The pattern of every rule on the bus that hands events to ingest, as deployed (what
        ``nodeheal test-pattern --deployed`` reads): moto decides with these which events go on."""
        events = self.aws.client("events")
        patterns: dict[str, Mapping[str, Any]] = {}
        for page in events.get_paginator("list_rules").paginate(EventBusName=self.aws.event_bus_name):
            for rule in page.get("Rules", []):
                if rule["Name"] in self.aws.rule_probes and rule.get("EventPattern"):
                    patterns[rule["Name"]] = json.loads(rule["EventPattern"])
        return patterns

    def _why_not_matched(self, publication: Publication) -> str:
        """Why no rule for condition events matches ``publication``, with the reasons test-pattern
        prints (nodeheal.patterns); empty when one matches."""
        envelope = self.aws.event_envelope(
            publication.detail, source=str(publication.entry.get("Source", "")), event_id=publication.event_id
        )
        for_conditions = {
            name: pattern
            for name, pattern in self._rule_patterns.items()
            if DETAIL_TYPE_CONDITION_CHANGED in (pattern.get("detail-type") or ())
        }
        results = {name: match(pattern, envelope) for name, pattern in for_conditions.items()}
        if not results or any(result.matched for result in results.values()):
            return ""
        return "; ".join(f"rule {name}: {'; '.join(result.reasons)}" for name, result in results.items())

    def stop_waiting(self, reason: str) -> None:
        """Make every wait of this pipeline for what follows (records, timeline events, settling)
        raise :class:`PipelineStoppedError` with ``reason``, now and from now on."""
        with self._decisions:
            self._stopped = self._stopped or reason
            self._decisions.notify_all()

    def _check_stopped(self) -> None:
        if self._stopped:
            raise PipelineStoppedError(self._stopped)

    def _on_matched(self, rule: str, envelope: Mapping[str, Any]) -> None:
        detail_type = envelope.get("detail-type")
        if detail_type not in (DETAIL_TYPE_CONDITION_CHANGED, DETAIL_TYPE_NODE_EVENT):
            return  # exporter heartbeats: counted by ingest, not part of any remediation
        function = "ingest" if detail_type == DETAIL_TYPE_CONDITION_CHANGED else "count-signals"
        node, instance = _node_and_instance(envelope.get("detail"))
        self.timeline.emit(
            "eventbridge",
            "matched",
            f"rule {rule} matched event {str(envelope.get('id', ''))[:8]} -> {function} function",
            node=node,
            instance=instance,
        )

    def _note_decision(self, kind: Counter[str], node: str) -> None:
        with self._decisions:
            kind[node] += 1
            self._decisions.notify_all()

    def _on_delivery(self, delivery: Delivery) -> None:
        node, instance = _node_and_instance(delivery.envelope.get("detail"))
        result = delivery.result
        status = result.get("status", "")
        if status == "dropped":
            self._note_decision(self._dropped, node)
        if delivery.envelope.get("detail-type") == DETAIL_TYPE_NODE_EVENT:
            self._on_counted(delivery, node, instance)
            return
        execution = str(result.get("execution", ""))
        if delivery.envelope.get("detail-type") != DETAIL_TYPE_CONDITION_CHANGED and not delivery.error:
            return
        if delivery.error:
            self.timeline.emit(
                "ingest",
                "ingest-failed",
                f"ingest failed {delivery.attempts}x: {delivery.error}",
                node=node,
                instance=instance,
            )
        elif status == "started":
            self.timeline.emit(
                "ingest",
                "started",
                f"started execution {execution}",
                node=node,
                instance=instance,
                execution=execution,
            )
        elif status == "duplicate":
            self.timeline.emit(
                "ingest",
                "duplicate",
                f"duplicate: execution {execution} already handles it",
                node=node,
                instance=instance,
                execution=execution,
            )
        else:
            self.timeline.emit(
                "ingest",
                "dropped",
                f"dropped ({result.get('category')}): {result.get('reason')}",
                node=node,
                instance=instance,
            )

    def _on_counted(self, delivery: Delivery, node: str, instance: str | None) -> None:
        """What the counting function made of a Warning Node Event (docs/architecture.md, D22)."""
        result = delivery.result
        status = str(result.get("status", ""))
        execution = str(result.get("execution", ""))
        if delivery.error:
            text = f"counting failed {delivery.attempts}x: {delivery.error}"
            status = "count-failed"
        elif status == "crossed":
            text = f"{result.get('reason')}: started execution {execution}"
        elif status == "counted":
            text = f"{result.get('signal')}: {result.get('count')} in {result.get('instanceId')}'s window"
        elif status in ("dropped", "unattributed"):
            text = f"{status} ({result.get('category')}): {result.get('reason')}"
        else:
            return  # ignored and duplicate Events: the bulk of a noisy node, and nothing changed
        self.timeline.emit("count-signals", status, text, node=node, instance=instance, execution=execution)

    def _on_invocation(self, invocation: Invocation) -> None:
        payload = invocation.payload if isinstance(invocation.payload, Mapping) else {}
        execution = str((payload.get("execution") or {}).get("name", ""))
        node, instance = _node_and_instance(payload.get("event"))
        task = invocation.handler.removeprefix("lambdas.").removesuffix(".handler")
        if invocation.handler in RECORD_HANDLERS and not invocation.error:
            self._note_decision(self._recorded, node)
        if invocation.error in STOP_ERROR_NAMES:
            kind, text = "stopped", f"{task} stopped: {invocation.error_message[:160]}"
        elif invocation.error:
            kind, text = "task-failed", f"{task} failed: {invocation.error}: {invocation.error_message[:140]}"
        else:
            described = describe_task(
                invocation.handler, invocation.result if isinstance(invocation.result, Mapping) else {}
            )
            kind, text = described if described is not None else ("", "")
        if text:
            self.timeline.emit("workflow", kind, text, node=node, instance=instance, execution=execution)
        if self._inbox_url and invocation.handler in NOTIFYING_HANDLERS:
            self._receive_notifications()

    def _receive_notifications(self) -> None:
        """What the inbox subscription received from SNS since the last look, onto the timeline."""
        with self.aws.between_invocations():
            messages = self.aws.notifications(self._inbox_url)
        for message in messages:
            received = ReceivedNotification(
                subject=str(message["subject"]),
                message=str(message["message"]),
                attributes={str(k): str(v) for k, v in message["attributes"].items()},
            )
            with self._lock:
                self._notifications.append(received)
            severity = received.attributes.get("severity", "")
            self.timeline.emit(
                "sns",
                "notified",
                f"notification ({severity}): {received.subject}",
                node=received.node,
            )

    @property
    def notifications(self) -> list[ReceivedNotification]:
        """The notifications a subscriber of the topic received, oldest first (``read_notifications``)."""
        if not self._read_notifications:
            raise RuntimeError("the pipeline does not read notifications: pass read_notifications=True")
        with self._lock:
            return list(self._notifications)

    # -- faults and events ---------------------------------------------------------------------------

    def condition_deliveries(self) -> list[Delivery]:
        """What the rules handed to ingest, heartbeats left out."""
        return [
            d for d in self.pump.deliveries if d.envelope.get("detail-type") == DETAIL_TYPE_CONDITION_CHANGED
        ]

    @property
    def publications(self) -> list[Publication]:
        with self._lock:
            return list(self._publications)

    def event_detail(
        self,
        node: str,
        condition_type: str,
        *,
        cluster: str | None = None,
        observed_at: datetime | None = None,
        previous: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """A contract-v1 detail for the node's live condition, as the exporter would build it."""
        obj = self.cluster.node(node)
        if obj is None:
            raise LookupError(f"no node {node}")
        raw = next(c for c in obj["status"]["conditions"] if c["type"] == condition_type)
        event = NodeConditionEvent(
            cluster=cluster or self.cluster_name,
            node=node_identity(obj),
            condition=Condition.from_api(raw),
            observed_at=observed_at or utc_now(),
            previous=PreviousState(previous["status"], previous.get("reason", "")) if previous else None,
        )
        return event.to_detail()

    def publish(
        self,
        detail: Mapping[str, Any] | str,
        *,
        source: str | None = None,
        detail_type: str = DETAIL_TYPE_CONDITION_CHANGED,
    ) -> list[dict[str, Any]]:
        """PutEvents on the NodeHeal bus as any other publisher (a person, a forger) would."""
        text = detail if isinstance(detail, str) else json.dumps(detail)
        return self.aws.put_events(
            {"Source": source or self.event_source, "DetailType": detail_type, "Detail": text}
        )

    # -- state ---------------------------------------------------------------------------------------

    @property
    def remediation_settings(self) -> RemediationSettings:
        """The settings the deployed state machine hands every execution (its Load settings state)."""
        return deployed_settings(self.aws.client("stepfunctions"), self.aws.state_machine_arn)

    @property
    def ledger(self) -> Ledger:
        return self.aws.runtime_for(self.aws.function_logical_id("lambdas.record.handler")).ledger

    def write_admin_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig of the fake API server's administrator at ``path``: what a person at a
        terminal runs ``nodeheal`` and ``kubectl`` with against this cluster."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "sim", "cluster": {"server": self.server.url}}],
            "users": [{"name": "sre", "user": {"token": self.authorizer.admin_token()}}],
            "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sre"}}],
            "current-context": "sim",
        }
        path.write_text(json.dumps(config), encoding="utf-8")
        return path

    def records(self, node: str | None = None) -> list[RemediationRecord]:
        """Ledger records of the cluster (or one node), oldest first."""
        since = datetime(2000, 1, 1, tzinfo=UTC)
        with self.aws.between_invocations():
            if node is not None:
                records = self.ledger.node_records(self.cluster_name, node, since=since)
            else:
                records = self.ledger.cluster_records(self.cluster_name, since=since)
        return sorted(records, key=lambda r: (r.started_at, r.execution))

    def _ledger_decisions_at_most(self) -> int:
        """An upper bound on the cluster's records plus dropped events, counted without reading
        them: DynamoDB's ``Select=COUNT`` over the partitions :meth:`records` and
        :meth:`dropped_events` read (dropped events of every cluster are counted). A 1,000-node
        storm's records are megabytes that moto serializes item by item, while every Lambda
        invocation waits; a count is cheap, so a wait reads them only once they can be complete."""
        dynamodb = self.aws.client("dynamodb")
        total = 0
        with self.aws.between_invocations():
            for partition in (f"CLUSTER#{self.cluster_name}", "DROPPED"):
                pages = dynamodb.get_paginator("query").paginate(
                    TableName=self.aws.table_name,
                    IndexName=BY_CLUSTER_INDEX,
                    KeyConditionExpression="gsi1pk = :pk",
                    ExpressionAttributeValues={":pk": {"S": partition}},
                    Select="COUNT",
                )
                total += sum(int(page["Count"]) for page in pages)
        return total

    def dropped_events(self) -> list[DroppedEvent]:
        with self.aws.between_invocations():
            return self.ledger.dropped_events(since=datetime(2000, 1, 1, tzinfo=UTC))

    def executions(self) -> list[dict[str, Any]]:
        return self.aws.executions()

    def running_executions(self) -> int:
        return sum(1 for e in self.executions() if e["status"] == "RUNNING")

    def _wait_for_executions(self, timeout: float) -> None:
        # Tearing down either way; the caller's own assertions report what did not finish.
        with contextlib.suppress(TimeoutError):
            wait_until(
                lambda: self.running_executions() == 0,
                timeout=timeout,
                interval=0.1,
                what="executions finished",
            )

    def settled(self) -> bool:
        """Nothing in flight: no delivery pending, no execution running, no cluster step due."""
        exporter = self._exporter
        return (
            (exporter is None or len(exporter.queue) == 0)
            and self.pump.idle()
            and self.running_executions() == 0
            and self.cluster.clock.pending() == 0
        )

    def wait_settled(self, timeout: float = 60.0) -> None:
        """Wait until :meth:`settled` holds twice in a row with no new timeline event between."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_stopped()
            before = len(self.timeline.events())
            if self.settled():
                time.sleep(0.3)
                if self.settled() and len(self.timeline.events()) == before:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the pipeline did not settle within {timeout:g}s")
            time.sleep(0.05)

    def wait_for(self, kind: str, *, node: str | None = None, count: int = 1, timeout: float = 30.0) -> None:
        wait_until(
            lambda: self._stopped or len(self.timeline.events(kind, node=node)) >= count,
            timeout=timeout,
            what=f"{count} timeline event(s) {kind!r}" + (f" for {short_node(node)}" if node else ""),
        )
        self._check_stopped()

    def wait_for_records(
        self, count: int, *, node: str | None = None, timeout: float = 30.0
    ) -> list[RemediationRecord]:
        """At least ``count`` ledger records of the cluster (or of one node), read from the ledger."""

        def reported() -> int:
            return self._recorded[node] if node is not None else self._recorded.total()

        def complete() -> list[RemediationRecord] | None:
            records = self.records(node)
            return records if len(records) >= count else None

        return self._wait_for_ledger(
            lambda: reported() >= count, complete, timeout, f"{count} ledger record(s)"
        )

    def wait_until_decided(
        self, nodes: Collection[str], *, timeout: float = 60.0
    ) -> tuple[list[RemediationRecord], list[DroppedEvent]]:
        """Wait until every node of ``nodes`` has a ledger record or a dropped-event record (its
        event started nothing), and return the cluster's records and the dropped events."""
        wanted = set(nodes)

        def reported() -> bool:
            return all(self._recorded[n] or self._dropped[n] for n in wanted)

        def complete() -> tuple[list[RemediationRecord], list[DroppedEvent]] | None:
            if self._ledger_decisions_at_most() < len(wanted):
                return None  # fewer decisions than nodes: some node has none yet
            records, dropped = self.records(), self.dropped_events()
            decided = {r.node for r in records} | {d.node for d in dropped}
            return (records, dropped) if wanted <= decided else None

        return self._wait_for_ledger(reported, complete, timeout, f"a decision for {len(wanted)} node(s)")

    def _wait_for_ledger(
        self,
        reported: Callable[[], bool],
        complete: Callable[[], _T | None],
        timeout: float,
        what: str,
    ) -> _T:
        """Read the ledger (``complete``) each time the record tasks and ingest drops seen so far
        say it may hold what is waited for (``reported``), and at least every
        :data:`LEDGER_RECHECK_SECONDS`, doubled after each recheck that was not woken; the
        ledger alone decides."""
        deadline = time.monotonic() + timeout
        read_at = -1  # how many decisions had been reported when the ledger was last read
        recheck = LEDGER_RECHECK_SECONDS

        def worth_reading() -> bool:
            return bool(self._stopped) or (self._decision_count() != read_at and reported())

        while True:
            with self._decisions:
                woken = self._decisions.wait_for(
                    worth_reading,
                    timeout=max(0.0, min(recheck, deadline - time.monotonic())),
                )
                read_at = self._decision_count()
            recheck = LEDGER_RECHECK_SECONDS if woken else recheck * 2
            self._check_stopped()
            found = complete()
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not reached within {timeout:g}s")

    def _decision_count(self) -> int:
        return self._recorded.total() + self._dropped.total()

    def state_names(self, execution_name: str) -> list[str]:
        for execution in self.executions():
            if execution["name"] == execution_name:
                return self.aws.state_names(execution["executionArn"])
        raise LookupError(f"no execution {execution_name}")

    def timeline_texts(self, kind: str | None = None) -> Iterator[str]:
        return (event.text for event in self.timeline.events(kind))
