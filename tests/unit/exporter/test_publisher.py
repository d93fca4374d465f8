from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import ANY, Stubber
from moto import mock_aws

from nodeheal.events import MAX_ENTRY_BYTES
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.publisher import Backoff, EventPublisher, fit_detail
from nodeheal.exporter.queue import EventQueue, QueuedEvent

BUS = "nodeheal"
SOURCE = "nodeheal.exporter"


def event(node: str, seq: int, *, healthy: bool = False) -> QueuedEvent:
    return QueuedEvent(
        key=node,
        detail_type="Node Condition Changed",
        detail=json.dumps({"node": {"name": node}, "seq": seq}),
        healthy_direction=healthy,
    )


def entry(item: QueuedEvent) -> dict[str, Any]:
    return {"Source": SOURCE, "DetailType": item.detail_type, "Detail": item.detail, "EventBusName": BUS}


def publisher(client: Any, queue: EventQueue, delays: list[float], **kwargs: Any) -> EventPublisher:
    return EventPublisher(
        client,
        event_bus=BUS,
        source=SOURCE,
        queue=queue,
        metrics=kwargs.pop("metrics", Metrics()),
        backoff_initial=0.5,
        backoff_max=4.0,
        sleep=lambda d: delays.append(d) or False,
        **kwargs,
    )


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("events", region_name="us-west-2")
    with Stubber(client) as stubber:
        yield client, stubber
    stubber.assert_no_pending_responses()


def test_partial_failure_retries_only_the_failed_entries(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    batch = [event("a", 1), event("b", 2), event("c", 3)]
    stubber.add_response(
        "put_events",
        {
            "FailedEntryCount": 2,
            "Entries": [
                {"ErrorCode": "ThrottlingException", "ErrorMessage": "slow down"},
                {"EventId": "e-2"},
                {"ErrorCode": "InternalFailure", "ErrorMessage": "oops"},
            ],
        },
        {"Entries": [entry(e) for e in batch]},
    )
    stubber.add_response(
        "put_events",
        {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}, {"EventId": "e-3"}]},
        {"Entries": [entry(batch[0]), entry(batch[2])]},
    )
    delays: list[float] = []
    metrics = Metrics()
    assert publisher(client, EventQueue(10), delays, metrics=metrics).publish(batch) == 3
    assert len(delays) == 1 and 0.25 <= delays[0] <= 0.5
    assert metrics.value("events_published_total", detail_type="Node Condition Changed") == 3
    assert metrics.value("publish_failures_total", code="ThrottlingException") == 1
    assert metrics.value("publish_failures_total", code="InternalFailure") == 1


def test_throttled_call_is_retried_with_growing_jittered_backoff(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    batch = [event("a", 1)]
    for _ in range(3):
        stubber.add_client_error("put_events", "ThrottlingException", "Rate exceeded", 400)
    stubber.add_response(
        "put_events", {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}]}, {"Entries": ANY}
    )
    delays: list[float] = []
    assert publisher(client, EventQueue(10), delays).publish(batch) == 1
    assert len(delays) == 3
    assert 0.25 <= delays[0] <= 0.5 and 0.5 <= delays[1] <= 1.0 and 1.0 <= delays[2] <= 2.0


