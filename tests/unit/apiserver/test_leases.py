"""Leases (coordination.k8s.io/v1) as the real registry and decoder treat them.

* An update must name a resourceVersion: leaseStrategy.AllowUnconditionalUpdate is false, and
  Store.Update answers 422 (messages.RESOURCE_VERSION_REQUIRED)
  (https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/coordination/lease/strategy.go,
  https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/generic/registry/store.go).
* A PUT may create: AllowCreateOnUpdate is true, and UpdateResource answers 201 Created.
* ``spec.renewTime`` and ``spec.acquireTime`` are ``metav1.MicroTime``: ``time.Parse`` with
  RFC3339Micro, exactly six fractional digits, or the body cannot be decoded (400)
  (https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/apis/meta/v1/micro_time.go).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_lease, make_node, messages
from nodeheal.sim.apiserver.fielderrors import go_quote, invalid
from tests.unit.apiserver.rawhttp import MERGE_PATCH, call

LEASES = "/apis/coordination.k8s.io/v1/namespaces/nodeheal/leases"
LEASE = f"{LEASES}/nodeheal-exporter"


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(
        make_lease("nodeheal-exporter", "nodeheal", holder="exporter-1"),
        make_node("gpu-a", instance_id="i-0a"),
    )
    with FakeKubeApiServer(store) as srv:
        yield srv


def _lease(server: FakeKubeApiServer) -> dict[str, Any]:
    return server.store.get("leases", "nodeheal-exporter", "nodeheal")


def test_an_update_without_resource_version_is_422(server: FakeKubeApiServer) -> None:
    """The error's kind is the resource (``leases``) as Store.Update builds it, and its value is
    the unset uint64 printed with %#v."""
    lease = _lease(server)
    del lease["metadata"]["resourceVersion"]
    lease["spec"]["holderIdentity"] = "exporter-2"

    answer = call(server, "PUT", LEASE, lease)

    error = invalid(
        "metadata.resourceVersion", messages.UNSET_RESOURCE_VERSION, messages.RESOURCE_VERSION_REQUIRED
    )
    assert answer.status == 422
    assert answer.body["message"] == messages.INVALID.format(
        kind="leases.coordination.k8s.io", quoted_name=go_quote("nodeheal-exporter"), causes=str(error)
    )
    assert answer.body["details"] == {
        "name": "nodeheal-exporter",
        "group": "coordination.k8s.io",
        "kind": "leases",
        "causes": [
            {"reason": "FieldValueInvalid", "message": error.body(), "field": "metadata.resourceVersion"}
        ],
    }
    assert _lease(server)["spec"]["holderIdentity"] == "exporter-1"


def test_a_node_update_without_resource_version_is_unconditional(server: FakeKubeApiServer) -> None:
    """The contrast: nodeStrategy.AllowUnconditionalUpdate is true, so the same PUT of a Node
    overwrites the current object."""
    node = server.store.get("nodes", "gpu-a")
    del node["metadata"]["resourceVersion"]
    node["spec"]["unschedulable"] = True
    answer = call(server, "PUT", "/api/v1/nodes/gpu-a", node)
    assert answer.status == 200
    assert answer.body["spec"]["unschedulable"] is True


def test_an_update_with_a_stale_resource_version_is_409(server: FakeKubeApiServer) -> None:
    lease = _lease(server)
    server.store.mutate(
        "leases", "nodeheal-exporter", lambda o: o["spec"].update(leaseTransitions=1), "nodeheal"
    )
    answer = call(server, "PUT", LEASE, lease)
    assert answer.status == 409
    assert answer.body["message"] == messages.CONFLICT.format(
        resource="leases.coordination.k8s.io", name="nodeheal-exporter", why=messages.OBJECT_MODIFIED
    )


def test_a_put_to_a_missing_lease_creates_it(server: FakeKubeApiServer) -> None:
    """AllowCreateOnUpdate: 201 Created, with the system fields a create sets."""
    body = make_lease("other-lock", "nodeheal", holder="me")
    answer = call(server, "PUT", f"{LEASES}/other-lock", body)
    assert answer.status == 201
    assert answer.body["metadata"]["uid"]
    assert answer.body["metadata"]["resourceVersion"]
    assert server.store.get("leases", "other-lock", "nodeheal")["spec"]["holderIdentity"] == "me"


