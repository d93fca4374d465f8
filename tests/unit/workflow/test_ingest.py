from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeheal.errors import DuplicateExecutionError
from nodeheal.events import NodeConditionEvent
from nodeheal.workflow.ingest import IngestSettings, execution_name, ingest
from nodeheal.workflow.records import DroppedEvent

NOW = datetime(2026, 11, 21, 10, 0, 5, tzinfo=UTC)
SETTINGS = IngestSettings(
    clusters=frozenset({"training-on-eks"}),
    stale_after=timedelta(minutes=15),
    event_source="nodeheal.exporter",
)


def detail(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schemaVersion": "1.1",
        "cluster": "training-on-eks",
        "node": {
            "name": "ip-10-0-158-235.us-west-2.compute.internal",
            "uid": "4c1b6a0e-1f0e-4c55-9f2b-0b9f1f7c2a11",
            "providerID": "aws:///us-west-2b/i-0abc1234def567890",
            "instanceType": "p5.48xlarge",
            "zone": "us-west-2b",
            "nodePool": "gpu",
            "labels": {"karpenter.sh/nodepool": "gpu"},
        },
        "condition": {
            "type": "GPUProblem",
            "status": "True",
            "reason": "GPUHardwareError",
            "message": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
            "lastTransitionTime": "2026-11-21T10:00:00Z",
        },
        "previous": {"status": "False", "reason": "GPUHealthy"},
        "observedAt": "2026-11-21T10:00:01.234Z",
        "resync": False,
    }
    base.update(overrides)
    return base


def envelope(body: Any, **overrides: Any) -> dict[str, Any]:
    """As EventBridge delivers it; by default sent by the exporter of the detail's own cluster."""
    cluster = body.get("cluster", "training-on-eks") if isinstance(body, dict) else "training-on-eks"
    event = {
        "version": "0",
        "id": "0d4f8b1c-ab14-4b63-8a8e-2c3c0b8a3c01",
        "detail-type": "Node Condition Changed",
        "source": f"nodeheal.exporter.{cluster}",
        "account": "123456789012",
        "time": "2026-11-21T10:00:01Z",
        "region": "us-west-2",
        "resources": [],
        "detail": body,
    }
    event.update(overrides)
    return event


class RecordingStarter:
    def __init__(self) -> None:
        self.started: dict[str, Mapping[str, Any]] = {}

    def start(self, name: str, payload: Mapping[str, Any]) -> str:
        if name in self.started:
            raise DuplicateExecutionError(name)
        self.started[name] = payload
        return f"arn:aws:states:us-west-2:123456789012:execution:nodeheal:{name}"


class DropLedger:
    def __init__(self) -> None:
        self.dropped: list[DroppedEvent] = []

    def put_dropped_event(self, dropped: DroppedEvent) -> None:
        self.dropped.append(dropped)


def run(payload: Any) -> tuple[dict[str, str], RecordingStarter, DropLedger]:
    starter, ledger = RecordingStarter(), DropLedger()
    result = ingest(payload, settings=SETTINGS, starter=starter, ledger=ledger, now=NOW)  # type: ignore[arg-type]
    return result.to_json(), starter, ledger


def test_starts_a_readable_deterministic_execution() -> None:
    result, starter, ledger = run(envelope(detail()))
    assert result["status"] == "started"
    assert re.fullmatch(
        r"training-on-eks-ip-10-0-158-235-GPUProblem-20261121T100000Z-[0-9a-f]{12}", result["execution"]
    )
    assert result["warning"] == ""
    payload = starter.started[result["execution"]]
    assert payload["eventId"] == "0d4f8b1c-ab14-4b63-8a8e-2c3c0b8a3c01"
    assert payload["event"]["node"]["instanceID"] == "i-0abc1234def567890"
    assert ledger.dropped == []


def test_the_same_transition_collapses_onto_one_execution() -> None:
    starter, ledger = RecordingStarter(), DropLedger()
    first = ingest(envelope(detail()), settings=SETTINGS, starter=starter, ledger=ledger, now=NOW)  # type: ignore[arg-type]
    resync = envelope(detail(resync=True, previous=None, observedAt="2026-11-21T10:00:04Z"), id="other-id")
    second = ingest(resync, settings=SETTINGS, starter=starter, ledger=ledger, now=NOW)  # type: ignore[arg-type]
    assert first.status == "started" and second.status == "duplicate"
    assert second.execution == first.execution


