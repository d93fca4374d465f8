"""A ``metadata.uid`` in a patch is no precondition: the resourceVersion is checked first (409),
then a changed uid is an immutable field (422).

A PATCH builds its update from the stored object (``rest.DefaultUpdatedObjectInfo(nil, ...)`` in
https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/patch.go), so unlike a
PUT body it carries no uid precondition. ``Store.Update`` compares resourceVersions before
``rest.BeforeUpdate`` validates
(https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/generic/registry/store.go), and
``ValidateObjectMetaAccessorUpdate`` refuses a new uid with "field is immutable"
(https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/validation/objectmeta.go).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, messages
from nodeheal.sim.apiserver.fielderrors import go_quote, invalid
from tests.unit.apiserver.rawhttp import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, call

NODE_PATH = "/api/v1/nodes/gpu-a"


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(make_node("gpu-a", instance_id="i-0a"))
    with FakeKubeApiServer(store) as srv:
        yield srv


def _patch(content_type: str, uid: str, resource_version: str) -> Any:
    if content_type == JSON_PATCH:
        return [
            {"op": "replace", "path": "/metadata/uid", "value": uid},
            {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version},
        ]
    return {"metadata": {"uid": uid, "resourceVersion": resource_version}}


@pytest.mark.parametrize("content_type", [MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH])
def test_a_new_uid_with_the_current_resource_version_is_422_field_is_immutable(
    server: FakeKubeApiServer, content_type: str
) -> None:
    """The uid is validated, not compared as a precondition: 422 Invalid on ``metadata.uid``.
    validateCommonFields and the node strategy's ValidateNodeUpdate each report it, so it is two
    causes and one message (errors.NewInvalid, field.ErrorList.ToAggregate)."""
    before = server.store.get("nodes", "gpu-a")
    answer = call(
        server,
        "PATCH",
        NODE_PATH,
        _patch(content_type, "another-uid", before["metadata"]["resourceVersion"]),
        content_type=content_type,
    )

    error = invalid("metadata.uid", go_quote("another-uid"), messages.FIELD_IMMUTABLE)
    assert answer.status == 422
    assert answer.body["reason"] == "Invalid"
    assert answer.body["message"] == messages.INVALID.format(
        kind="Node", quoted_name=go_quote("gpu-a"), causes=str(error)
    )
    cause = {"reason": "FieldValueInvalid", "message": error.body(), "field": "metadata.uid"}
    assert answer.body["details"] == {"name": "gpu-a", "kind": "Node", "causes": [cause, cause]}
    assert server.store.get("nodes", "gpu-a") == before


@pytest.mark.parametrize("content_type", [MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH])
def test_a_stale_resource_version_is_409_before_the_uid_is_looked_at(
    server: FakeKubeApiServer, content_type: str
) -> None:
    """The optimistic lock comes first: with a stale resourceVersion the answer is 409 Conflict,
    whatever the uid says, as for a Node replaced since the client read it."""
    stale = server.store.get("nodes", "gpu-a")["metadata"]["resourceVersion"]
    server.store.heartbeat("gpu-a")

    answer = call(
        server, "PATCH", NODE_PATH, _patch(content_type, "another-uid", stale), content_type=content_type
    )

    assert answer.status == 409
    assert answer.body["reason"] == "Conflict"
    assert answer.body["message"] == messages.CONFLICT.format(
        resource="nodes", name="gpu-a", why=messages.OBJECT_MODIFIED
    )


def test_the_stored_uid_in_a_patch_changes_nothing(server: FakeKubeApiServer) -> None:
    """Sending the uid the object has is no change of an immutable field: the patch applies."""
    node = server.store.get("nodes", "gpu-a")
    body = {
        "metadata": {"uid": node["metadata"]["uid"], "resourceVersion": node["metadata"]["resourceVersion"]},
        "spec": {"unschedulable": True},
    }
    answer = call(server, "PATCH", NODE_PATH, body, content_type=MERGE_PATCH)
    assert answer.status == 200
    assert answer.body["spec"]["unschedulable"] is True


def test_a_put_body_uid_is_a_precondition(server: FakeKubeApiServer) -> None:
    """A PUT is different: its body's uid is a precondition on the stored object
    (rest.defaultUpdatedObjectInfo.Preconditions, registry/rest/update.go), a 409 before the
    resourceVersion or any validation."""
    node = server.store.get("nodes", "gpu-a")
    node["metadata"]["uid"] = "another-uid"
    answer = call(server, "PUT", NODE_PATH, node)
    assert answer.status == 409
    assert answer.body["reason"] == "Conflict"
