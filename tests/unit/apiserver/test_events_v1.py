"""events.k8s.io/v1: a second view of the core/v1 Event objects, one store behind both.

kube-apiserver serves events.k8s.io/v1 with the same registry, strategy and etcd prefix as
core/v1 Events (``eventstore.NewREST`` in
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/events/rest/storage_events.go)
and converts between the two on every read and write (``Convert_v1_Event_To_core_Event`` and
``Convert_core_Event_To_v1_Event`` in
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/events/v1/conversion.go). Writes
are validated by the version of the request (``requestGroupVersion`` in
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/event/strategy.go, with
``ValidateEventCreate``/``ValidateEventUpdate`` in
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/events.go).

Watches run on a server whose clock only the test moves: each is opened, the fake reports it
open, and moving the clock past its timeout ends it; nothing sleeps.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, watch

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_event, make_node, messages
from nodeheal.sim.apiserver.clock import ManualClock
from nodeheal.sim.apiserver.fielderrors import go_quote
from tests.unit.apiserver.rawhttp import call

CORE_EVENTS = "/api/v1/namespaces/default/events"
V1_EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"
#: A MicroTime must carry exactly six fractional digits; a whole-second datetime would lose them.
EVENT_TIME = datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)
EVENT_TIME_TEXT = "2026-11-21T10:00:00.123456Z"
LATER_TEXT = "2026-11-21T10:05:00.654321Z"
#: Bounds a wait that would otherwise hang; never what a test waits for.
HANG = 30


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> Iterator[FakeKubeApiServer]:
    store = ClusterStore(clock=clock)
    store.add(make_node("gpu-a", instance_id="i-0a"))
    with FakeKubeApiServer(store, bookmark_interval=600.0) as srv:
        yield srv


@pytest.fixture
def ev1(server: FakeKubeApiServer) -> client.EventsV1Api:
    return client.EventsV1Api(server.api_client())


def regarding(server: FakeKubeApiServer) -> client.V1ObjectReference:
    node = server.store.get("nodes", "gpu-a")
    return client.V1ObjectReference(kind="Node", name="gpu-a", uid=node["metadata"]["uid"], api_version="v1")


def new_style_event(server: FakeKubeApiServer, name: str = "gpu-a.xid") -> client.EventsV1Event:
    """An Event as client-go's events.k8s.io recorder (tools/events) first writes it."""
    return client.EventsV1Event(
        metadata=client.V1ObjectMeta(name=name, namespace="default"),
        event_time=EVENT_TIME,
        reporting_controller="nodeheal.io/gpu-checker",
        reporting_instance="gpu-checker-gpu-a",
        action="CheckGPU",
        reason="GPUApplicationXid",
        regarding=regarding(server),
        note="NVRM: Xid 13",
        type="Warning",
    )


def without_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {
        k: v for k, v in obj["metadata"].items() if k not in ("uid", "creationTimestamp", "resourceVersion")
    }
    return {**obj, "metadata": meta}


def read_raw(ev1: client.EventsV1Api, name: str) -> dict[str, Any]:
    """GET through the real client, without its model: the body as the server wrote it."""
    response = ev1.read_namespaced_event(name, "default", _preload_content=False)
    body: dict[str, Any] = json.loads(response.data)
    return body


def watched(
    server: FakeKubeApiServer, clock: ManualClock, path: str, list_call: Callable[..., Any], rv: str
) -> list[tuple[str, Any]]:
    """What the real client's ``watch.Watch`` reads from ``rv`` on: the stream is opened on its
    own thread, and once the fake reports it open the clock moves past its one-second timeout."""
    pattern = f"^{path}$"
    opened = server.faults.watches_started(pattern)
    out: queue.Queue[list[tuple[str, Any]] | BaseException] = queue.Queue()

    def run() -> None:
        try:
            stream = watch.Watch().stream(list_call, "default", resource_version=rv, timeout_seconds=1)
            out.put([(e["type"], e["object"]) for e in stream])
        except BaseException as exc:  # handed to the test thread
            out.put(exc)

    threading.Thread(target=run, daemon=True).start()
    server.faults.wait_for_watch(pattern, started_after=opened)
    clock.advance(1.0)
    result = out.get(timeout=HANG)
    if isinstance(result, BaseException):
        raise result
    return result


# -- one object, two shapes --------------------------------------------------------------------


