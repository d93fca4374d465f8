"""The exporter process: wires settings, adapters and threads, and decides the exit code.

Threads: the Node watcher, the Node Events watcher (unless ``ship_node_events`` is false), the
publisher, the leader elector (optional), the resync timer and the HTTP server. The process exits
non-zero when a watcher thread dies: a running pod that silently stopped watching would be the
worst failure mode of all.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from nodeheal.errors import ConfigurationError
from nodeheal.events import DETAIL_TYPE_EXPORTER_HEARTBEAT, ExporterHeartbeat
from nodeheal.exporter.health import HealthServer, HealthState
from nodeheal.exporter.kubeclient import KubeJsonClient
from nodeheal.exporter.leader import LeaderElector, LeaseConfig
from nodeheal.exporter.logs import fields
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.node_events import NODE_EVENTS_FIELD_SELECTOR, NODE_EVENTS_PATH, NodeEventShipper
from nodeheal.exporter.pipeline import NodeWatchHandler, Pipeline
from nodeheal.exporter.publisher import EventPublisher
from nodeheal.exporter.queue import EventQueue, QueuedEvent
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.exporter.watcher import ListWatcher, WatchConfig
from nodeheal.timestamps import utc_now

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_WATCHER_DIED = 1


def make_events_client(region: str | None = None) -> Any:
    """boto3 EventBridge client from the standard credential chain (Pod Identity, IRSA, env...).

    ``region`` is :attr:`ExporterSettings.aws_region`; without it only boto3's shared config file
    can name one, and when nothing does the process stops at start naming the settings that fix
    it, instead of failing every PutEvents later.

    botocore's own retries are off: the publisher retries with its own jittered backoff, only the
    failed entries, and counts every attempt in its metrics.
    """
    # Imported here so `nodeheal --help` and the other subcommands do not pay for boto3.
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(region_name=region)
    if not session.region_name:
        raise ConfigurationError(
            "no AWS region: set AWS_REGION, or give --event-bus / NODEHEAL_EVENT_BUS as the bus ARN "
            "(the stack's EventBusArn output) and the region is taken from it"
        )
    config = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=15)
    return session.client("events", config=config)


@dataclass
class _Worker:
    name: str
    target: Callable[[], None]
    critical: bool
    thread: threading.Thread | None = None
    error: Exception | None = field(default=None)


class Exporter:
    def __init__(self, settings: ExporterSettings, api_client: Any, events_client: Any) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.health = HealthState(settings.liveness_max_api_silence_seconds)
        self._kube = KubeJsonClient(api_client)
        self._stopping = threading.Event()
        self._failed = threading.Event()
        self._workers: list[_Worker] = []

        self.queue = EventQueue(settings.queue_capacity, on_drop=self._dropped)
        self.tracker = TransitionTracker(settings.cluster_name, settings.watches)
        self.pipeline = Pipeline(
            self.tracker,
            self.queue,
            self.metrics,
            leading=not settings.leader_election,
            replay_seconds=settings.standby_replay_seconds,
            replay_capacity=settings.queue_capacity,
        )
        self.elector: LeaderElector | None = None
        if settings.leader_election:
            self.elector = LeaderElector(
                self._kube,
                LeaseConfig(
                    name=settings.lease_name,
                    namespace=settings.lease_namespace,
                    identity=settings.identity,
                    lease_duration_seconds=settings.lease_duration_seconds,
                    renew_deadline_seconds=settings.renew_deadline_seconds,
                    retry_period_seconds=settings.retry_period_seconds,
                    request_timeout_seconds=settings.request_timeout_seconds,
                ),
                on_started_leading=self.pipeline.start_leading,
                on_stopped_leading=self.pipeline.stop_leading,
            )
        self.publisher = EventPublisher(
            events_client,
            event_bus=settings.event_bus,
            source=settings.entry_source,
            queue=self.queue,
            metrics=self.metrics,
            batch_entries=settings.publish_batch_entries,
            batch_bytes=settings.publish_batch_bytes,
            backoff_initial=settings.publish_backoff_initial_seconds,
            backoff_max=settings.publish_backoff_max_seconds,
            is_active=lambda: self.pipeline.leading,
        )
        self.node_watcher = ListWatcher(
            self._kube,
            self._watch_config("/api/v1/nodes", settings.label_selector, ""),
            NodeWatchHandler(self.pipeline),
            metrics=self.metrics,
            name="nodes",
            on_api_contact=self.health.api_contact,
            on_listed=self.health.mark_ready,
        )
        self.event_watcher: ListWatcher | None = None
        #: The Node Events handler (None with ship_node_events off); ``listed`` once its first list is done.
        self.node_events: NodeEventShipper | None = None
        if settings.ship_node_events:
            shipper = self.node_events = NodeEventShipper(
                settings.cluster_name,
                self._submit_node_events,
                self.metrics,
                self.pipeline.cached_node,
                reasons=settings.node_event_reasons,
                types=settings.node_event_types,
            )
            self.event_watcher = ListWatcher(
                self._kube,
                self._watch_config(NODE_EVENTS_PATH, "", NODE_EVENTS_FIELD_SELECTOR),
                shipper,
                metrics=self.metrics,
                name="events",
                on_api_contact=self.health.api_contact,
            )
        self.http: HealthServer | None = None
        self._heartbeat_totals: dict[str, int] = {}

    def _watch_config(self, path: str, label_selector: str, field_selector: str) -> WatchConfig:
        s = self.settings
        return WatchConfig(
            path=path,
            label_selector=label_selector,
            field_selector=field_selector,
            watch_timeout_seconds=s.watch_timeout_seconds,
            client_margin_seconds=s.watch_client_margin_seconds,
            request_timeout_seconds=s.request_timeout_seconds,
            page_size=s.list_page_size,
            backoff_initial_seconds=s.backoff_initial_seconds,
            backoff_max_seconds=s.backoff_max_seconds,
        )

    def _submit_node_events(self, items: list[QueuedEvent]) -> None:
        self.pipeline.submit(items)

    def _dropped(self, item: QueuedEvent) -> None:
        self.metrics.inc("events_dropped_total", reason="overflow")
        logger.warning(
            "queue full; dropped an event",
            extra=fields(
                node=item.key,
                detail_type=item.detail_type,
                healthy_direction=item.healthy_direction,
                drop_order=item.drop_order.name.lower(),
            ),
        )

    def _resync_loop(self) -> None:
        while not self._stopping.wait(self.settings.resync_seconds):
            self.pipeline.resync()

    def heartbeat(self) -> QueuedEvent | None:
        """Queue one ``Exporter Heartbeat`` (leader only) with the publisher's counts since the last.

        It goes through the same queue and publisher as condition events, so the alarm on missing
        heartbeats also catches a publisher that stopped delivering while the pod stays alive.
        """
        totals = {
            "published": int(self.metrics.total("events_published_total")),
            "failures": int(self.metrics.total("publish_failures_total")),
            "dropped": int(self.metrics.total("events_dropped_total")),
        }
        since = {key: max(0, value - self._heartbeat_totals.get(key, 0)) for key, value in totals.items()}
        self._heartbeat_totals = totals
        if not self.pipeline.leading:
            return None
        beat = ExporterHeartbeat(
            cluster=self.settings.cluster_name,
            identity=self.settings.identity,
            sent_at=utc_now(),
            interval_seconds=self.settings.heartbeat_seconds,
            queue_depth=len(self.queue),
            published=since["published"],
            publish_failures=since["failures"],
            dropped=since["dropped"],
        )
        item = QueuedEvent(
            key="",
            detail_type=DETAIL_TYPE_EXPORTER_HEARTBEAT,
            detail=json.dumps(beat.to_detail(), separators=(",", ":"), sort_keys=True),
            healthy_direction=True,
        )
        self.queue.put(item)
        return item

    def _heartbeat_loop(self) -> None:
        while not self._stopping.wait(self.settings.heartbeat_seconds):
            self.heartbeat()

    def _spawn(self, name: str, target: Callable[[], None], *, critical: bool) -> None:
        worker = _Worker(name, target, critical)

        def run() -> None:
            try:
                target()
            except Exception as exc:
                # Logged here with the traceback; re-raising would only print it a second time.
                worker.error = exc
                logger.exception("thread died", extra=fields(thread=name))
                if critical:
                    self._failed.set()
                return
            if critical and not self._stopping.is_set():
                logger.error("thread ended unexpectedly", extra=fields(thread=name))
                self._failed.set()

        worker.thread = threading.Thread(target=run, name=name, daemon=True)
        self._workers.append(worker)
        worker.thread.start()

    def _alive(self, name: str) -> bool:
        return any(w.name == name and w.thread is not None and w.thread.is_alive() for w in self._workers)

    def start(self, *, serve_http: bool = True) -> None:
        s = self.settings
        logger.info(
            "starting",
            extra=fields(
                cluster=s.cluster_name,
                bus=s.event_bus,
                region=s.aws_region,
                source=s.entry_source,
                label_selector=s.label_selector,
                condition_types=list(s.condition_types) or "all but " + ",".join(s.ignored_condition_types),
                leader_election=s.leader_election,
                identity=s.identity,
            ),
        )
        if serve_http:
            self.http = HealthServer(s.http_host, s.http_port, self.health, self.metrics)
            self.http.start()
        self.health.add_liveness_check(lambda: self._alive("node-watcher"))
        self._spawn("publisher", self.publisher.run, critical=True)
        self._spawn("node-watcher", self.node_watcher.run, critical=True)
        if self.event_watcher is not None:
            self.health.add_liveness_check(lambda: self._alive("event-watcher"))
            self._spawn("event-watcher", self.event_watcher.run, critical=True)
        if self.elector is not None:
            self._spawn("leader-elector", self.elector.run, critical=True)
        if s.resync_seconds > 0:
            self._spawn("resync", self._resync_loop, critical=False)
        if s.heartbeat_seconds > 0:
            self._spawn("heartbeat", self._heartbeat_loop, critical=False)

    def stop(self, *, release_lease: bool = True) -> None:
        """Stop every thread. ``release_lease=False`` simulates a crash (tests): the Lease expires."""
        self._stopping.set()
        if self.elector is not None:
            self.elector.stop(release=release_lease)
        self.node_watcher.stop()
        if self.event_watcher is not None:
            self.event_watcher.stop()
        self.publisher.stop()
        for worker in self._workers:
            if worker.thread is not None:
                worker.thread.join(timeout=5)
        if self.http is not None:
            self.http.stop()

    @property
    def failed(self) -> bool:
        return self._failed.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a critical thread dies (True) or ``timeout`` passes (False)."""
        return self._failed.wait(timeout)

    def run_forever(self) -> int:
        """Start, run until SIGTERM/SIGINT or a critical failure; the process exit code."""
        stop_requested = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            logger.info("signal received; shutting down", extra=fields(signal=signum))
            stop_requested.set()
            self._failed.set()  # wakes wait(); the exit code comes from stop_requested

        # The handlers this replaces come back when it returns: a process that embeds the exporter
        # (a test run, a supervisor) must not keep a handler that logs to a closed stream and
        # swallows its own Ctrl-C.
        previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            while not self._failed.wait(1.0):
                pass
            self.stop(release_lease=True)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if stop_requested.is_set():
            logger.info("stopped")
            return EXIT_OK
        logger.error("a critical thread died; exiting so the kubelet restarts the pod")
        return EXIT_WATCHER_DIED
