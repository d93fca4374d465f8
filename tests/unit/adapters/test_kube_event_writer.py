"""NodeHeal's Events through events.k8s.io/v1, against the fake API server (which validates them as
``ValidateEventCreate`` does for that API) and read back the way people read them.

What is pinned: the exact shape client-go's ``tools/events`` recorder gives an Event (name, namespace,
MicroTime, reporting controller and instance, regarding and related); that ``kubectl describe
node`` finds the Node's Events with its own query; that a second write of one Event is one Event;
and that no failure of the Events endpoint ever reaches the caller, nor takes more than the time
the adapter allows itself.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from nodeheal.deadline import Deadline
from nodeheal.kube.client import StaticClientProvider, request_json
from nodeheal.kube.event_writer import (
    EVENT_BUDGET_SECONDS,
    EVENT_REQUEST_TIMEOUT,
    EVENT_RESERVE_SECONDS,
    EventOperations,
)
from nodeheal.kube.transport import HttpTransport
from nodeheal.kube_event_body import (
    NOTE_MAX_BYTES,
    REPORTING_CONTROLLER,
    EventTally,
    EventType,
    ObjectEvent,
    ObjectRef,
    event_name,
)
from nodeheal.kube_views import PodView
from nodeheal.sim.apiserver.objects import make_node, make_pod
from nodeheal.sim.apiserver.server import FakeKubeApiServer

NODE = "ip-10-0-158-235.us-west-2.compute.internal"
EXECUTION = "training-on-eks-ip-10-0-158-235-GPUProblem-20261121T100000Z-5cfd7969ba10"
AT = datetime(2026, 11, 21, 10, 0, 5, 120000, tzinfo=UTC)
EVENTS_PATH = r"^/apis/events\.k8s\.io/v1/namespaces/[^/]+/events$"


def _transport(kube: FakeKubeApiServer) -> HttpTransport:
    return StaticClientProvider(kube.url, token="sim").transport("sim")


def _node(kube: FakeKubeApiServer) -> ObjectRef:
    (stored,) = kube.store.add(make_node(NODE, instance_id="i-0abc1234567890def"))
    return ObjectRef.node(NODE, str(stored["metadata"]["uid"]))


def _pod(kube: FakeKubeApiServer, name: str = "trainer-0") -> PodView:
    (stored,) = kube.store.add(make_pod(name, "training", NODE, owner_kind="Job"))
    return PodView.from_api(stored)


def _event(regarding: ObjectRef, reason: str = "Cordoned", **kwargs: Any) -> ObjectEvent:
    fields: dict[str, Any] = {
        "type": EventType.NORMAL,
        "action": "Cordon",
        "note": "Cordoned and tainted nodeheal.io/unhealthy:NoSchedule",
        "execution": EXECUTION,
        "function": "cordon",
        "at": AT,
    }
    fields.update(kwargs)
    return ObjectEvent(regarding=regarding, reason=reason, **fields)


def _stored(kube: FakeKubeApiServer) -> list[dict[str, Any]]:
    items, _ = kube.store.list_objects("events")
    return list(items)


def test_a_node_event_has_the_shape_client_gos_recorder_gives_it(kube: FakeKubeApiServer) -> None:
    node = _node(kube)
    events = EventOperations(_transport(kube))

    events.record([_event(node)])

    assert events.tally.written == 1
    name = event_name(_event(node))
    assert re.fullmatch(re.escape(NODE) + r"\.[0-9a-f]{16}", name)
    read = client.EventsV1Api(kube.api_client()).read_namespaced_event(name, "default")
    raw = request_json(
        _transport(kube),
        "GET",
        f"/apis/events.k8s.io/v1/namespaces/default/events/{name}",
        action="read the Event back",
    ).object("read")
    assert raw["eventTime"] == "2026-11-21T10:00:05.120000Z"
    assert read.reporting_controller == REPORTING_CONTROLLER == "nodeheal.io/remediation"
    assert read.reporting_instance == "nodeheal-cordon"
    assert (read.action, read.reason, read.type) == ("Cordon", "Cordoned", "Normal")
    assert read.note == f"Cordoned and tainted nodeheal.io/unhealthy:NoSchedule (execution {EXECUTION})"
    assert raw["regarding"] == {"kind": "Node", "name": NODE, "uid": node.uid, "apiVersion": "v1"}
    assert raw["metadata"]["annotations"] == {"nodeheal.io/execution": EXECUTION}
    # None of the deprecated core/v1 fields: an Event created through events.k8s.io/v1 may not set them.
    deprecated = (
        "deprecatedSource",
        "deprecatedCount",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
    )
    assert not any(raw.get(field) for field in deprecated)


def test_kubectl_describe_node_finds_the_nodes_events_with_its_own_query(kube: FakeKubeApiServer) -> None:
    """``kubectl describe node`` lists core/v1 Events in every namespace whose involvedObject is the
    Node by name, empty namespace, kind and uid (NodeDescriber and searchEvents in k8s.io/kubectl
    pkg/describe/describe.go; its second query, uid = the node's name, is the kubelet's)."""
    node = _node(kube)
    EventOperations(_transport(kube)).record([_event(node), _event(node, "Drained", action="Drain")])
    core = client.CoreV1Api(kube.api_client())

    described = core.list_event_for_all_namespaces(
        field_selector=(
            f"involvedObject.name={NODE},involvedObject.namespace=,involvedObject.kind=Node,"
            f"involvedObject.uid={node.uid}"
        )
    )

    assert sorted(e.reason for e in described.items) == ["Cordoned", "Drained"]
    assert {e.reporting_component for e in described.items} == {REPORTING_CONTROLLER}
    assert all(e.message.endswith(f"(execution {EXECUTION})") for e in described.items)


def test_the_field_selectors_people_use_to_list_a_nodes_events(kube: FakeKubeApiServer) -> None:
    """``kubectl get events`` reads core/v1, whose field is ``involvedObject.name``;
    ``regarding.name`` is the events.k8s.io/v1 name of the same field
    (``kubectl get events.events.k8s.io``), and core/v1 refuses it."""
    node = _node(kube)
    EventOperations(_transport(kube)).record([_event(node)])
    transport = _transport(kube)

    core = request_json(
        transport,
        "GET",
        "/api/v1/events",
        action="core",
        query=[("fieldSelector", f"involvedObject.name={NODE}")],
    )
    v1 = request_json(
        transport,
        "GET",
        "/apis/events.k8s.io/v1/events",
        action="events.k8s.io",
        query=[("fieldSelector", f"regarding.name={NODE}")],
    )
    wrong = request_json(
        transport,
        "GET",
        "/api/v1/events",
        action="wrong",
        query=[("fieldSelector", f"regarding.name={NODE}")],
    )

    assert [e["reason"] for e in core.object("core")["items"]] == ["Cordoned"]
    assert [e["reason"] for e in v1.object("v1")["items"]] == ["Cordoned"]
    assert wrong.status == 400 and "regarding.name" in wrong.api_status.message


def test_a_pod_event_goes_to_the_pods_namespace_and_names_the_node_as_related(
    kube: FakeKubeApiServer,
) -> None:
    node = _node(kube)
    pod = _pod(kube)

    EventOperations(_transport(kube)).record(
        [_event(ObjectRef.pod(pod), "Evicted", action="Evict", function="drain", related=node)]
    )

    (stored,) = _stored(kube)
    assert stored["metadata"]["namespace"] == "training"
    assert stored["metadata"]["name"].startswith("trainer-0.")
    assert stored["involvedObject"] == {
        "kind": "Pod",
        "namespace": "training",
        "name": "trainer-0",
        "uid": pod.uid,
        "apiVersion": "v1",
    }
    assert stored["related"]["name"] == NODE and stored["reportingInstance"] == "nodeheal-drain"


def test_a_second_write_of_the_same_event_is_the_same_event(kube: FakeKubeApiServer) -> None:
    """A step Step Functions runs again tells the same story under the same names: 409
    AlreadyExists, counted as already there, and one Event stored."""
    node = _node(kube)
    events = EventOperations(_transport(kube))

    events.record([_event(node)])
    events.record([_event(node, at=datetime(2026, 11, 21, 10, 0, 9, tzinfo=UTC))])

    assert (events.tally.written, events.tally.already, events.tally.failed) == (1, 1, 0)
    assert len(_stored(kube)) == 1
    # Another execution, or another round of the same one, is another Event.
    events.record([_event(node, execution=EXECUTION + "-r1"), _event(node, key="2")])
    assert len(_stored(kube)) == 3


def test_a_long_note_is_cut_to_1_kib_and_keeps_the_execution(kube: FakeKubeApiServer) -> None:
    node = _node(kube)
    events = EventOperations(_transport(kube))

    events.record([_event(node, note="NVRM: Xid 79 … " * 200)])

    (stored,) = _stored(kube)
    assert events.tally.written == 1
    assert len(stored["message"].encode()) <= NOTE_MAX_BYTES
    assert stored["message"].endswith(f"(execution {EXECUTION})") and "[truncated" in stored["message"]


def test_a_name_too_long_for_the_suffix_falls_back_to_the_digest(kube: FakeKubeApiServer) -> None:
    """As client-go's ``GenerateEventName`` does when ``<name>.<suffix>`` is no DNS subdomain."""
    _node(kube)
    pod = _pod(kube, name="w" * 250)
    events = EventOperations(_transport(kube))

    events.record([_event(ObjectRef.pod(pod), "Evicted", action="Evict", function="drain")])

    (stored,) = _stored(kube)
    assert events.tally.written == 1
    assert re.fullmatch(r"nodeheal\.[0-9a-f]{32}", stored["metadata"]["name"])