def test_an_event_created_through_events_v1_is_the_core_event(
    server: FakeKubeApiServer, core: client.CoreV1Api, ev1: client.EventsV1Api
) -> None:
    """Created through events.k8s.io/v1, the Event is read, listed and selected through core/v1
    too: ``note`` is ``message``, ``regarding`` is ``involvedObject``, ``reportingController`` is
    ``reportingComponent``; the deprecated fields it left unset are core's unset ``count``,
    ``source`` and timestamps (Convert_v1_Event_To_core_Event in pkg/apis/events/v1/conversion.go).
    Each version writes its own struct tags: core/v1 writes the empty ``source`` and the null
    timestamps (not omitempty-able structs), events.k8s.io/v1 the same as ``deprecated*``."""
    created = ev1.create_namespaced_event("default", new_style_event(server))
    uid = server.store.get("nodes", "gpu-a")["metadata"]["uid"]
    as_core = call(server, "GET", f"{CORE_EVENTS}/gpu-a.xid")
    assert as_core.status == 200
    assert without_server_fields(as_core.body) == {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": "gpu-a.xid", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "gpu-a", "uid": uid, "apiVersion": "v1"},
        "reason": "GPUApplicationXid",
        "message": "NVRM: Xid 13",
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "type": "Warning",
        "eventTime": EVENT_TIME_TEXT,
        "action": "CheckGPU",
        "reportingComponent": "nodeheal.io/gpu-checker",
        "reportingInstance": "gpu-checker-gpu-a",
    }
    assert as_core.body["metadata"]["uid"] == created.metadata.uid
    assert as_core.body["metadata"]["resourceVersion"] == created.metadata.resource_version
    as_v1 = call(server, "GET", f"{V1_EVENTS}/gpu-a.xid")
    assert without_server_fields(as_v1.body) == {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": {"name": "gpu-a.xid", "namespace": "default"},
        "eventTime": EVENT_TIME_TEXT,
        "reportingController": "nodeheal.io/gpu-checker",
        "reportingInstance": "gpu-checker-gpu-a",
        "action": "CheckGPU",
        "reason": "GPUApplicationXid",
        "regarding": {"kind": "Node", "name": "gpu-a", "uid": uid, "apiVersion": "v1"},
        "note": "NVRM: Xid 13",
        "type": "Warning",
        "deprecatedSource": {},
        "deprecatedFirstTimestamp": None,
        "deprecatedLastTimestamp": None,
    }
    listed = core.list_namespaced_event("default", field_selector="involvedObject.kind=Node")
    assert [(e.metadata.name, e.message, e.count) for e in listed.items] == [
        ("gpu-a.xid", "NVRM: Xid 13", None)
    ]


def test_a_core_event_reads_through_events_v1_with_its_deprecated_fields(
    server: FakeKubeApiServer, core: client.CoreV1Api, ev1: client.EventsV1Api
) -> None:
    """An Event of the old API (NPD, the kubelet: ``tools/record``) has ``count``, ``source`` and
    the two timestamps and no ``eventTime``; events.k8s.io/v1 shows them as ``deprecatedCount``,
    ``deprecatedSource``, ``deprecatedFirstTimestamp``/``deprecatedLastTimestamp`` and writes its
    unset ``eventTime`` as null (not omitempty) (Convert_core_Event_To_v1_Event in
    pkg/apis/events/v1/conversion.go). A recurrence through core/v1 raises ``count``, and so
    ``deprecatedCount``.

    The ``kubernetes`` client's EventsV1Event model refuses that null ``eventTime`` (its schema
    marks the field required), so an old-style Event is read through events.k8s.io/v1 without
    the model here, as any Python consumer of that API must."""
    node = server.store.get("nodes", "gpu-a")
    core.create_namespaced_event(
        "default", make_event("gpu-a.npd", "default", involved=node, reason="XidError", message="Xid 79")
    )
    first = read_raw(ev1, "gpu-a.npd")
    assert (
        first["note"],
        first["regarding"]["name"],
        first["deprecatedCount"],
        first["deprecatedSource"],
        first["eventTime"],
    ) == ("Xid 79", "gpu-a", 1, {"component": "node-problem-detector", "host": "gpu-a"}, None)
    assert first["deprecatedFirstTimestamp"] == first["deprecatedLastTimestamp"] is not None
    assert not {"series", "count", "message", "involvedObject", "source"} & set(first)
    core.patch_namespaced_event("gpu-a.npd", "default", {"count": 2, "lastTimestamp": "2026-11-21T10:05:00Z"})
    again = read_raw(ev1, "gpu-a.npd")
    assert (again["deprecatedCount"], again["deprecatedLastTimestamp"], "series" in again) == (
        2,
        "2026-11-21T10:05:00Z",
        False,
    )


