"""Contract 1.1 (and "1" until 0.2.0): what the exporter sends and ingest accepts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeheal.errors import InvalidEventError
from nodeheal.events import NodeConditionEvent, instance_id_from_provider_id, unwrap_eventbridge_envelope

DESIGN_EXAMPLE: dict[str, Any] = {
    "schemaVersion": "1.1",
    "cluster": "training-on-eks",
    "node": {
        "name": "ip-10-0-158-235.us-west-2.compute.internal",
        "uid": "5b0c8f0e-7a53-4c1b-a0a8-0d2c1f9e7a11",
        "providerID": "aws:///us-west-2b/i-0abc1234def567890",
        "instanceID": "i-0abc1234def567890",
        "instanceType": "p5.48xlarge",
        "zone": "us-west-2b",
        "nodePool": "gpu",
        "capacityType": "on-demand",
        "labels": {"karpenter.sh/nodepool": "gpu"},
    },
    "condition": {
        "type": "GPUProblem",
        "status": "True",
        "reason": "GPUHardwareError",
        "message": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
        "lastTransitionTime": "2026-11-21T10:00:00Z",
    },
    "previous": {"status": "False", "reason": "GPUHealthy"},
    "observedAt": "2026-11-21T10:00:01.234Z",
    "resync": False,
}


def without(path: str) -> dict[str, Any]:
    detail = json.loads(json.dumps(DESIGN_EXAMPLE))
    *parents, leaf = path.split(".")
    target = detail
    for key in parents:
        target = target[key]
    del target[leaf]
    return detail


def test_the_design_example_parses_and_round_trips() -> None:
    event = NodeConditionEvent.from_detail(DESIGN_EXAMPLE)
    assert event.is_bad
    assert event.condition.last_transition_time == datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
    assert event.observed_at.microsecond == 234_000
    assert event.previous is not None and event.previous.reason == "GPUHealthy"
    assert NodeConditionEvent.from_detail(event.to_detail()) == event
    assert NodeConditionEvent.from_detail(event.to_json()) == event


def test_unknown_fields_are_ignored() -> None:
    detail = {**DESIGN_EXAMPLE, "futureField": {"x": 1}, "node": {**DESIGN_EXAMPLE["node"], "rack": "r12"}}
    assert NodeConditionEvent.from_detail(detail).node.name.startswith("ip-10-0-158-235")


def test_previous_may_be_null_on_a_resync() -> None:
    event = NodeConditionEvent.from_detail({**DESIGN_EXAMPLE, "previous": None, "resync": True})
    assert event.previous is None and event.resync


def test_instance_id_is_derived_from_the_provider_id_when_absent() -> None:
    event = NodeConditionEvent.from_detail(without("node.instanceID"))
    assert event.node.instance_id == "i-0abc1234def567890"
    assert instance_id_from_provider_id("kind://docker/kind/kind-worker") is None


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("cluster", "cluster is required"),
        ("node", "node must be an object"),
        ("node.name", "node.name is required"),
        ("node.uid", "node.uid is required"),
        ("condition", "condition is required"),
        ("condition.type", "condition.type must be a non-empty string"),
        ("condition.status", "condition.status must be one of True, False, Unknown"),
        ("observedAt", "observedAt must be an RFC 3339 timestamp"),
        ("schemaVersion", "unsupported schemaVersion"),
    ],
)
def test_missing_required_fields_are_named(path: str, message: str) -> None:
    with pytest.raises(InvalidEventError, match=message):
        NodeConditionEvent.from_detail(without(path))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"observedAt": "2026-11-21T10:00:01"}, "time zone"),
        ({"resync": "yes"}, "resync must be a boolean"),
        ({"previous": {"reason": "x"}}, "previous must be null or an object"),
        ({"node": {**DESIGN_EXAMPLE["node"], "labels": {"a": 1}}}, "node.labels"),
        ({"condition": {**DESIGN_EXAMPLE["condition"], "lastTransitionTime": "soon"}}, "lastTransitionTime"),
    ],
)
def test_mistyped_fields_are_rejected(override: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidEventError, match=message):
        NodeConditionEvent.from_detail({**DESIGN_EXAMPLE, **override})


@pytest.mark.parametrize("payload", ["{not json", "[]", "42", b"\xff\xfe"])
def test_non_objects_are_rejected(payload: str | bytes) -> None:
    with pytest.raises(InvalidEventError):
        NodeConditionEvent.from_detail(payload)


def test_the_eventbridge_envelope_is_unwrapped() -> None:
    envelope = {
        "detail-type": "Node Condition Changed",
        "source": "nodeheal.exporter",
        "detail": DESIGN_EXAMPLE,
    }
    assert unwrap_eventbridge_envelope(envelope) is DESIGN_EXAMPLE
    assert unwrap_eventbridge_envelope(DESIGN_EXAMPLE) is DESIGN_EXAMPLE


def test_defect_9_contract_1_is_parsed_without_a_uid_and_1_1_is_what_the_exporter_sends() -> None:
    legacy = json.loads(json.dumps(DESIGN_EXAMPLE))
    legacy["schemaVersion"] = "1"
    del legacy["node"]["uid"]
    event = NodeConditionEvent.from_detail(legacy)
    assert event.is_legacy and event.node.uid == "" and event.to_detail()["schemaVersion"] == "1"
    current = NodeConditionEvent.from_detail(DESIGN_EXAMPLE)
    assert not current.is_legacy and current.to_detail()["schemaVersion"] == "1.1"
