"""What the server keeps of a body, and what it writes back.

The real handler decodes a body with sigs.k8s.io/json in strict mode and, with the default
``fieldValidation=Warn``, turns each unknown or duplicated field into a ``Warning`` header while
dropping it (https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/handlers/create.go,
update.go, patch.go, rest.go ``addStrictDecodingWarnings``; the header is
https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/filters/warning.go). Values
Go cannot hold are a 400 (rest.go ``transformDecodeError``). On the way out, Go's encoding/json
omits exactly the ``omitempty`` fields that are empty: the checks below walk every served object
against the struct tags of k8s.io/api v0.33.1 (``nodeheal.sim.apiserver.schema``), so any field
the fake writes or drops unlike the real server fails here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from nodeheal.sim.apiserver import (
    ClusterStore,
    FakeKubeApiServer,
    make_event,
    make_lease,
    make_node,
    make_pdb,
    make_pod,
    messages,
)
from nodeheal.sim.apiserver.schema import NAMED, STRUCTS
from tests.unit.apiserver.rawhttp import MERGE_PATCH, STRATEGIC_MERGE_PATCH, call

NODES = "/api/v1/nodes"
PODS = "/api/v1/namespaces/ml/pods"
EVENTS = "/api/v1/namespaces/default/events"
PDBS = "/apis/policy/v1/namespaces/ml/poddisruptionbudgets"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/nodeheal/leases"


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    node = make_node("gpu-a", instance_id="i-0a", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    store.add(
        node,
        make_pod("trainer-0", "ml", "gpu-a", owner_kind="StatefulSet", gpus=8),
        make_pod("waiting", "ml", None),
        make_pdb("trainers", "ml", {"app": "trainer"}, min_available=1),
        make_lease("nodeheal-exporter", "nodeheal", holder="exporter-1"),
        make_event(
            "gpu-a.xid", "default", involved=node, reason="Xid79", message="GPU has fallen off the bus"
        ),
    )
    with FakeKubeApiServer(store) as srv:
        yield srv


def _warning(text: str) -> str:
    return messages.WARNING_HEADER.format(quoted_text=json.dumps(text))


# ---- unknown fields ----------------------------------------------------------------------------


def test_unknown_fields_of_a_create_are_dropped_with_a_warning_each(server: FakeKubeApiServer) -> None:
    body = {
        "metadata": {"name": "gpu-b", "colour": "blue"},
        "spec": {
            "providerID": "aws:///us-west-2b/i-0b",
            "cordoned": True,
            "taints": [{"key": "k", "effect": "NoSchedule", "why": "x"}],
        },
        "extra": 1,
    }
    answer = call(server, "POST", NODES, body)

    assert answer.status == 201
    assert answer.warnings == [
        _warning(messages.UNKNOWN_FIELD.format(path=path))
        for path in ("metadata.colour", "spec.cordoned", "spec.taints[0].why", "extra")
    ]
    stored = call(server, "GET", f"{NODES}/gpu-b").body
    assert "colour" not in stored["metadata"] and "extra" not in stored
    assert stored["spec"] == {
        "providerID": "aws:///us-west-2b/i-0b",
        "taints": [{"key": "k", "effect": "NoSchedule"}],
    }


@pytest.mark.parametrize("content_type", [MERGE_PATCH, STRATEGIC_MERGE_PATCH])
def test_unknown_fields_of_a_patch_are_dropped_with_a_warning(
    server: FakeKubeApiServer, content_type: str
) -> None:
    """The patched object is decoded strictly (jsonPatcher / applyPatchToObject, patch.go)."""
    answer = call(
        server,
        "PATCH",
        f"{NODES}/gpu-a",
        {"spec": {"unschedulable": True, "drained": True}},
        content_type=content_type,
    )
    assert answer.status == 200
    assert answer.warnings == [_warning(messages.UNKNOWN_FIELD.format(path="spec.drained"))]
    assert "drained" not in answer.body["spec"]
    assert answer.body["spec"]["unschedulable"] is True


def test_a_repeated_key_is_a_warning_and_the_last_value_is_kept(server: FakeKubeApiServer) -> None:
    raw = b'{"metadata": {"name": "gpu-c", "labels": {"a": "1", "a": "2"}}}'
    answer = call(server, "POST", NODES, raw=raw)
    assert answer.status == 201
    assert answer.warnings == [_warning(messages.DUPLICATE_FIELD.format(path="metadata.labels.a"))]
    assert answer.body["metadata"]["labels"] == {"a": "2"}


def test_field_validation_strict_refuses_the_body(server: FakeKubeApiServer) -> None:
    """fieldValidation=Strict turns the strict errors into the decode error, a 400."""
    answer = call(
        server, "POST", f"{NODES}?fieldValidation=Strict", {"metadata": {"name": "gpu-d"}, "extra": 1}
    )
    strict = messages.STRICT_DECODING_ERROR.format(errors=messages.UNKNOWN_FIELD.format(path="extra"))
    assert answer.status == 400
    assert answer.body["message"] == messages.DECODE_FAILED.format(kind="Node", version="v1", error=strict)
    assert call(server, "GET", f"{NODES}/gpu-d").status == 404


def test_field_validation_ignore_drops_without_a_warning(server: FakeKubeApiServer) -> None:
    answer = call(
        server, "POST", f"{NODES}?fieldValidation=Ignore", {"metadata": {"name": "gpu-e"}, "extra": 1}
    )
    assert answer.status == 201
    assert answer.warnings == []
    assert "extra" not in answer.body


def test_field_validation_takes_only_its_three_values(server: FakeKubeApiServer) -> None:
    """ValidateCreateOptions: 422 on the CreateOptions, its supported values sorted, "" first."""
    answer = call(server, "POST", f"{NODES}?fieldValidation=Loose", {"metadata": {"name": "gpu-f"}})
    assert answer.status == 422
    assert answer.body["details"]["kind"] == "CreateOptions"
    assert answer.body["details"]["causes"][0]["field"] == "fieldValidation"


# ---- values Go cannot hold ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            {"unschedulable": "yes"},
            messages.JSON_TYPE_ERROR.format(
                value="string", struct="NodeSpec", field="spec.unschedulable", type="bool"
            ),
        ),
        (
            {"taints": [{"key": 7, "effect": "NoSchedule"}]},
            messages.JSON_TYPE_ERROR.format(
                value="number", struct="Taint", field="spec.taints.key", type="string"
            ),
        ),
        (
            {"taints": {"key": "k"}},
            messages.JSON_TYPE_ERROR.format(
                value="object", struct="NodeSpec", field="spec.taints", type="[]v1.Taint"
            ),
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_400(
    server: FakeKubeApiServer, spec: dict[str, Any], error: str
) -> None:
    """encoding/json's UnmarshalTypeError names the struct, the path of JSON field names (no
    list indexes) and the Go type (decode.go addErrorContext)."""
    answer = call(server, "POST", NODES, {"metadata": {"name": "gpu-g"}, "spec": spec})
    assert answer.status == 400
    assert answer.body["message"] == messages.DECODE_FAILED.format(kind="Node", version="v1", error=error)


def test_a_whole_number_written_as_a_float_is_not_an_integer_to_go(server: FakeKubeApiServer) -> None:
    raw = b'{"metadata": {"name": "gpu-h", "generation": 1.0}}'
    answer = call(server, "POST", NODES, raw=raw)
    error = messages.JSON_TYPE_ERROR.format(
        value="number 1.0", struct="ObjectMeta", field="metadata.generation", type="int64"
    )
    assert answer.status == 400
    assert answer.body["message"] == messages.DECODE_FAILED.format(kind="Node", version="v1", error=error)


# ---- what is written back ----------------------------------------------------------------------

# Go structs (and the apimachinery types that are structs underneath) are never empty to
# omitempty: they are always written.
_STRUCT_LIKE = {"meta.Time", "meta.MicroTime", "intstr.IntOrString", "resource.Quantity", "meta.FieldsV1"}


def _fields(type_name: str) -> list[tuple[str, str, bool]]:
    fields: list[tuple[str, str, bool]] = []
    for spec in STRUCTS[type_name]:
        parts = spec.split()
        if parts[0] == ",inline":
            fields.extend(_fields(parts[1]))
        else:
            fields.append((parts[0], parts[1], parts[-1] == "omitempty"))
    return fields


def _resolve(type_name: str) -> str:
    while type_name in NAMED:
        type_name = NAMED[type_name]
    return type_name


def _is_empty(value: Any) -> bool:
    return value is None or value is False or (value == 0 and value is not True) or value in ("", [], {})


def _check(type_name: str, value: Any, path: str, problems: list[str]) -> None:
    """Every field as encoding/json writes it: a struct always, an omitempty field only when not
    empty, any other field always (nil lists, maps and pointers as null)."""
    type_name = _resolve(type_name)
    if value is None:
        return
    if type_name.startswith("*"):
        _check(type_name[1:], value, path, problems)
    elif type_name.startswith("[]"):
        for i, item in enumerate(value):
            _check(type_name[2:], item, f"{path}[{i}]", problems)
    elif type_name.startswith("map["):
        for key, item in value.items():
            _check(type_name.split("]", 1)[1], item, f"{path}.{key}", problems)
    elif type_name in STRUCTS:
        fields = _fields(type_name)
        problems.extend(
            f"{path}.{k}: not a field of {type_name}" for k in value if k not in {f[0] for f in fields}
        )
        for name, field_type, omitempty in fields:
            here = f"{path}.{name}".lstrip(".")
            resolved = _resolve(field_type)
            # A pointer is empty only when nil; a struct value never is.
            pointer = resolved.startswith("*")
            always = not pointer and (resolved in STRUCTS or resolved in _STRUCT_LIKE)
            if name not in value:
                if always or not omitempty:
                    problems.append(f"{here}: missing, but Go writes it")
                continue
            empty = value[name] is None if pointer else _is_empty(value[name])
            if omitempty and not always and empty:
                problems.append(f"{here}: empty and omitempty, but written ({value[name]!r})")
            _check(field_type, value[name], here, problems)


def _problems(type_name: str, obj: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    _check(type_name, obj, "", problems)
    return problems


SERVED = [
    ("core.Node", f"{NODES}/gpu-a"),
    ("core.Pod", f"{PODS}/trainer-0"),
    ("core.Pod", f"{PODS}/waiting"),
    ("policy.PodDisruptionBudget", f"{PDBS}/trainers"),
    ("coordination.Lease", f"{LEASES}/nodeheal-exporter"),
    ("core.Event", f"{EVENTS}/gpu-a.xid"),
]


@pytest.mark.parametrize(("type_name", "path"), SERVED)
def test_served_objects_omit_exactly_the_empty_omitempty_fields(
    server: FakeKubeApiServer, type_name: str, path: str
) -> None:
    read = call(server, "GET", path).body
    assert _problems(type_name, read) == []
    listed = call(server, "GET", path.rsplit("/", 1)[0]).body["items"]
    for item in listed:
        # TypeMeta is empty in list items (kubernetes/kubernetes#3030), and omitempty.
        assert "kind" not in item and "apiVersion" not in item
        assert _problems(type_name, item) == []


CREATED = [
    (
        "core.Node",
        NODES,
        {
            "metadata": {"name": "bare", "labels": {}, "finalizers": []},
            "spec": {"unschedulable": False, "taints": [], "podCIDRs": [], "providerID": ""},
        },
    ),
    (
        "core.Pod",
        PODS,
        {
            "metadata": {"name": "bare"},
            "spec": {"containers": [{"name": "main", "image": "busybox", "ports": []}]},
        },
    ),
    (
        "core.Event",
        EVENTS,
        {"metadata": {"name": "bare"}, "involvedObject": {"kind": "Node", "name": "gpu-a"}, "count": 0},
    ),
    (
        "policy.PodDisruptionBudget",
        PDBS,
        {
            "metadata": {"name": "bare"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "none"}}},
        },
    ),
    ("coordination.Lease", LEASES, {"metadata": {"name": "bare"}, "spec": {"holderIdentity": ""}}),
]


@pytest.mark.parametrize(("type_name", "path", "body"), CREATED)
def test_empty_values_a_client_sends_are_written_as_go_writes_them(
    server: FakeKubeApiServer, type_name: str, path: str, body: dict[str, Any]
) -> None:
    created = call(server, "POST", path, body)
    assert created.status == 201, created.body
    assert _problems(type_name, created.body) == []
    assert _problems(type_name, call(server, "GET", f"{path}/bare").body) == []


def test_an_uncordoned_node_has_no_unschedulable_and_no_taints(server: FakeKubeApiServer) -> None:
    """NodeSpec.Unschedulable and NodeSpec.Taints are ``omitempty``: false and [] are not written."""
    answer = call(
        server,
        "PATCH",
        f"{NODES}/gpu-a",
        {"spec": {"unschedulable": False, "taints": []}},
        content_type=MERGE_PATCH,
    )
    assert answer.status == 200
    assert "unschedulable" not in answer.body["spec"] and "taints" not in answer.body["spec"]


def test_fields_without_omitempty_are_written_even_when_empty(server: FakeKubeApiServer) -> None:
    """Event.reportingComponent has no omitempty and eventTime is a MicroTime struct (null when
    zero); a waiting container's ``ready: false`` and a PDB's zero counts are written too."""
    event = call(server, "POST", EVENTS, CREATED[2][2]).body
    assert event["reportingComponent"] == "" and event["reportingInstance"] == ""
    assert event["eventTime"] is None and event["firstTimestamp"] is None
    assert "count" not in event
    pdb = call(server, "POST", PDBS, CREATED[3][2]).body
    assert {
        k: pdb["status"][k]
        for k in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
    } == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    lease = call(server, "POST", LEASES, CREATED[4][2]).body
    assert lease["spec"] == {"holderIdentity": ""}


def test_times_are_written_in_utc_to_the_second(server: FakeKubeApiServer) -> None:
    """metav1.Time keeps whole seconds (its protobuf form drops nanoseconds, time_proto.go
    ProtoTime) and MarshalJSON writes ``t.UTC().Format(time.RFC3339)``."""
    patch = {
        "status": {
            "conditions": [
                {
                    "type": "GPUProblem",
                    "status": "True",
                    "lastTransitionTime": "2026-11-21T12:00:05.987654+02:00",
                }
            ]
        }
    }
    answer = call(server, "PATCH", f"{NODES}/gpu-a/status", patch, content_type=STRATEGIC_MERGE_PATCH)
    assert answer.status == 200
    condition = next(c for c in answer.body["status"]["conditions"] if c["type"] == "GPUProblem")
    assert condition["lastTransitionTime"] == "2026-11-21T10:00:05Z"
