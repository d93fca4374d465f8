"""Prometheus metrics in the text exposition format, without a client library.

A dozen counters and gauges do not justify a dependency in an image whose size and CVE surface
we care about; the format is a few lines of text (``# HELP``, ``# TYPE``, ``name{labels} value``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

_LabelKey = tuple[tuple[str, str], ...]


@dataclass
class _Family:
    name: str
    kind: str  # counter | gauge
    help: str
    values: dict[_LabelKey, float] = field(default_factory=dict)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """The exporter's metrics; every method is thread-safe."""

    PREFIX = "nodeheal_exporter_"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        for name, kind, text in (
            ("node_updates_total", "counter", "Node watch events and listed Nodes processed."),
            ("transitions_total", "counter", "Condition transitions emitted, by direction and resync."),
            ("events_published_total", "counter", "Entries EventBridge accepted, by detail type."),
            (
                "publish_failures_total",
                "counter",
                "Failed entries and failed calls, by code.",
            ),
            ("events_dropped_total", "counter", "Events given up, by reason (overflow, rejected)."),
            ("queue_depth", "gauge", "Events waiting to be published."),
            ("watch_restarts_total", "counter", "Watch streams re-opened, by reason."),
            ("relists_total", "counter", "Full lists (start, 410 Gone, becoming consistent again)."),
            ("last_api_contact_timestamp_seconds", "gauge", "Unix time of the last answer from the API."),
            ("is_leader", "gauge", "1 while this replica ships events."),
            ("node_events_seen_total", "counter", "Kubernetes Events about Nodes shipped or skipped."),
        ):
            self._families[name] = _Family(self.PREFIX + name, kind, text)

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            values = self._families[name].values
            values[key] = values.get(key, 0.0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._families[name].values[key] = value

    def value(self, name: str, **labels: str) -> float:
        key = tuple(sorted(labels.items()))
        with self._lock:
            return self._families[name].values.get(key, 0.0)

    def total(self, name: str) -> float:
        with self._lock:
            return sum(self._families[name].values.values())

    def api_contact(self) -> None:
        self.set("last_api_contact_timestamp_seconds", time.time())

    def snapshot(self) -> Mapping[str, Mapping[_LabelKey, float]]:
        with self._lock:
            return {name: dict(family.values) for name, family in self._families.items()}

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for family in self._families.values():
                lines.append(f"# HELP {family.name} {family.help}")
                lines.append(f"# TYPE {family.name} {family.kind}")
                values = family.values or {(): 0.0}
                for key, value in sorted(values.items()):
                    label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
                    suffix = "{" + label_text + "}" if label_text else ""
                    lines.append(f"{family.name}{suffix} {value:g}")
        return "\n".join(lines) + "\n"
