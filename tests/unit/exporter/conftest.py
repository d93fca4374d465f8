"""Fixtures for the exporter's integration tests: the fake API server and a recording EventBridge."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodeheal.exporter.app import Exporter
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.sim.apiserver import FakeKubeApiServer
from tests.unit.workflow.fakes import CLUSTER


class RecordingEvents:
    """An EventBridge client that records accepted entries; ``down`` makes every call fail."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.down = False
        self.calls = 0
        self._lock = threading.Lock()

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            if self.down:
                raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, "PutEvents")
            self.entries.extend(Entries)
            return {
                "FailedEntryCount": 0,
                "Entries": [{"EventId": f"e-{len(self.entries)}"} for _ in Entries],
            }

    def details(self, detail_type: str = "Node Condition Changed") -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(e["Detail"]) for e in self.entries if e["DetailType"] == detail_type]


def brief(detail: dict[str, Any]) -> tuple[Any, ...]:
    previous = detail["previous"]
    return (
        detail["node"]["name"],
        detail["condition"]["type"],
        detail["condition"]["status"],
        detail["condition"]["reason"],
        None if previous is None else (previous["status"], previous["reason"]),
        detail["resync"],
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def exporter_settings(**overrides: Any) -> ExporterSettings:
    values: dict[str, Any] = {
        "cluster_name": CLUSTER,
        "watch_timeout_seconds": 30,
        "watch_client_margin_seconds": 2.0,
        "request_timeout_seconds": 5.0,
        "backoff_initial_seconds": 0.05,
        "backoff_max_seconds": 0.2,
        "publish_backoff_initial_seconds": 0.02,
        "publish_backoff_max_seconds": 0.1,
        "liveness_max_api_silence_seconds": 60.0,
        "resync_seconds": 0.0,
        "http_host": "127.0.0.1",
        "http_port": 0,
        "lease_namespace": "nodeheal",
        "lease_duration_seconds": 1.0,
        "renew_deadline_seconds": 0.6,
        "retry_period_seconds": 0.1,
        # On by default; off here so the tests of the Node watch count its requests alone. The
        # tests of Node Events turn it on.
        "ship_node_events": False,
    }
    values.update(overrides)
    return ExporterSettings(**values)


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(bookmark_interval=0.2) as api:
        yield api


@pytest.fixture
def running(server: FakeKubeApiServer) -> Iterator[Callable[..., tuple[Exporter, RecordingEvents]]]:
    started: list[Exporter] = []

    def start(serve_http: bool = False, **overrides: Any) -> tuple[Exporter, RecordingEvents]:
        events = RecordingEvents()
        exporter = Exporter(exporter_settings(**overrides), server.api_client(), events)
        exporter.start(serve_http=serve_http)
        started.append(exporter)
        return exporter, events

    yield start
    for exporter in started:
        exporter.stop()
