"""``/metrics`` scraped over HTTP and read with ``prometheus_client``'s own parsers.

The end-to-end test runs the real exporter against the fake API server and moto's EventBridge
(through ``make_events_client``, as the pod does), counts the PutEvents calls botocore really made
with its ``after-call`` hook, and checks the scrape against those counts and the transitions the
fake API server produced.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from nodeheal.events import DETAIL_TYPE_CONDITION_CHANGED
from nodeheal.exporter.app import Exporter, make_events_client
from nodeheal.exporter.metrics import MAX_CONDITION_TYPES, Metrics
from nodeheal.exporter.publisher import EventPublisher
from nodeheal.exporter.queue import EventQueue, QueuedEvent
from nodeheal.sim.apiserver import FakeKubeApiServer
from tests.unit.exporter.conftest import RecordingEvents, exporter_settings, wait_for
from tests.unit.exporter.helpers import node, with_condition

REGION = "us-west-2"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731, name=python3, GPU has fallen off the bus."
HISTOGRAM = "nodeheal_exporter_put_events_duration_seconds"
TRANSITIONS = "nodeheal_exporter_condition_transitions"


def scrape(port: int, accept: str = "") -> tuple[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.read().decode("utf-8"), response.headers["Content-Type"]


def families(text: str) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(family: Metric, name: str, **labels: str) -> float:
    """The value of one sample; fails when the series is missing (absence is not zero here)."""
    matches = [s.value for s in family.samples if s.name == name and s.labels == labels]
    assert len(matches) == 1, f"{name}{labels} in {[(s.name, s.labels) for s in family.samples]}"
    return float(matches[0])


@pytest.fixture
def moto_events() -> Iterator[tuple[Any, list[str]]]:
    """moto's EventBridge with the bus, and the ``FailedEntryCount`` of every PutEvents call botocore made."""
    with mock_aws():
        client = make_events_client(REGION)
        client.create_event_bus(Name="nodeheal")
        calls: list[str] = []
        client.meta.events.register(
            "after-call.events.PutEvents",
            lambda **kwargs: calls.append(str(kwargs["parsed"].get("FailedEntryCount"))),
        )
        yield client, calls


def test_scrape_counts_real_put_events_and_real_transitions(
    server: FakeKubeApiServer, moto_events: tuple[Any, list[str]]
) -> None:
    client, calls = moto_events
    server.store.add(
        node("gpu-a", instance="i-0aaa1234567890aaa"),
        # Bad before the exporter starts: shipped as a resync, which is no transition.
        with_condition(
            node("gpu-b", instance="i-0bbb1234567890bbb"), "GPUProblem", "True", "GPUFellOffBus", XID79
        ),
    )
    exporter = Exporter(exporter_settings(http_port=0, heartbeat_seconds=0), server.api_client(), client)
    exporter.start(serve_http=True)
    try:
        assert exporter.http is not None

        def published() -> float:
            return exporter.metrics.value("events_published_total", detail_type=DETAIL_TYPE_CONDITION_CHANGED)

        wait_for(lambda: published() == 1, what="the resync of gpu-b")
        server.store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUFellOffBus", XID79)
        wait_for(lambda: published() == 2, what="gpu-a going bad")
        server.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "all GPUs are healthy")
        server.store.set_node_condition(
            "gpu-a", "KernelDeadlock", "True", "DockerHung", "task docker blocked"
        )
        server.store.heartbeat("gpu-a")  # a heartbeat changes no condition: nothing to count
        wait_for(lambda: published() == 4, what="gpu-a recovering and deadlocking")

        text, content_type = scrape(exporter.http.port)
    finally:
        exporter.stop()

    assert content_type.startswith("text/plain")
    parsed = families(text)
    histogram = parsed[HISTOGRAM]
    assert histogram.type == "histogram"
    # Every PutEvents call botocore made to moto was timed, and each was accepted whole.
    # One call for the resync, one for gpu-a going bad, one or two for the two changes made together.
    assert 3 <= len(calls) <= 4 and set(calls) == {"0"}
    assert sample(histogram, HISTOGRAM + "_count", outcome="ok") == len(calls)
    assert sample(histogram, HISTOGRAM + "_bucket", outcome="ok", le="+Inf") == len(calls)
    assert sample(histogram, HISTOGRAM + "_sum", outcome="ok") > 0
    # Cumulative buckets never decrease.
    buckets = [s.value for s in histogram.samples if s.name == HISTOGRAM + "_bucket"]
    assert buckets == sorted(buckets)

    transitions = parsed[TRANSITIONS]
    assert transitions.type == "counter"
    assert sample(transitions, TRANSITIONS + "_total", condition="GPUProblem", status="True") == 1
    assert sample(transitions, TRANSITIONS + "_total", condition="GPUProblem", status="False") == 1
    assert sample(transitions, TRANSITIONS + "_total", condition="KernelDeadlock", status="True") == 1
    assert sum(s.value for s in transitions.samples if s.name == TRANSITIONS + "_total") == 3

    # The counters the exporter already kept, now through prometheus_client.
    shipped = parsed["nodeheal_exporter_events_published"]
    assert (
        sample(shipped, "nodeheal_exporter_events_published_total", detail_type=DETAIL_TYPE_CONDITION_CHANGED)
        == 4
    )
    direction = parsed["nodeheal_exporter_transitions"]
    assert sample(direction, "nodeheal_exporter_transitions_total", direction="bad", resync="true") == 1
    assert (
        sample(parsed["nodeheal_exporter_relists"], "nodeheal_exporter_relists_total", watcher="nodes") == 1
    )
    assert sample(parsed["nodeheal_exporter_queue_depth"], "nodeheal_exporter_queue_depth") == 0

    # What the default registry would carry: process, platform and garbage-collector metrics.
    assert sample(parsed["process_cpu_seconds"], "process_cpu_seconds_total") > 0
    assert sample(parsed["process_resident_memory_bytes"], "process_resident_memory_bytes") > 0
    assert {s.labels["generation"] for s in parsed["python_gc_collections"].samples} == {"0", "1", "2"}
    assert "python_info" in parsed