# -- recurrences ---------------------------------------------------------------------------------


def test_a_recurrence_through_events_v1_goes_to_the_series_and_both_watches_see_it(
    server: FakeKubeApiServer, clock: ManualClock, core: client.CoreV1Api, ev1: client.EventsV1Api
) -> None:
    """client-go's events.k8s.io recorder records a recurrence as a strategic merge patch of
    ``series`` alone (``recordToSink``/``createPatchBytesForSeries`` in k8s.io/client-go
    tools/events/event_broadcaster.go); ``deprecatedCount`` stays unset. Through core/v1 the same
    object shows ``series.count`` rising and ``count`` unchanged, and watches of both versions
    (one etcd prefix, no watch cache for events) see the same ADDED and MODIFIED, each in its
    own version."""
    rv = core.list_namespaced_event("default").metadata.resource_version
    ev1.create_namespaced_event("default", new_style_event(server))
    patched = ev1.patch_namespaced_event(
        "gpu-a.xid", "default", {"series": {"count": 2, "lastObservedTime": LATER_TEXT}}
    )
    assert (patched.series.count, patched.deprecated_count) == (2, None)
    as_core = core.read_namespaced_event("gpu-a.xid", "default")
    assert (as_core.count, as_core.series.count, as_core.message) == (None, 2, "NVRM: Xid 13")

    core_stream = watched(server, clock, CORE_EVENTS, core.list_namespaced_event, rv)
    assert [(kind, obj.count, obj.series and obj.series.count) for kind, obj in core_stream] == [
        ("ADDED", None, None),
        ("MODIFIED", None, 2),
    ]
    v1_stream = watched(server, clock, V1_EVENTS, ev1.list_namespaced_event, rv)
    assert [(kind, obj.deprecated_count, obj.series and obj.series.count) for kind, obj in v1_stream] == [
        ("ADDED", None, None),
        ("MODIFIED", None, 2),
    ]
    assert v1_stream[1][1].note == "NVRM: Xid 13"


def test_through_events_v1_only_the_series_of_an_event_may_change(
    server: FakeKubeApiServer, core: client.CoreV1Api, ev1: client.EventsV1Api
) -> None:
    """``ValidateEventUpdate`` for events.k8s.io/v1 makes every field but the series and metadata
    immutable, under the internal type's field names (``message``, ``count``), and a changed
    series must count at least 2; the 422 names the internal object's Kind, ``Event`` with no
    group (``objectMetaAndKind`` in k8s.io/apiserver pkg/registry/rest/create.go). Through core/v1
    only ``legacyValidateEvent`` runs, so the same change is accepted there."""
    ev1.create_namespaced_event("default", new_style_event(server))
    with pytest.raises(client.ApiException) as err:
        ev1.patch_namespaced_event("gpu-a.xid", "default", {"note": "edited", "deprecatedCount": 3})
    assert err.value.status == 422
    immutable_note = (
        f"message: {messages.FIELD_VALUE_INVALID}: {go_quote('edited')}: {messages.FIELD_IMMUTABLE}"
    )
    immutable_count = f"count: {messages.FIELD_VALUE_INVALID}: 3: {messages.FIELD_IMMUTABLE}"
    status = json.loads(err.value.body)
    assert status["message"] == messages.INVALID.format(
        kind="Event", quoted_name=go_quote("gpu-a.xid"), causes=f"[{immutable_note}, {immutable_count}]"
    )
    assert status["details"]["kind"] == "Event" and "group" not in status["details"]

    with pytest.raises(client.ApiException) as series_err:
        ev1.patch_namespaced_event(
            "gpu-a.xid", "default", {"series": {"count": 1, "lastObservedTime": LATER_TEXT}}
        )
    assert series_err.value.status == 422
    assert json.loads(series_err.value.body)["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f"{messages.FIELD_VALUE_INVALID}: {go_quote('')}: {messages.EVENT_SERIES_COUNT_TOO_LOW}",
            "field": "series.count",
        }
    ]
    edited = core.patch_namespaced_event("gpu-a.xid", "default", {"message": "edited", "count": 3})
    assert (edited.message, edited.count) == ("edited", 3)


# -- validation by the version of the request ---------------------------------------------------


