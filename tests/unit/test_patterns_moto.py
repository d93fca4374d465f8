"""The pattern engine agrees with moto's rule matching on the same events.

moto's TestEventPattern is a stub, so the comparison goes through the real delivery path: each
pattern is a rule on a custom bus with an SQS target, every event is put on the bus, and what each
queue received is what moto matched. The corpus is NodeHeal's own rule (from cdk.json) with the
events the exporter sends, plus every operator on detail fields.

Known differences, where the engine follows EventBridge's documentation instead of moto (and which
therefore stay out of the corpus): moto does not look inside arrays of objects (EventBridge matches
``{"a": {"b": [1]}}`` against ``{"a": [{"b": 1}]}``), and moto treats an empty object as a present
leaf.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodeheal.cdk.rule_pattern import build_event_pattern
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.patterns import match

ROOT = Path(__file__).resolve().parents[2]
BUS = "pattern-parity"
SOURCE = "nodeheal.exporter"
DETAIL_TYPE = "Node Condition Changed"


def nodeheal_pattern() -> dict[str, Any]:
    context = json.loads((ROOT / "cdk.json").read_text())["context"]["nodeheal"]
    return build_event_pattern(NodeHealConfig.from_cdk_context(context))


def condition_detail(
    ctype: str, status: str, *, cluster: str = "training-on-eks", **node: Any
) -> dict[str, Any]:
    return {
        "schemaVersion": "1",
        "cluster": cluster,
        "node": {"name": "ip-10-0-1-1.us-west-2.compute.internal", "labels": {}, **node},
        "condition": {"type": ctype, "status": status, "reason": "R", "message": "m"},
        "previous": None,
        "observedAt": "2026-11-21T10:00:01.234Z",
        "resync": False,
    }


NODEHEAL_EVENTS = [
    condition_detail("GPUProblem", "True"),
    condition_detail("GPUProblem", "False"),
    condition_detail("GPUUnavailable", "True"),
    condition_detail("AcceleratedHardwareReady", "False"),
    condition_detail("AcceleratedHardwareReady", "True"),
    condition_detail("Ready", "Unknown"),
    condition_detail("Ready", "True"),
    condition_detail("KernelDeadlock", "True"),
    condition_detail("MemoryPressure", "True"),
    condition_detail("GPUProblem", "True", cluster="someone-else"),
    condition_detail("gpuproblem", "True"),
    {"schemaVersion": "1", "cluster": "training-on-eks"},
]

OPERATOR_PATTERNS: list[dict[str, Any]] = [
    {"detail": {"state": [{"prefix": "init"}]}},
    {"detail": {"state": [{"suffix": "ing"}]}},
    {"detail": {"state": [{"equals-ignore-case": "RUNNING"}]}},
    {"detail": {"state": [{"prefix": {"equals-ignore-case": "RUN"}}]}},
    {"detail": {"state": [{"anything-but": "initializing"}]}},
    {"detail": {"state": [{"anything-but": ["stopped", "overloaded"]}]}},
    {"detail": {"state": [{"anything-but": {"prefix": "init"}}]}},
    {"detail": {"count": [{"anything-but": [100, 200]}]}},
    {"detail": {"count": [{"numeric": [">", 0, "<=", 5]}]}},
    {"detail": {"count": [{"numeric": ["=", 3.018e2]}]}},
    {"detail": {"count": [{"exists": True}]}},
    {"detail": {"count": [{"exists": False}]}},
    {"detail": {"ip": [{"cidr": "10.0.0.0/24"}]}},
    {"detail": {"path": [{"wildcard": "dir/*.png"}]}},
    {"detail": {"tags": ["gpu", "a100"]}},
    {"detail": {"empty": [""]}},
    {"detail": {"nothing": [None]}},
    {"detail": {"$or": [{"state": ["running"]}, {"count": [{"numeric": ["<", 10]}]}]}},
]

OPERATOR_EVENTS: list[dict[str, Any]] = [
    {"state": "initializing", "count": 3, "ip": "10.0.0.12", "path": "dir/a/b.png", "tags": ["cpu", "gpu"]},
    {"state": "running", "count": 301.8, "ip": "10.0.1.12", "path": "dir/b.jpg", "tags": ["cpu"]},
    {"state": "Running", "count": 100, "empty": "", "nothing": None},
    {"state": "stopped", "count": "3", "empty": None, "nothing": ""},
    {"state": "overloaded", "ip": "not-an-ip", "tags": []},
    {"other": True},
]


@pytest.fixture
def bus() -> Iterator[tuple[Any, Any]]:
    with mock_aws():
        events = boto3.client("events", region_name="us-west-2")
        sqs = boto3.client("sqs", region_name="us-west-2")
        events.create_event_bus(Name=BUS)
        yield events, sqs


def moto_matches(
    events: Any, sqs: Any, patterns: list[dict[str, Any]], details: list[dict[str, Any]]
) -> list[list[bool]]:
    """[pattern][event] -> whether moto delivered the event to the pattern's rule target."""
    queues = []
    for index, pattern in enumerate(patterns):
        url = sqs.create_queue(QueueName=f"rule-{index}")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name=f"rule-{index}", EventBusName=BUS, EventPattern=json.dumps(pattern))
        events.put_targets(Rule=f"rule-{index}", EventBusName=BUS, Targets=[{"Id": "q", "Arn": arn}])
        queues.append(url)
    for index, detail in enumerate(details):
        response = events.put_events(
            Entries=[
                {
                    "EventBusName": BUS,
                    "Source": SOURCE,
                    "DetailType": DETAIL_TYPE,
                    "Detail": json.dumps({**detail, "probe": index}),
                }
            ]
        )
        assert response["FailedEntryCount"] == 0
    table = []
    for url in queues:
        received: set[int] = set()
        while True:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                break
            for message in messages:
                received.add(json.loads(message["Body"])["detail"]["probe"])
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        table.append([index in received for index in range(len(details))])
    return table


def engine_matches(patterns: list[dict[str, Any]], details: list[dict[str, Any]]) -> list[list[bool]]:
    envelopes = [
        {
            "version": "0",
            "id": "x",
            "detail-type": DETAIL_TYPE,
            "source": SOURCE,
            "account": "123456789012",
            "time": "2026-11-21T10:00:01Z",
            "region": "us-west-2",
            "resources": [],
            "detail": {**detail, "probe": index},
        }
        for index, detail in enumerate(details)
    ]
    return [[match(pattern, envelope).matched for envelope in envelopes] for pattern in patterns]


def test_nodeheal_rule_matches_like_moto(bus: tuple[Any, Any]) -> None:
    pattern = nodeheal_pattern()
    expected = moto_matches(*bus, [pattern], NODEHEAL_EVENTS)
    assert engine_matches([pattern], NODEHEAL_EVENTS) == expected
    # The corpus exercises both answers: bad transitions match, healthy and foreign ones do not.
    assert expected[0][:4] == [True, False, True, True]
    assert not expected[0][9] and not expected[0][10]


def test_operators_match_like_moto(bus: tuple[Any, Any]) -> None:
    expected = moto_matches(*bus, OPERATOR_PATTERNS, OPERATOR_EVENTS)
    actual = engine_matches(OPERATOR_PATTERNS, OPERATOR_EVENTS)
    disagreements = [
        (OPERATOR_PATTERNS[p], OPERATOR_EVENTS[e], expected[p][e])
        for p in range(len(OPERATOR_PATTERNS))
        for e in range(len(OPERATOR_EVENTS))
        if expected[p][e] != actual[p][e]
    ]
    assert disagreements == []
    assert any(any(row) for row in expected) and not all(all(row) for row in expected)
