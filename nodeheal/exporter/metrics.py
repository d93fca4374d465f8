"""The exporter's Prometheus metrics, through ``prometheus_client``.

Every :class:`Metrics` owns a registry of its own rather than ``prometheus_client.REGISTRY``: tests
and the local pipeline run several exporters in one process, and the global registry refuses a
second family of the same name. Each registry still carries what the default one would: the
process (CPU, memory, file descriptors, start time), platform (``python_info``) and garbage
collector collectors.

Families and their labels are declared once below; a label that is not declared is an error at
the call, not a silent new series. Every label takes values from a small closed set (watcher names,
detail types, error codes, HTTP statuses) except the condition type of
``condition_transitions_total``, which the cluster chooses: :class:`ConditionLabels` caps it.

``prometheus_client`` is a dependency of the exporter only. The Lambda asset (``lambdas/
requirements.txt``) does not carry it and no handler imports this module
(``tests/unit/test_packaging.py`` checks both).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder

PREFIX = "nodeheal_exporter_"

#: PutEvents latency buckets in seconds. EventBridge answers a batch of ten in tens of
#: milliseconds; the top bucket is the client's read timeout (15 s, ``make_events_client``), past
#: which a call is a timeout error, not a slow success.
PUT_EVENTS_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0)

#: Distinct condition types that get a series of their own; the rest share ``other``. Node
#: conditions in practice: the kubelet's 5, NPD's ~5, the node monitoring agent's ~6, a few more
#: from other detectors.
MAX_CONDITION_TYPES = 32
OTHER = "other"
#: A condition's status is one of these three (core/v1 ConditionStatus); anything else is ``other``.
CONDITION_STATUSES = frozenset({"True", "False", "Unknown"})

#: Outcomes of one PutEvents call, the label of the latency histogram.
PUT_OK = "ok"  # every entry accepted
PUT_PARTIAL = "partial"  # the call succeeded, some entries failed (FailedEntryCount > 0)
PUT_ERROR = "error"  # the call itself failed (throttled, 5xx, network, timeout)


@dataclass(frozen=True, slots=True)
class _Family:
    name: str
    kind: str  # counter | gauge
    help: str
    labels: tuple[str, ...] = ()


FAMILIES: tuple[_Family, ...] = (
    _Family("node_updates_total", "counter", "Node watch events and listed Nodes processed.", ("watcher",)),
    _Family(
        "transitions_total",
        "counter",
        "Condition events emitted, by direction and resync.",
        ("direction", "resync"),
    ),
    _Family(
        "condition_transitions_total",
        "counter",
        "Condition transitions seen on the watch (resyncs excluded), by condition type and new status.",
        ("condition", "status"),
    ),
    _Family(
        "events_published_total", "counter", "Entries EventBridge accepted, by detail type.", ("detail_type",)
    ),
    _Family("publish_failures_total", "counter", "Failed entries and failed calls, by code.", ("code",)),
    _Family(
        "events_dropped_total", "counter", "Events given up, by reason (overflow, rejected).", ("reason",)
    ),
    _Family("queue_depth", "gauge", "Events waiting to be published."),
    _Family("watch_restarts_total", "counter", "Watch streams re-opened, by reason.", ("watcher", "reason")),
    _Family(
        "relists_total",
        "counter",
        "Full lists (start, 410 Gone, becoming consistent again).",
        ("watcher",),
    ),
    _Family("last_api_contact_timestamp_seconds", "gauge", "Unix time of the last answer from the API."),
    _Family("is_leader", "gauge", "1 while this replica ships events."),
    _Family(
        "node_events_seen_total", "counter", "Kubernetes Events about Nodes shipped or skipped.", ("outcome",)
    ),
    _Family(
        "node_events_unattributed_total",
        "counter",
        "Node Events shipped without an instance: no cached Node of that name, or not that Node's (D10).",
    ),
)


class ConditionLabels:
    """Bounded label values for the per-condition counter.

    The first :data:`MAX_CONDITION_TYPES` condition types seen keep their own name; later ones are
    counted under ``other``, so a detector that invents types (or a typo in a test fleet) cannot
    grow the scrape without bound.
    """

    def __init__(self, limit: int = MAX_CONDITION_TYPES) -> None:
        self._limit = limit
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def condition(self, condition_type: str) -> str:
        with self._lock:
            if condition_type in self._known:
                return condition_type
            if len(self._known) < self._limit:
                self._known.add(condition_type)
                return condition_type
        return OTHER

    @staticmethod
    def status(status: str) -> str:
        return status if status in CONDITION_STATUSES else OTHER


class Metrics:
    """The exporter's metrics; every method is thread-safe (``prometheus_client`` locks per series)."""

    PREFIX = PREFIX

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._counters: dict[str, Counter] = {}
        self._gauges: dict[str, Gauge] = {}
        for family in FAMILIES:
            if family.kind == "counter":
                self._counters[family.name] = Counter(
                    PREFIX + family.name, family.help, family.labels, registry=self.registry
                )
            else:
                self._gauges[family.name] = Gauge(
                    PREFIX + family.name, family.help, family.labels, registry=self.registry
                )
        self.put_events_seconds = Histogram(
            PREFIX + "put_events_duration_seconds",
            "Duration of PutEvents calls in seconds, by outcome (ok, partial, error).",
            ("outcome",),
            buckets=PUT_EVENTS_BUCKETS,
            registry=self.registry,
        )
        self._condition_labels = ConditionLabels()
        #: Counter children by (family, *label items); dict reads and writes are atomic under the GIL.
        self._children: dict[tuple[Any, ...], Counter] = {}

    # --- writers -------------------------------------------------------------------------------

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = (name, *labels.items())
        child = self._children.get(key)
        if child is None:
            # labels() validates the names and takes the family's lock; the watch's hot path
            # (node_updates_total, once per Node update) then costs a dict lookup.
            counter = self._counters[name]
            child = counter.labels(**labels) if labels else counter
            self._children[key] = child
        child.inc(amount)

    def set(self, name: str, value: float, **labels: str) -> None:
        gauge = self._gauges[name]
        (gauge.labels(**labels) if labels else gauge).set(value)

    def api_contact(self) -> None:
        self.set("last_api_contact_timestamp_seconds", time.time())

    def condition_transition(self, condition_type: str, status: str) -> None:
        """Count one real transition (not a resync) of ``condition_type`` to ``status``."""
        self.inc(
            "condition_transitions_total",
            condition=self._condition_labels.condition(condition_type),
            status=ConditionLabels.status(status),
        )

    def observe_put_events(self, seconds: float, outcome: str) -> None:
        self.put_events_seconds.labels(outcome=outcome).observe(seconds)

    # --- readers (heartbeats, tests) -----------------------------------------------------------

    def value(self, name: str, **labels: str) -> float:
        """Current value of one series; 0 when it was never touched."""
        sample = PREFIX + name
        value = self.registry.get_sample_value(sample, labels)
        return 0.0 if value is None else value

    def total(self, name: str) -> float:
        """Sum of a family over every label combination."""
        metric = self._counters.get(name) or self._gauges[name]
        sample_name = PREFIX + name
        samples = [sample for family in metric.collect() for sample in family.samples]
        return sum(sample.value for sample in samples if sample.name == sample_name)

    def exposition(self, accept_header: str = "") -> tuple[bytes, str]:
        """The scrape body and its content type, negotiated from the scraper's ``Accept`` header
        (the Prometheus text format by default, OpenMetrics when asked for)."""
        encoder, content_type = choose_encoder(accept_header)
        return encoder(self.registry), content_type

    def render(self) -> str:
        """The Prometheus text format, as ``/metrics`` serves it without an ``Accept`` header."""
        body, _ = self.exposition()
        return body.decode("utf-8")