def test_malformed_entry_is_dropped_not_retried(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    batch = [event("a", 1), event("b", 2)]
    stubber.add_response(
        "put_events",
        {
            "FailedEntryCount": 1,
            "Entries": [{"EventId": "e-1"}, {"ErrorCode": "MalformedDetail", "ErrorMessage": "x"}],
        },
        {"Entries": ANY},
    )
    metrics = Metrics()
    delays: list[float] = []
    assert publisher(client, EventQueue(10), delays, metrics=metrics).publish(batch) == 1
    assert delays == []
    assert metrics.value("events_dropped_total", reason="rejected") == 1


def test_inactive_publisher_hands_over_instead_of_retrying(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_client_error("put_events", "ServiceUnavailable", "down", 503)
    active = [True]
    delays: list[float] = []

    def sleep(delay: float) -> bool:
        delays.append(delay)
        active[0] = False  # lost the Lease while backing off
        return False

    pub = EventPublisher(
        client,
        event_bus=BUS,
        source=SOURCE,
        queue=EventQueue(10),
        metrics=Metrics(),
        is_active=lambda: active[0],
        sleep=sleep,
    )
    assert pub.publish([event("a", 1)]) == 0
    assert len(delays) == 1


def test_backoff_is_capped_and_never_below_half_the_ceiling() -> None:
    backoff = Backoff(0.5, 4.0)
    delays = [backoff.next_delay() for _ in range(10)]
    assert all(2.0 <= d <= 4.0 for d in delays[3:])
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_fit_detail_trims_labels_then_message_but_never_the_decision_fields() -> None:
    detail = {
        "node": {"name": "n", "labels": {f"k{i}": "v" * 1000 for i in range(300)}},
        "condition": {
            "type": "GPUProblem",
            "status": "True",
            "reason": "GPUHardwareError",
            "message": "m" * 300_000,
        },
    }
    text = fit_detail(detail)
    assert len(text.encode()) <= MAX_ENTRY_BYTES
    parsed = json.loads(text)
    assert parsed["node"]["labels"] == {} and parsed["node"]["labelsTrimmed"] is True
    assert (parsed["condition"]["type"], parsed["condition"]["status"], parsed["condition"]["reason"]) == (
        "GPUProblem",
        "True",
        "GPUHardwareError",
    )
    assert parsed["condition"]["message"].startswith("mmm")


class FlakyEvents:
    """moto's EventBridge behind a scripted outage: whole-call failures, then partial failures."""

    def __init__(self, client: Any, *, outage_calls: int, partial_calls: int) -> None:
        self._client = client
        self._outage = outage_calls
        self._partial = partial_calls
        self.calls = 0

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        if self._outage > 0:
            self._outage -= 1
            if self._outage % 2:
                raise EndpointConnectionError(endpoint_url="https://events.us-west-2.amazonaws.com")
            raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, "PutEvents")
        if self._partial > 0 and len(Entries) > 1:
            self._partial -= 1
            # Deliver every other entry; fail the rest as EventBridge does under throttling.
            delivered = self._client.put_events(Entries=Entries[::2])
            results = []
            for index in range(len(Entries)):
                if index % 2 == 0:
                    results.append(delivered["Entries"][index // 2])
                else:
                    results.append({"ErrorCode": "ThrottlingException", "ErrorMessage": "Rate exceeded"})
            return {"FailedEntryCount": len(Entries) // 2, "Entries": results}
        return dict(self._client.put_events(Entries=Entries))


def test_outage_then_recovery_against_moto_loses_nothing_and_keeps_per_node_order() -> None:
    with mock_aws():
        events = boto3.client("events", region_name="us-west-2")
        sqs = boto3.client("sqs", region_name="us-west-2")
        events.create_event_bus(Name=BUS)
        queue_url = sqs.create_queue(QueueName="capture")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        events.put_rule(Name="all", EventBusName=BUS, EventPattern=json.dumps({"source": [SOURCE]}))
        events.put_targets(Rule="all", EventBusName=BUS, Targets=[{"Id": "q", "Arn": queue_arn}])

        flaky = FlakyEvents(events, outage_calls=5, partial_calls=3)
        queue = EventQueue(1000)
        produced = [event(f"node-{n % 4}", n) for n in range(40)]
        for item in produced:
            queue.put(item)
        delays: list[float] = []
        pub = publisher(flaky, queue, delays)
        while batch := queue.take_batch(10, 256 * 1024, timeout=0):
            pub.publish(batch)

        received: list[dict[str, Any]] = []
        while True:
            messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                break
            for message in messages:
                received.append(json.loads(message["Body"])["detail"])
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])

    assert sorted(d["seq"] for d in received) == list(range(40))
    for n in range(4):
        sequence = [d["seq"] for d in received if d["node"]["name"] == f"node-{n}"]
        assert sequence == sorted(sequence)
    assert len(delays) >= 5 + 3