def test_an_old_style_event_is_refused_through_events_v1_and_accepted_through_core(
    server: FakeKubeApiServer,
) -> None:
    """Created through events.k8s.io/v1, an Event gets the strict checks after the legacy ones:
    ``eventTime`` required and the deprecated fields unset, each reported under its internal
    name, in ValidateEventCreate's order. The same Event written the old way through core/v1
    passes: only ``legacyValidateEvent`` runs for the core version."""
    uid = server.store.get("nodes", "gpu-a")["metadata"]["uid"]
    v1_body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "gpu-a.old", "namespace": "default"},
        "regarding": {"kind": "Node", "name": "gpu-a", "uid": uid},
        "reason": "XidError",
        "note": "Xid 79",
        "type": "Warning",
        "deprecatedSource": {"component": "node-problem-detector"},
        "deprecatedCount": 1,
        "deprecatedFirstTimestamp": "2026-11-21T10:00:00Z",
        "deprecatedLastTimestamp": "2026-11-21T10:00:00Z",
    }
    refused = call(server, "POST", V1_EVENTS, v1_body)
    assert refused.status == 422
    unset = f"{messages.FIELD_VALUE_INVALID}: {go_quote('')}: {messages.EVENT_FIELD_MUST_BE_UNSET}"
    assert [(c["field"], c["message"]) for c in refused.body["details"]["causes"]] == [
        ("eventTime", messages.FIELD_VALUE_REQUIRED),
        ("firstTimestamp", unset),
        ("lastTimestamp", unset),
        ("count", unset),
        ("source", unset),
    ]
    core_body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "gpu-a.old", "namespace": "default"},
        "involvedObject": v1_body["regarding"],
        "reason": "XidError",
        "message": "Xid 79",
        "type": "Warning",
        "source": {"component": "node-problem-detector"},
        "count": 1,
        "firstTimestamp": "2026-11-21T10:00:00Z",
        "lastTimestamp": "2026-11-21T10:00:00Z",
    }
    assert call(server, "POST", CORE_EVENTS, core_body).status == 201


def test_legacy_validation_applies_to_both_versions(server: FakeKubeApiServer) -> None:
    """``legacyValidateEvent`` runs for every version: an old-style Event about a cluster-scoped
    object lives in "default" (or no namespace); a new-style one (with ``eventTime``) in "default"
    or "kube-system", and needs ``reportingController``, ``reportingInstance``, ``action`` and
    ``reason``; events.k8s.io/v1 then adds its own ``type`` check (ValidateEventCreate)."""
    uid = server.store.get("nodes", "gpu-a")["metadata"]["uid"]
    node_ref = {"kind": "Node", "name": "gpu-a", "uid": uid}
    old_style = {
        "metadata": {"name": "gpu-a.1", "namespace": "gpu-jobs"},
        "involvedObject": node_ref,
        "reason": "XidError",
        "message": "Xid 79",
    }
    refused = call(server, "POST", "/api/v1/namespaces/gpu-jobs/events", old_style)
    assert refused.status == 422
    assert refused.body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f"{messages.FIELD_VALUE_INVALID}: {go_quote('')}: {messages.EVENT_NAMESPACE_MISMATCH}",
            "field": "involvedObject.namespace",
        }
    ]
    new_style = {
        "metadata": {"name": "gpu-a.2", "namespace": "default"},
        "eventTime": EVENT_TIME_TEXT,
        "regarding": node_ref,
        "reportingController": "nodeheal.io/gpu-checker",
        "reason": "GPUApplicationXid",
        "type": "Error",
    }
    answer = call(server, "POST", V1_EVENTS, new_style)
    assert answer.status == 422
    assert [(c["field"], c["reason"]) for c in answer.body["details"]["causes"]] == [
        ("reportingInstance", "FieldValueRequired"),
        ("action", "FieldValueRequired"),
        ("type", "FieldValueInvalid"),
    ]
    assert answer.body["details"]["causes"][2]["message"] == (
        f"{messages.FIELD_VALUE_INVALID}: {go_quote('')}: {messages.EVENT_TYPE_INVALID.format(type='Error')}"
    )


# -- selectors, errors and bodies of the view ---------------------------------------------------