def test_scraper_asking_for_openmetrics_gets_it(server: FakeKubeApiServer) -> None:
    metrics_exporter = Exporter(
        exporter_settings(http_port=0, heartbeat_seconds=0), server.api_client(), RecordingEvents()
    )
    metrics_exporter.start(serve_http=True)
    try:
        assert metrics_exporter.http is not None
        text, content_type = scrape(metrics_exporter.http.port, "application/openmetrics-text; version=1.0.0")
    finally:
        metrics_exporter.stop()
    assert content_type.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n")
    names = {family.name for family in openmetrics_families(text)}
    assert {"nodeheal_exporter_is_leader", "nodeheal_exporter_relists", "process_cpu_seconds"} <= names


def queued(name: str) -> QueuedEvent:
    return QueuedEvent(
        key=name, detail_type=DETAIL_TYPE_CONDITION_CHANGED, detail="{}", healthy_direction=False
    )


def test_histogram_separates_partial_failures_and_failed_calls() -> None:
    client = boto3.client("events", region_name=REGION)
    metrics = Metrics()
    with Stubber(client) as stubber:
        stubber.add_client_error("put_events", "ThrottlingException", "Rate exceeded", 400)
        stubber.add_response(
            "put_events",
            {"FailedEntryCount": 1, "Entries": [{"EventId": "e-1"}, {"ErrorCode": "InternalFailure"}]},
            {"Entries": ANY},
        )
        stubber.add_response(
            "put_events", {"FailedEntryCount": 0, "Entries": [{"EventId": "e-2"}]}, {"Entries": ANY}
        )
        publisher = EventPublisher(
            client,
            event_bus="nodeheal",
            source="nodeheal.exporter.c",
            queue=EventQueue(10),
            metrics=metrics,
            sleep=lambda _delay: False,
        )
        assert publisher.publish([queued("a"), queued("b")]) == 2
    histogram = families(metrics.render())[HISTOGRAM]
    assert [sample(histogram, HISTOGRAM + "_count", outcome=o) for o in ("error", "partial", "ok")] == [
        1,
        1,
        1,
    ]


def test_condition_labels_stay_bounded() -> None:
    metrics = Metrics()
    for index in range(MAX_CONDITION_TYPES + 8):
        metrics.condition_transition(f"VendorCondition{index}", "True")
    metrics.condition_transition("VendorCondition0", "Maybe")
    metrics.condition_transition("VendorCondition0", "False")
    counter = families(metrics.render())[TRANSITIONS]
    values = {
        (s.labels["condition"], s.labels["status"]): s.value
        for s in counter.samples
        if s.name.endswith("_total")
    }
    conditions = {condition for condition, _ in values}
    assert len(conditions) == MAX_CONDITION_TYPES + 1  # the first 32 by name, the rest as "other"
    assert values[("other", "True")] == 8
    assert values[("VendorCondition0", "other")] == 1  # a status that is not True/False/Unknown
    assert values[("VendorCondition0", "False")] == 1


def test_two_exporters_in_one_process_keep_separate_registries() -> None:
    first, second = Metrics(), Metrics()
    first.inc("relists_total", watcher="nodes")
    assert (
        first.value("relists_total", watcher="nodes"),
        second.value("relists_total", watcher="nodes"),
    ) == (1, 0)


def test_an_undeclared_label_is_an_error_not_a_new_series() -> None:
    with pytest.raises(ValueError, match="Incorrect label names"):
        Metrics().inc("relists_total", watcher="nodes", colour="blue")