def test_a_put_to_a_missing_node_is_404(server: FakeKubeApiServer) -> None:
    """nodeStrategy.AllowCreateOnUpdate is false."""
    body = make_node("gpu-z", instance_id="i-0z")
    # Without a uid: a uid in a PUT body is a precondition, checked (409) before existence.
    del body["metadata"]["uid"]
    answer = call(server, "PUT", "/api/v1/nodes/gpu-z", body)
    assert answer.status == 404
    assert answer.body["reason"] == "NotFound"


def _cannot_parse(value: str, rest: str, element: str) -> str:
    return messages.TIME_CANNOT_PARSE.format(
        value=json.dumps(value),
        layout=json.dumps(messages.RFC3339_MICRO_LAYOUT),
        rest=json.dumps(rest),
        element=json.dumps(element),
    )


MALFORMED_MICRO_TIMES = [
    ("2026-11-21T10:00:00Z", _cannot_parse("2026-11-21T10:00:00Z", "Z", ".000000")),
    ("2026-11-21T10:00:00.123Z", _cannot_parse("2026-11-21T10:00:00.123Z", ".123Z", ".000000")),
    ("2026-11-21T10:00:00.1234567Z", _cannot_parse("2026-11-21T10:00:00.1234567Z", "7Z", "Z07:00")),
    ("2026-11-21 10:00:00.123456Z", _cannot_parse("2026-11-21 10:00:00.123456Z", " 10:00:00.123456Z", "T")),
    (
        1795255200,
        messages.JSON_TYPE_ERROR.format(
            value="number", struct="LeaseSpec", field="spec.renewTime", type="string"
        ),
    ),
]


@pytest.mark.parametrize(("renew_time", "error"), MALFORMED_MICRO_TIMES)
@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_a_renew_time_without_exactly_six_fractional_digits_is_400(
    server: FakeKubeApiServer, method: str, renew_time: Any, error: str
) -> None:
    """MicroTime.UnmarshalJSON's error ends the decoding; transformDecodeError makes it a 400
    (https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/rest.go)."""
    if method == "PUT":
        body, path = _lease(server), LEASE
    else:
        body, path = make_lease("new-lock", "nodeheal", holder="me"), LEASES
    body["spec"]["renewTime"] = renew_time

    answer = call(server, method, path, body)

    assert answer.status == 400
    assert answer.body["reason"] == "BadRequest"
    assert answer.body["message"] == messages.DECODE_FAILED.format(kind="Lease", version="v1", error=error)


def test_an_acquire_time_is_a_micro_time_too(server: FakeKubeApiServer) -> None:
    body = _lease(server)
    body["spec"]["acquireTime"] = "2026-11-21T10:00:00Z"
    answer = call(server, "PUT", LEASE, body)
    assert answer.status == 400
    assert answer.body["message"] == messages.DECODE_FAILED.format(
        kind="Lease", version="v1", error=_cannot_parse("2026-11-21T10:00:00Z", "Z", ".000000")
    )


def test_a_micro_time_with_an_offset_is_kept_in_utc(server: FakeKubeApiServer) -> None:
    """MicroTime.MarshalJSON writes ``t.UTC().Format(RFC3339Micro)``."""
    body = _lease(server)
    body["spec"]["renewTime"] = "2026-11-21T12:00:00.000042+02:00"
    answer = call(server, "PUT", LEASE, body)
    assert answer.status == 200
    assert answer.body["spec"]["renewTime"] == "2026-11-21T10:00:00.000042Z"


def test_a_malformed_micro_time_in_a_merge_patch_is_422_on_the_patch(server: FakeKubeApiServer) -> None:
    """A patched object that cannot be decoded is a 422 Invalid on the field ``patch``
    (jsonPatcher.applyPatchToCurrentObject, handlers/patch.go), not a 400."""
    answer = call(
        server, "PATCH", LEASE, {"spec": {"renewTime": "2026-11-21T10:00:00Z"}}, content_type=MERGE_PATCH
    )
    assert answer.status == 422
    assert answer.body["reason"] == "Invalid"
    (cause,) = answer.body["details"]["causes"]
    assert cause["field"] == messages.PATCH_FIELD
    assert cause["message"].endswith(_cannot_parse("2026-11-21T10:00:00Z", "Z", ".000000"))