def test_a_failing_endpoint_is_logged_counted_and_stops_this_invocations_events(
    kube: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    node = _node(kube)
    kube.faults.fail_next(1, status=500, method="POST", path=EVENTS_PATH)
    tally = EventTally()
    events = EventOperations(_transport(kube), tally=tally)

    events.record(
        [
            _event(node),
            _event(node, "Drained", action="Drain"),
            _event(node, "Terminating", action="Terminate"),
        ]
    )

    assert (tally.written, tally.failed, tally.skipped) == (0, 1, 2)
    assert kube.faults.count("POST", EVENTS_PATH) == 1
    assert "Cordoned" in caplog.text and "HTTP 500" in caplog.text
    # The next invocation (a new adapter) tries again.
    EventOperations(_transport(kube), tally=tally).record([_event(node, "Drained", action="Drain")])
    assert tally.written == 1 and [e["reason"] for e in _stored(kube)] == ["Drained"]


@pytest.mark.parametrize("status", [401, 403, 429, 503])
def test_answers_that_say_no_event_will_be_taken_stop_the_writes(
    kube: FakeKubeApiServer, status: int
) -> None:
    node = _node(kube)
    kube.faults.fail_next(1, status=status, method="POST", path=EVENTS_PATH)
    events = EventOperations(_transport(kube))

    events.record([_event(node), _event(node, "Drained", action="Drain")])

    assert (events.tally.failed, events.tally.skipped) == (1, 1)
    assert kube.faults.count("POST", EVENTS_PATH) == 1


def test_a_refusal_of_one_event_does_not_stop_the_next(kube: FakeKubeApiServer) -> None:
    node = _node(kube)
    kube.faults.fail_next(1, status=422, method="POST", path=EVENTS_PATH)
    events = EventOperations(_transport(kube))

    events.record([_event(node), _event(node, "Drained", action="Drain")])

    assert (events.tally.failed, events.tally.written) == (1, 1)
    assert [e["reason"] for e in _stored(kube)] == ["Drained"]


@pytest.mark.slow  # waits on a real timeout: `make test` runs it, `make check` does not
def test_an_endpoint_that_never_answers_costs_one_read_timeout_then_nothing(kube: FakeKubeApiServer) -> None:
    node = _node(kube)
    kube.faults.timeout_next(1, hold_seconds=30.0, method="POST", path=EVENTS_PATH)
    events = EventOperations(_transport(kube))
    started = time.monotonic()

    events.record(
        [
            _event(node),
            _event(node, "Drained", action="Drain"),
            _event(node, "Terminating", action="Terminate"),
        ]
    )

    took = time.monotonic() - started
    connect, read = EVENT_REQUEST_TIMEOUT
    assert took < connect + read + 1.0, took
    assert (events.tally.failed, events.tally.skipped) == (1, 2)


def test_writes_stop_when_the_budget_for_events_is_spent(kube: FakeKubeApiServer) -> None:
    """A slow endpoint: each write takes 0.7 s, the budget is 1.5 s, no write starts with less
    than a second of it left. The first is written, the second skipped without being sent."""
    node = _node(kube)
    kube.faults.add_latency(0.7, method="POST", path=EVENTS_PATH)
    events = EventOperations(_transport(kube), budget_seconds=1.5)

    events.record([_event(node), _event(node, "Drained", action="Drain")])

    assert (events.tally.written, events.tally.skipped) == (1, 1)
    assert kube.faults.count("POST", EVENTS_PATH) == 1


def test_no_write_starts_inside_the_steps_reserve(kube: FakeKubeApiServer) -> None:
    """With 4 s left on the invocation's deadline and 5 s kept for the step, nothing is sent."""
    node = _node(kube)
    events = EventOperations(_transport(kube), deadline=Deadline.after(4.0))

    events.record([_event(node)])

    assert events.tally.skipped == 1 and kube.faults.count("POST", EVENTS_PATH) == 0


def test_a_write_is_cut_to_the_time_the_deadline_leaves(kube: FakeKubeApiServer) -> None:
    """6.5 s left, 5 s kept for the step: the write may take 1.5 s although its read timeout is 3 s."""
    node = _node(kube)
    kube.faults.timeout_next(1, hold_seconds=30.0, method="POST", path=EVENTS_PATH)
    events = EventOperations(_transport(kube), deadline=Deadline.after(6.5))
    started = time.monotonic()

    events.record([_event(node)])

    assert time.monotonic() - started < 2.5
    assert events.tally.failed == 1


def test_an_event_must_have_camel_case_reason_and_action_and_an_execution() -> None:
    node = ObjectRef.node(NODE, "uid-1")
    with pytest.raises(ValueError, match="reason must be CamelCase"):
        _event(node, "cordoned")
    with pytest.raises(ValueError, match="action must be CamelCase"):
        _event(node, action="Cordon the node")
    with pytest.raises(ValueError, match="reason must be CamelCase of at most 128 bytes"):
        _event(node, "A" * 129)
    with pytest.raises(ValueError, match="names its execution"):
        _event(node, execution="")


def test_the_readme_and_the_operations_guide_state_the_bounds_the_adapter_keeps() -> None:
    root = Path(__file__).resolve().parents[3]

    def text(path: Path) -> str:
        return " ".join(path.read_text(encoding="utf-8").split())

    connect, read = EVENT_REQUEST_TIMEOUT
    budget, reserve = f"{EVENT_BUDGET_SECONDS:g}", f"{EVENT_RESERVE_SECONDS:g}"
    assert (
        f"connect {connect:g} s, read {read:g} s; all of one invocation's Events at most {budget} s, "
        f"and none started unless {reserve} s of the deadline"
    ) in text(root / "README.md")
    assert (
        f"{connect:g} s connect and {read:g} s read timeout, all writes of one invocation together at "
        f"most {budget} s, and none starts unless {reserve} s"
    ) in text(root / "docs" / "operations.md")
