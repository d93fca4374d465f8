"""Label, annotation and taint keys the real server refuses (422 Invalid), with its messages.

Label keys and taint keys are qualified names and label values (and taint values) label values
(``ValidateLabels``, ``ValidateLabelName``:
https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/apis/meta/v1/validation/validation.go;
``IsQualifiedName``, ``IsValidLabelValue``:
https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/util/validation/validation.go).
Annotation keys are qualified names once lower-cased (``ValidateAnnotations``,
https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/validation/objectmeta.go). Taints
are checked by validateNodeTaints on the path ``metadata.taints``
(https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/validation.go).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, messages
from nodeheal.sim.apiserver.fielderrors import (
    FieldError,
    duplicate,
    go_quote,
    invalid,
    not_supported,
    required,
)
from tests.unit.apiserver.rawhttp import MERGE_PATCH, call

NODE = "/api/v1/nodes/gpu-a"


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(make_node("gpu-a", instance_id="i-0a"))
    with FakeKubeApiServer(store) as srv:
        yield srv


def _taints(*taints: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"taints": list(taints)}}


REFUSED: list[tuple[str, dict[str, Any], FieldError]] = [
    (
        "label key with a space",
        {"metadata": {"labels": {"nodeheal io/state": "bad"}}},
        invalid(
            "metadata.labels",
            go_quote("nodeheal io/state"),
            messages.PREFIX_PART.format(message=messages.DNS1123_SUBDOMAIN),
        ),
    ),
    (
        "label key with two slashes",
        {"metadata": {"labels": {"a/b/c": "x"}}},
        invalid("metadata.labels", go_quote("a/b/c"), messages.QUALIFIED_NAME_WHOLE),
    ),
    (
        "label key name part ending in a dash",
        {"metadata": {"labels": {"nodeheal.io/state-": "x"}}},
        invalid("metadata.labels", go_quote("nodeheal.io/state-"), messages.QUALIFIED_NAME_PART),
    ),
    (
        "label value with a colon",
        {"metadata": {"labels": {"nodeheal.io/reason": "Xid:79"}}},
        invalid("metadata.labels", go_quote("Xid:79"), messages.LABEL_VALUE),
    ),
    (
        "annotation key with an empty prefix",
        {"metadata": {"annotations": {"/reason": "x"}}},
        invalid("metadata.annotations", go_quote("/reason"), messages.PREFIX_PART_EMPTY),
    ),
    (
        "taint key with a space",
        _taints({"key": "nodeheal.io/un healthy", "effect": "NoSchedule"}),
        invalid("metadata.taints[0].key", go_quote("nodeheal.io/un healthy"), messages.QUALIFIED_NAME_PART),
    ),
    (
        "taint value with a slash",
        _taints({"key": "nodeheal.io/unhealthy", "value": "Xid/79", "effect": "NoSchedule"}),
        invalid("metadata.taints[0].value", go_quote("Xid/79"), messages.LABEL_VALUE),
    ),
    (
        "taint without an effect",
        _taints({"key": "nodeheal.io/unhealthy"}),
        required("metadata.taints[0].effect"),
    ),
    (
        "taint with an unknown effect",
        _taints({"key": "nodeheal.io/unhealthy", "effect": "NoExecution"}),
        not_supported(
            "metadata.taints[0].effect",
            go_quote("NoExecution"),
            ["NoSchedule", "PreferNoSchedule", "NoExecute"],
        ),
    ),
    (
        "the same taint key and effect twice",
        _taints(
            {"key": "nodeheal.io/unhealthy", "value": "a", "effect": "NoSchedule"},
            {"key": "nodeheal.io/unhealthy", "value": "b", "effect": "NoSchedule"},
        ),
        duplicate(
            "metadata.taints[1]",
            'core.Taint{Key:"nodeheal.io/unhealthy", Value:"b", Effect:"NoSchedule", TimeAdded:(*v1.Time)(nil)}',
            messages.TAINT_DUPLICATE,
        ),
    ),
]


@pytest.mark.parametrize(("case", "patch", "error"), REFUSED, ids=[case for case, _, _ in REFUSED])
def test_an_update_with_an_invalid_key_is_422(
    server: FakeKubeApiServer, case: str, patch: dict[str, Any], error: FieldError
) -> None:
    """Each check runs in several validators of an update (the generic ones of rest.BeforeUpdate,
    then ValidateNode and ValidateNodeUpdate): every copy is a cause, the message names it once."""
    before = server.store.get("nodes", "gpu-a")
    answer = call(server, "PATCH", NODE, patch, content_type=MERGE_PATCH)

    assert answer.status == 422, case
    assert answer.body["reason"] == "Invalid"
    assert answer.body["message"] == messages.INVALID.format(
        kind="Node", quoted_name=go_quote("gpu-a"), causes=str(error)
    )
    expected = {"reason": error.type, "message": error.body(), "field": error.field}
    causes = answer.body["details"]["causes"]
    assert causes and all(cause == expected for cause in causes)
    assert server.store.get("nodes", "gpu-a") == before


def test_a_create_with_an_invalid_label_key_reports_it_once(server: FakeKubeApiServer) -> None:
    """rest.BeforeCreate runs only the strategy's Validate when it finds something, so a create
    reports the key once."""
    body = {"metadata": {"name": "gpu-b", "labels": {"bad key": "x"}}}
    answer = call(server, "POST", "/api/v1/nodes", body)
    error = invalid("metadata.labels", go_quote("bad key"), messages.QUALIFIED_NAME_PART)
    assert answer.status == 422
    assert answer.body["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": error.body(), "field": "metadata.labels"}
    ]


def test_several_distinct_errors_are_bracketed_in_the_message(server: FakeKubeApiServer) -> None:
    """utilerrors' aggregate: one error as is, several in brackets, comma-separated."""
    patch = {"metadata": {"labels": {"a b": "x"}, "annotations": {"c d": "y"}}}
    answer = call(server, "PATCH", NODE, patch, content_type=MERGE_PATCH)
    label = invalid("metadata.labels", go_quote("a b"), messages.QUALIFIED_NAME_PART)
    annotation = invalid("metadata.annotations", go_quote("c d"), messages.QUALIFIED_NAME_PART)
    assert answer.status == 422
    assert answer.body["message"] == messages.INVALID.format(
        kind="Node", quoted_name=go_quote("gpu-a"), causes=f"[{label}, {annotation}]"
    )


@pytest.mark.parametrize(
    "patch",
    [
        {"metadata": {"annotations": {"NodeHeal.io/Reason": "Xid 79: GPU has fallen off the bus"}}},
        {"metadata": {"labels": {"nodeheal.io/state": "cordoned", "empty": ""}}},
        _taints(
            {"key": "nodeheal.io/unhealthy", "effect": "NoSchedule"},
            {"key": "nodeheal.io/unhealthy", "effect": "NoExecute"},
        ),
    ],
)
def test_what_nodeheal_writes_is_accepted(server: FakeKubeApiServer, patch: dict[str, Any]) -> None:
    """Annotation keys are checked lower-cased and their values are free text; one key may carry
    one taint per effect."""
    assert call(server, "PATCH", NODE, patch, content_type=MERGE_PATCH).status == 200