@pytest.mark.parametrize(
    ("body", "category", "fragment"),
    [
        (detail(cluster="someone-else"), "foreign-cluster", "not one of this deployment's"),
        (detail(observedAt="2026-11-21T09:30:00Z"), "stale", "older than the 900s bound"),
        # Found by the seeded simulation: a future-dated event got a name of its own and acted.
        (detail(observedAt="2026-11-22T10:00:00Z"), "future-dated", "ahead of this clock"),
        (
            detail(
                condition={
                    "type": "GPUProblem",
                    "status": "True",
                    "reason": "GPUHardwareError",
                    "lastTransitionTime": "2026-11-21T11:00:00Z",
                }
            ),
            "future-dated",
            "3595s ahead of this clock",
        ),
        (
            detail(condition={"type": "GPUProblem", "status": "False", "reason": "GPUHealthy"}),
            "not-bad",
            "healthy direction",
        ),
        (detail(schemaVersion="2"), "malformed", "unsupported schemaVersion"),
        ({k: v for k, v in detail().items() if k != "cluster"}, "malformed", "cluster is required"),
        (detail(observedAt="yesterday"), "malformed", "observedAt is not an RFC 3339 timestamp"),
        (detail(condition={"type": "GPUProblem", "status": "maybe"}), "malformed", "condition.status"),
    ],
)
def test_drops_are_recorded_with_a_reason(body: Any, category: str, fragment: str) -> None:
    result, starter, ledger = run(envelope(body))
    assert result["status"] == "dropped" and result["category"] == category
    assert fragment in result["reason"]
    assert starter.started == {}
    assert [d.category for d in ledger.dropped] == [category]
    assert ledger.dropped[0].excerpt  # the event itself is kept for the person asking "why?"


@pytest.mark.parametrize(
    "payload",
    [
        None,
        "text",
        [],
        {"detail-type": "Node Condition Changed"},
        envelope(detail(), **{"detail-type": "Something Else"}),
        envelope("{not json"),
    ],
)
def test_garbage_is_rejected_not_raised(payload: Any) -> None:
    result, starter, ledger = run(payload)
    assert result["status"] == "dropped" and result["category"] == "malformed"
    assert starter.started == {} and len(ledger.dropped) == 1


def test_execution_names_are_legal_and_bounded() -> None:
    long = detail(
        cluster="c" * 100,
        node={**detail()["node"], "name": "n" * 253},
        condition={**detail()["condition"], "type": "VeryLongVendorSpecificConditionType" * 3},
    )
    name = execution_name(NodeConditionEvent.from_detail(long))
    assert len(name) <= 80
    assert re.fullmatch(r"[A-Za-z0-9_-]+", name)
    other = execution_name(
        NodeConditionEvent.from_detail({**long, "node": {**long["node"], "name": "m" * 253}})
    )
    assert other != name


def test_defect_9_execution_names_follow_the_whole_transition() -> None:
    def name(**changes: Any) -> str:
        body = detail(**changes)
        return execution_name(NodeConditionEvent.from_detail(body))

    base = name()
    # Every delivery of the same transition (a resync observed later, a replay) gets the same name.
    assert name(resync=True, previous=None, observedAt="2026-11-21T10:03:00Z") == base
    assert name() == base
    # Transitions differing only in the node object, the status or the reason never share one.
    assert name(node={**detail()["node"], "uid": "another-uid"}) != base
    assert name(condition={**detail()["condition"], "reason": "NvidiaXidError"}) != base
    assert name(condition={**detail()["condition"], "status": "Unknown"}) != base


@pytest.mark.parametrize(
    ("source", "body", "category", "fragment"),
    [
        # Cluster A's exporter speaking for cluster B (IAM refuses it; ingest refuses it too).
        ("nodeheal.exporter.inference-eks", detail(), "forged", "speaks for cluster 'inference-eks'"),
        # A 1.1 event behind the legacy source, which every exporter role may still use.
        ("nodeheal.exporter", detail(), "forged", "legacy source"),
        ("someone.else", detail(), "foreign-source", "neither 'nodeheal.exporter.training-on-eks'"),
        ("nodeheal.exporterx.training-on-eks", detail(), "foreign-source", "neither"),
    ],
)
def test_defect_9_a_source_that_does_not_speak_for_the_cluster_is_dropped(
    source: str, body: dict[str, Any], category: str, fragment: str
) -> None:
    result, starter, ledger = run(envelope(body, source=source))
    assert result["status"] == "dropped" and result["category"] == category
    assert fragment in result["reason"]
    assert starter.started == {}
    assert [(d.category, d.cluster) for d in ledger.dropped] == [(category, "training-on-eks")]


def test_defect_9_node_uid_is_required_in_contract_1_1() -> None:
    body = detail(node={k: v for k, v in detail()["node"].items() if k != "uid"})
    result, starter, ledger = run(envelope(body))
    assert result["category"] == "malformed" and "node.uid is required" in result["reason"]
    assert starter.started == {} and [d.category for d in ledger.dropped] == ["malformed"]


def test_defect_9_contract_1_from_the_legacy_source_is_accepted_with_a_warning() -> None:
    legacy = detail(schemaVersion="1", node={k: v for k, v in detail()["node"].items() if k != "uid"})
    result, starter, ledger = run(envelope(legacy, source="nodeheal.exporter"))
    assert result["status"] == "started" and ledger.dropped == []
    assert "contract '1'" in result["warning"] and "upgrade its exporter" in result["warning"]
    # Without a uid the workflow binds to the live node's uid at admit.
    assert starter.started[result["execution"]]["event"]["node"]["uid"] == ""
    # An upgraded exporter's own source is fine for a "1" event too (IAM proved the cluster).
    result, _, _ = run(envelope(detail(schemaVersion="1")))
    assert result["status"] == "started" and result["warning"]
