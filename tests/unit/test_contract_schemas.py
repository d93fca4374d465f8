"""The event contract's JSON Schemas (nodeheal/contracts) against the code that produces and parses
events: what the exporter sends meets them, what they accept the parser accepts, and what they
refuse names every problem. The Node Event schema is held against the exporter's real output
(its shipper, fed Events as the API server serves them)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft4Validator

from nodeheal import contracts
from nodeheal.conditions import Condition
from nodeheal.errors import InvalidEventError
from nodeheal.events import (
    DETAIL_TYPE_CONDITION_CHANGED,
    DETAIL_TYPE_NODE_EVENT,
    ExporterHeartbeat,
    NodeConditionEvent,
    NodeIdentity,
    PreviousState,
)
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.node_events import NodeEventShipper
from nodeheal.exporter.queue import QueuedEvent
from nodeheal.exporter.transitions import CachedNode
from nodeheal.payload import bounded_condition

V11 = contracts.CONDITION_CHANGED_SCHEMAS["1.1"]
V1 = contracts.CONDITION_CHANGED_SCHEMAS["1"]

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda text: text.strip() != ""
)
times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


def a_detail(**overrides: Any) -> dict[str, Any]:
    event = NodeConditionEvent(
        cluster="training-on-eks",
        node=NodeIdentity(
            name="ip-10-0-1-23.us-west-2.compute.internal",
            uid="5f0c1f3e-8a51-4a8e-9d59-3f6a0e1e2b7c",
            provider_id="aws:///us-west-2b/i-0123456789abcdef0",
            instance_id="i-0123456789abcdef0",
            instance_type="p5.48xlarge",
            zone="us-west-2b",
            node_pool="gpu",
            capacity_type="on-demand",
            labels={"karpenter.sh/nodepool": "gpu"},
        ),
        condition=Condition(
            type="GPUProblem",
            status="True",
            reason="NvidiaXID79",
            message="NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus.",
            last_transition_time=datetime(2026, 11, 21, 10, 0, tzinfo=UTC),
        ),
        observed_at=datetime(2026, 11, 21, 10, 0, 1, 250000, tzinfo=UTC),
        previous=PreviousState(status="False", reason="NoGPUProblem"),
    )
    return {**event.to_detail(), **overrides}


@pytest.mark.parametrize("name", contracts.ALL_SCHEMAS)
def test_every_schema_is_valid_draft_4_with_a_title_and_description(name: str) -> None:
    schema = contracts.load(name)
    Draft4Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-04/schema#"
    assert schema["title"] and schema["description"]


@settings(max_examples=150, deadline=None)
@given(
    cluster=names,
    node=names,
    uid=names,
    condition_type=names,
    status=st.sampled_from(["True", "False", "Unknown"]),
    reason=st.text(max_size=60),
    message=st.text(max_size=300),
    transition=st.none() | times,
    observed=times,
    previous=st.none()
    | st.builds(PreviousState, status=st.sampled_from(["True", "False"]), reason=st.text(max_size=20)),
    resync=st.booleans(),
)
def test_what_the_exporter_sends_meets_contract_1_1(
    cluster: str,
    node: str,
    uid: str,
    condition_type: str,
    status: str,
    reason: str,
    message: str,
    transition: datetime | None,
    observed: datetime,
    previous: PreviousState | None,
    resync: bool,
) -> None:
    event = NodeConditionEvent(
        cluster=cluster,
        node=NodeIdentity(name=node, uid=uid),
        condition=bounded_condition(Condition(condition_type, status, reason, message, transition)),
        observed_at=observed,
        previous=previous,
        resync=resync,
    )
    detail = json.loads(event.to_json())
    assert contracts.violations(V11, detail) == []
    assert NodeConditionEvent.from_detail(detail).node.uid == uid


def test_a_heartbeat_meets_its_schema() -> None:
    heartbeat = ExporterHeartbeat(
        cluster="training-on-eks",
        identity="nodeheal-exporter-7d9f-abcde",
        sent_at=datetime(2026, 11, 21, 10, 0, tzinfo=UTC),
        interval_seconds=60.0,
        queue_depth=3,
        published=12,
        publish_failures=1,
        dropped=0,
    )
    detail = heartbeat.to_detail()
    assert contracts.violations(contracts.HEARTBEAT_SCHEMA, detail) == []
    detail["sincePrevious"]["dropped"] = -1
    assert contracts.violations(contracts.HEARTBEAT_SCHEMA, detail) == [
        "detail.sincePrevious.dropped: -1 is less than the minimum of 0"
    ]
    with pytest.raises(InvalidEventError):
        ExporterHeartbeat.from_detail(detail)


#: Breakages the parser refuses; the schema must refuse each too.
BREAKAGES: list[tuple[str, Any]] = [
    ("schemaVersion", "2"),
    ("cluster", ""),
    ("cluster", 7),
    ("cluster", "x" * 318),
    ("node", "ip-10-0-1-23"),
    ("node.name", ""),
    ("node.uid", None),
    ("node.labels", {"a": 1}),
    ("node.providerID", 5),
    ("condition", None),
    ("condition.type", ""),
    ("condition.status", "Yes"),
    ("condition.reason", 3),
    ("condition.lastTransitionTime", "yesterday"),
    ("condition.lastTransitionTime", "2026-11-21T10:00:00"),
    ("previous", "False"),
    ("previous.status", 1),
    ("observedAt", "2026-11-21 10:00"),
    ("observedAt", None),
    ("resync", "yes"),
]


@pytest.mark.parametrize(("field", "value"), BREAKAGES, ids=[f"{f}={v!r}"[:40] for f, v in BREAKAGES])
def test_a_breakage_the_parser_refuses_the_schema_refuses(field: str, value: Any) -> None:
    detail = a_detail()
    container = detail
    *parents, key = field.split(".")
    for parent in parents:
        container = container[parent]
    container[key] = value
    with pytest.raises(InvalidEventError):
        NodeConditionEvent.from_detail(detail)
    assert contracts.violations(V11, detail), f"the schema accepts {field}={value!r}"


@pytest.mark.parametrize(
    "required",
    [
        "schemaVersion",
        "cluster",
        "node",
        "condition",
        "observedAt",
        "node.name",
        "node.uid",
        "condition.type",
        "condition.status",
    ],
)
def test_a_missing_required_field_is_refused_by_both(required: str) -> None:
    detail = a_detail()
    container = detail
    *parents, key = required.split(".")
    for parent in parents:
        container = container[parent]
    del container[key]
    with pytest.raises(InvalidEventError):
        NodeConditionEvent.from_detail(detail)
    assert any(key in problem for problem in contracts.violations(V11, detail))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=10), children, max_size=3),
    max_leaves=8,
)
FIELDS = [
    "schemaVersion",
    "cluster",
    "node",
    "node.name",
    "node.uid",
    "node.providerID",
    "node.instanceID",
    "node.labels",
    "node.labelsTrimmed",
    "condition",
    "condition.type",
    "condition.status",
    "condition.reason",
    "condition.message",
    "condition.lastTransitionTime",
    "previous",
    "previous.status",
    "previous.reason",
    "observedAt",
    "resync",
    "unknownField",
]


@settings(max_examples=400, deadline=None)
@given(field=st.sampled_from(FIELDS), value=json_values, version=st.sampled_from(["1", "1.1"]))
def test_whatever_a_schema_accepts_the_parser_accepts(field: str, value: Any, version: str) -> None:
    """The schema is at least as strict as ingest: a producer that meets it is never dropped."""
    detail = copy.deepcopy(a_detail(schemaVersion=version))
    container: Any = detail
    *parents, key = field.split(".")
    for parent in parents:
        container = container.get(parent) if isinstance(container, dict) else None
    if not isinstance(container, dict):
        return
    container[key] = value
    if contracts.violations(contracts.condition_changed_schema(detail), detail) == []:
        NodeConditionEvent.from_detail(detail)


def test_the_legacy_contract_allows_no_uid_and_1_1_requires_it() -> None:
    detail = a_detail(schemaVersion="1")
    del detail["node"]["uid"]
    assert contracts.violations(V1, detail) == []
    assert contracts.violations(V11, {**detail, "schemaVersion": "1.1"}) == [
        "detail.node: 'uid' is a required property"
    ]


def test_violations_name_every_problem_in_words() -> None:
    detail = a_detail(cluster="", observedAt="yesterday")
    detail["condition"]["status"] = "Yes"
    assert contracts.violations(V11, detail) == [
        "detail.cluster: '' must not be empty",
        "detail.condition.status: 'Yes' is not one of ['True', 'False', 'Unknown']",
        "detail.observedAt: 'yesterday' must be an RFC 3339 timestamp with a time zone, like 2026-11-21T10:00:00.123Z",
    ]


def test_the_registry_schema_describes_the_whole_event_on_its_source() -> None:
    schema = contracts.registry_schema(V11, "nodeheal.exporter")
    Draft4Validator.check_schema(schema)
    event = {
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": DETAIL_TYPE_CONDITION_CHANGED,
        "source": "nodeheal.exporter.training-on-eks",
        "account": "123456789012",
        "time": "2026-11-21T10:00:01Z",
        "region": "us-west-2",
        "resources": [],
        "detail": a_detail(),
    }
    assert list(Draft4Validator(schema).iter_errors(event)) == []
    assert list(Draft4Validator(schema).iter_errors({**event, "source": "nodeheal.exporter"}))
    legacy = contracts.registry_schema(V1, "nodeheal.exporter")
    assert (
        list(
            Draft4Validator(legacy).iter_errors(
                {**event, "source": "nodeheal.exporter", "detail": a_detail(schemaVersion="1")}
            )
        )
        == []
    )


def test_an_unknown_schema_name_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match=r"no contract schema 'nope\.json'"):
        contracts.load("nope.json")


# -- Node Event Observed ----------------------------------------------------------------------------

NODE_EVENT = contracts.NODE_EVENT_SCHEMA
NODE_UID = "5f0c1f3e-8a51-4a8e-9d59-3f6a0e1e2b7c"
CACHED = CachedNode(
    name="ip-10-0-1-23.us-west-2.compute.internal",
    uid=NODE_UID,
    created=datetime(2026, 11, 21, 9, 0, tzinfo=UTC),
    instance_id="i-0123456789abcdef0",
    boot_id="0e5a6f1c-4c1b-4a55-9a43-3c8d2b1f0a77",
)


def kube_event(**overrides: Any) -> dict[str, Any]:
    """A core/v1 Warning Event about the Node as NPD's recorder writes it (master: with the uid)."""
    event: dict[str, Any] = {
        "metadata": {"uid": "a1b2c3d4-0000-4000-8000-000000000001", "name": "gpu.1", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": CACHED.name, "uid": NODE_UID, "apiVersion": "v1"},
        "type": "Warning",
        "reason": "GPUInformationalXid",
        "message": "NVRM: Xid (PCI:0000:53:00): 92, pid=2731, High single-bit ECC error rate",
        "count": 1,
        "firstTimestamp": "2026-11-21T10:00:00Z",
        "lastTimestamp": "2026-11-21T10:00:00Z",
        "source": {"component": "custom-plugin-monitor", "host": CACHED.name},
    }
    event.update(overrides)
    return event


def shipped(*events: dict[str, Any], nodes: dict[str, CachedNode] | None = None) -> list[dict[str, Any]]:
    """The details the exporter's Node Events shipper puts on the bus for these Events."""
    items: list[QueuedEvent] = []
    known = {CACHED.name: CACHED} if nodes is None else nodes
    shipper = NodeEventShipper("training-on-eks", items.extend, Metrics(), known.get)
    shipper.begin_list()
    shipper.end_list()
    for event in events:
        shipper.on_event("ADDED", event)
    return [json.loads(item.detail) for item in items]


def a_node_event_detail() -> dict[str, Any]:
    (detail,) = shipped(kube_event())
    return detail


def test_a_node_event_the_exporter_ships_meets_its_schema_with_and_without_an_instance() -> None:
    attributed, about_another_node, no_uid_older, series = shipped(
        kube_event(),
        kube_event(
            metadata={"uid": "e-2"}, involvedObject={"kind": "Node", "name": CACHED.name, "uid": "other"}
        ),
        kube_event(
            metadata={"uid": "e-3"},
            involvedObject={"kind": "Node", "name": CACHED.name},
            firstTimestamp="2026-11-21T08:00:00Z",
        ),
        # Through events.k8s.io: no count, no first/lastTimestamp; eventTime and a series.
        {
            **{
                k: v for k, v in kube_event().items() if k not in ("count", "firstTimestamp", "lastTimestamp")
            },
            "metadata": {"uid": "e-4"},
            "eventTime": "2026-11-21T10:00:00.123456Z",
            "series": {"count": 2, "lastObservedTime": "2026-11-21T10:05:00.123456Z"},
            "reportingComponent": "nodeheal.io/gpu-checker",
            "source": {},
        },
    )
    assert attributed["node"] == {
        "name": CACHED.name,
        "uid": NODE_UID,
        "instanceID": "i-0123456789abcdef0",
        "bootID": CACHED.boot_id,
    }
    assert about_another_node["node"]["instanceID"] == no_uid_older["node"]["instanceID"] == ""
    assert (
        series["event"]["count"] == 2 and series["event"]["firstTimestamp"] == "2026-11-21T10:00:00.123456Z"
    )
    for detail in (attributed, about_another_node, no_uid_older, series):
        assert contracts.violations(NODE_EVENT, detail) == [], detail


def test_an_event_about_an_unknown_node_ships_with_no_instance_and_meets_the_schema() -> None:
    (detail,) = shipped(kube_event(), nodes={})
    assert (detail["node"]["instanceID"], detail["node"]["bootID"]) == ("", "")
    assert contracts.violations(NODE_EVENT, detail) == []


@settings(max_examples=100, deadline=None)
@given(
    reason=st.text(max_size=60),
    message=st.text(max_size=300) | st.just("NVRM: Xid (PCI:0000:53:00): 92, ECC\n" + "x" * 10_000),
    count=st.none() | st.integers(min_value=1, max_value=10_000),
    first=st.none() | times,
    event_type=st.sampled_from(["Warning", "Normal"]),
)
def test_what_the_exporter_ships_for_any_event_meets_the_node_event_schema(
    reason: str, message: str, count: int | None, first: datetime | None, event_type: str
) -> None:
    event = kube_event(
        reason=reason,
        message=message,
        type=event_type,
        firstTimestamp=None if first is None else first.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    if count is None:
        del event["count"]
    else:
        event["count"] = count
    items: list[QueuedEvent] = []
    shipper = NodeEventShipper(
        "training-on-eks", items.extend, Metrics(), {CACHED.name: CACHED}.get, types=()
    )
    shipper.begin_list()
    shipper.end_list()
    shipper.on_event("ADDED", event)
    (detail,) = [json.loads(item.detail) for item in items]
    assert contracts.violations(NODE_EVENT, detail) == []
    assert len(detail["event"]["message"].encode()) <= 4096
    if "Xid" in message:
        assert detail["event"]["message"].startswith("NVRM: Xid (PCI:0000:53:00): 92, ECC")


@pytest.mark.parametrize(
    "required",
    [
        "schemaVersion",
        "cluster",
        "node",
        "event",
        "observedAt",
        "node.name",
        "node.uid",
        "node.instanceID",
        "node.bootID",
        "event.uid",
        "event.type",
        "event.reason",
        "event.message",
        "event.count",
        "event.source",
        "event.firstTimestamp",
        "event.lastTimestamp",
    ],
)
def test_a_node_event_missing_a_required_field_is_refused(required: str) -> None:
    detail = a_node_event_detail()
    container = detail
    *parents, key = required.split(".")
    for parent in parents:
        container = container[parent]
    del container[key]
    assert any(
        f"'{key}' is a required property" in problem for problem in contracts.violations(NODE_EVENT, detail)
    )


NODE_EVENT_BREAKAGES: list[tuple[str, Any]] = [
    ("schemaVersion", "1"),
    ("cluster", ""),
    ("node.name", ""),
    ("node.instanceID", "ip-10-0-1-23"),
    ("node.instanceID", None),
    ("node.bootID", None),
    ("event.count", 0),
    ("event.count", "3"),
    ("event.message", None),
    ("event.firstTimestamp", "2026-11-21T10:00:00"),
    ("observedAt", "yesterday"),
]


@pytest.mark.parametrize(
    ("field", "value"), NODE_EVENT_BREAKAGES, ids=[f"{f}={v!r}"[:40] for f, v in NODE_EVENT_BREAKAGES]
)
def test_a_broken_node_event_is_refused(field: str, value: Any) -> None:
    detail = a_node_event_detail()
    container = detail
    *parents, key = field.split(".")
    for parent in parents:
        container = container[parent]
    container[key] = value
    assert contracts.violations(NODE_EVENT, detail), f"the schema accepts {field}={value!r}"


def test_the_registry_schema_describes_a_whole_node_event_on_its_source() -> None:
    schema = contracts.registry_schema(NODE_EVENT, "nodeheal.exporter")
    Draft4Validator.check_schema(schema)
    event = {
        "detail-type": DETAIL_TYPE_NODE_EVENT,
        "source": "nodeheal.exporter.training-on-eks",
        "detail": a_node_event_detail(),
    }
    assert list(Draft4Validator(schema).iter_errors(event)) == []
    assert list(Draft4Validator(schema).iter_errors({**event, "source": "nodeheal.exporter"}))
    assert list(Draft4Validator(schema).iter_errors({**event, "detail-type": DETAIL_TYPE_CONDITION_CHANGED}))
