"""EventBridge misbehaving under the exporter's publisher: failed entries, throttled calls, lost answers.

10,000 transitions go through the real queue and publisher into a bus that fails 20% of entries
(``FailedEntryCount`` > 0 with per-entry error codes), throttles 5% of calls, and loses the answer
to 1% of calls it did accept (a timeout after the write, so the publisher sends those entries
again). Downstream, ingest's deterministic execution name is the deduplication: every transition
must arrive, and arrive as exactly one execution.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError

from nodeheal.conditions import Condition
from nodeheal.events import DETAIL_TYPE_CONDITION_CHANGED, NodeConditionEvent, NodeIdentity
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.publisher import EventPublisher
from nodeheal.exporter.queue import EventQueue, QueuedEvent
from nodeheal.workflow.ingest import execution_name

TRANSITIONS = 10_000
NODES = 500


class FlakyBus:
    """PutEvents with injected failures; ``delivered`` is what reached the bus's rule targets."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)
        self.delivered: list[str] = []
        self.calls = 0
        self.throttled_calls = 0
        self.failed_entries = 0
        self.lost_answers = 0

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        assert len(Entries) <= 10
        if self._random.random() < 0.05:
            self.throttled_calls += 1
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "PutEvents"
            )
        results: list[dict[str, Any]] = []
        for entry in Entries:
            if self._random.random() < 0.20:
                self.failed_entries += 1
                code = self._random.choice(["InternalFailure", "ThrottlingException"])
                results.append({"ErrorCode": code, "ErrorMessage": "injected"})
            else:
                self.delivered.append(entry["Detail"])
                results.append({"EventId": f"e-{len(self.delivered)}"})
        if self._random.random() < 0.01:
            # Accepted, but the answer never reached the exporter: it must send these again.
            self.lost_answers += 1
            raise ReadTimeoutError(endpoint_url="https://events.us-west-2.amazonaws.com")
        failed = sum(1 for r in results if "ErrorCode" in r)
        return {"FailedEntryCount": failed, "Entries": results}


def _transition(index: int) -> QueuedEvent:
    node = f"ip-10-0-{index % NODES // 250}-{index % 250}.us-west-2.compute.internal"
    flip = index // NODES
    bad = flip % 2 == 0
    event = NodeConditionEvent(
        cluster="training-on-eks",
        node=NodeIdentity(name=node, uid=f"uid-{index % NODES}", instance_id=f"i-{index % NODES:017x}"),
        condition=Condition(
            type="GPUProblem",
            status="True" if bad else "False",
            reason="GPUHardwareError" if bad else "GPUHealthy",
            message="NVRM: Xid 79" if bad else "healthy",
            last_transition_time=datetime(2026, 11, 21, 10, tzinfo=UTC) + timedelta(seconds=flip),
        ),
        observed_at=datetime(2026, 11, 21, 10, tzinfo=UTC) + timedelta(seconds=flip, milliseconds=5),
    )
    return QueuedEvent(
        key=node, detail_type=DETAIL_TYPE_CONDITION_CHANGED, detail=event.to_json(), healthy_direction=not bad
    )


def test_every_transition_arrives_exactly_once_after_dedup() -> None:
    bus = FlakyBus(seed=20261121)
    metrics = Metrics()
    queue = EventQueue(capacity=TRANSITIONS)
    sleeps: list[float] = []
    publisher = EventPublisher(
        bus,
        event_bus="nodeheal",
        source="nodeheal.exporter",
        queue=queue,
        metrics=metrics,
        sleep=lambda seconds: sleeps.append(seconds) is not None,
        rng=random.Random(7),
    )
    sent = [_transition(index) for index in range(TRANSITIONS)]
    for item in sent:
        queue.put(item)

    while len(queue):
        publisher.publish(queue.take_batch(10, 256 * 1024, timeout=0))

    # The injected faults did happen, at about the configured rates.
    assert 0.15 < bus.failed_entries / (bus.failed_entries + len(bus.delivered)) < 0.25
    assert bus.throttled_calls > 0 and bus.lost_answers > 0
    # Retries are paced: every retry slept, and within the configured backoff ceiling.
    assert sleeps and max(sleeps) <= 30.0

    # Downstream: ingest names the execution deterministically, so a re-sent entry collapses.
    names = Counter(
        execution_name(NodeConditionEvent.from_detail(json.loads(detail))) for detail in bus.delivered
    )
    expected = {execution_name(NodeConditionEvent.from_detail(json.loads(item.detail))) for item in sent}
    assert set(names) == expected, "a transition was lost"
    assert len(expected) == TRANSITIONS
    duplicates = sum(count - 1 for count in names.values())
    # Only the lost answers produce duplicates, and each one at most a batch of 10.
    assert 0 < duplicates <= 10 * bus.lost_answers
    assert len(bus.delivered) == TRANSITIONS + duplicates


def test_order_per_node_survives_retries() -> None:
    """A node's transitions reach the bus in the order observed, even when single entries fail."""
    bus = FlakyBus(seed=11)
    queue = EventQueue(capacity=TRANSITIONS)
    publisher = EventPublisher(
        bus,
        event_bus="nodeheal",
        source="nodeheal.exporter",
        queue=queue,
        metrics=Metrics(),
        sleep=lambda seconds: False,
        rng=random.Random(3),
    )
    for index in range(2_000):
        queue.put(_transition(index))
    while len(queue):
        publisher.publish(queue.take_batch(10, 256 * 1024, timeout=0))
    last_seen: dict[str, str] = {}
    for detail in bus.delivered:
        parsed = json.loads(detail)
        node, at = parsed["node"]["name"], parsed["condition"]["lastTransitionTime"]
        assert at >= last_seen.get(node, ""), f"{node} went back in time"
        last_seen[node] = at