def test_field_selectors_use_each_versions_field_names(
    server: FakeKubeApiServer, core: client.CoreV1Api, ev1: client.EventsV1Api
) -> None:
    """events.k8s.io/v1 selects with its own names, converted to the core fields
    (AddFieldLabelConversionsForEvent in pkg/apis/events/v1/conversion.go): ``regarding.kind``,
    ``reportingController``; a core name is not one of them (400). Both select the same objects,
    and ``source`` matches an Event without a legacy source by its reporting controller
    (ToSelectableFields in pkg/registry/core/event/strategy.go)."""
    node = server.store.get("nodes", "gpu-a")
    ev1.create_namespaced_event("default", new_style_event(server))
    core.create_namespaced_event(
        "default", make_event("gpu-a.npd", "default", involved=node, reason="XidError", message="Xid 79")
    )

    def v1_names(selector: str) -> list[str]:
        # Without the client's model, which refuses the old-style Event's null eventTime.
        response = ev1.list_namespaced_event("default", field_selector=selector, _preload_content=False)
        return [e["metadata"]["name"] for e in json.loads(response.data)["items"]]

    def core_names(selector: str) -> list[str]:
        return [e.metadata.name for e in core.list_namespaced_event("default", field_selector=selector).items]

    assert v1_names("regarding.kind=Node,regarding.name=gpu-a") == ["gpu-a.npd", "gpu-a.xid"]
    assert v1_names("reportingController=nodeheal.io/gpu-checker") == ["gpu-a.xid"]
    assert core_names("reportingComponent=nodeheal.io/gpu-checker") == ["gpu-a.xid"]
    assert (
        v1_names("source=nodeheal.io/gpu-checker")
        == core_names("source=nodeheal.io/gpu-checker")
        == ["gpu-a.xid"]
    )
    with pytest.raises(client.ApiException) as err:
        ev1.list_namespaced_event("default", field_selector="involvedObject.kind=Node")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == messages.FIELD_LABEL_NOT_SUPPORTED.format(
        label="involvedObject.kind"
    )


def test_errors_through_events_v1_name_its_group_and_a_delete_removes_the_one_object(
    server: FakeKubeApiServer, core: client.CoreV1Api, ev1: client.EventsV1Api
) -> None:
    """The registry qualifies its errors and delete answers with the group and resource of the
    request (``qualifiedResourceFromContext`` in k8s.io/apiserver
    pkg/registry/generic/registry/store.go): ``events.events.k8s.io``. Deleting through one
    version removes the object from both."""
    with pytest.raises(client.ApiException) as missing:
        ev1.read_namespaced_event("nope", "default")
    body = json.loads(missing.value.body)
    assert (body["reason"], body["details"]) == (
        "NotFound",
        {"name": "nope", "group": "events.k8s.io", "kind": "events"},
    )
    created = ev1.create_namespaced_event("default", new_style_event(server))
    stale = new_style_event(server)
    stale.metadata.resource_version = "1"
    with pytest.raises(client.ApiException) as conflict:
        ev1.replace_namespaced_event("gpu-a.xid", "default", stale)
    assert json.loads(conflict.value.body)["details"] == {
        "name": "gpu-a.xid",
        "group": "events.k8s.io",
        "kind": "events",
    }
    deleted = call(server, "DELETE", f"{V1_EVENTS}/gpu-a.xid")
    assert (deleted.status, deleted.body["details"]) == (
        200,
        {"name": "gpu-a.xid", "group": "events.k8s.io", "kind": "events", "uid": created.metadata.uid},
    )
    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_event("gpu-a.xid", "default")
    assert gone.value.status == 404


def test_a_body_of_the_other_version_is_refused(server: FakeKubeApiServer) -> None:
    """A core/v1 Event sent to events.k8s.io/v1 decodes (its apiVersion names a registered
    kind) and is then refused: the handler accepts only its own group version
    (``AcceptsGroupVersion`` in k8s.io/apiserver pkg/endpoints/handlers/create.go)."""
    body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x", "namespace": "default"}}
    answer = call(server, "POST", V1_EVENTS, body)
    assert (answer.status, answer.body["message"]) == (
        400,
        messages.API_VERSION_MISMATCH.format(data="v1", expected="events.k8s.io/v1"),
    )


def test_a_put_may_create_an_event_through_either_version(
    server: FakeKubeApiServer, core: client.CoreV1Api, ev1: client.EventsV1Api
) -> None:
    """The event strategy allows create on update (``AllowCreateOnUpdate`` true in
    pkg/registry/core/event/strategy.go): a PUT to a missing name creates it (201)."""
    event = new_style_event(server, name="gpu-a.put")
    answer = call(
        server, "PUT", f"{V1_EVENTS}/gpu-a.put", client.ApiClient().sanitize_for_serialization(event)
    )
    assert answer.status == 201
    assert core.read_namespaced_event("gpu-a.put", "default").reporting_component == "nodeheal.io/gpu-checker"
