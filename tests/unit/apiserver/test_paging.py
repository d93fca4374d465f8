"""Lists with ``limit`` and ``continue`` through the real client: snapshots, tokens, expiry."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, make_pod
from nodeheal.sim.apiserver.clock import ManualClock
from nodeheal.sim.apiserver.messages import (
    CONTINUE_EXPIRED_INCONSISTENT,
    CONTINUE_INVALID_START_RV,
    CONTINUE_KEY_NOT_VALID,
    CONTINUE_WITH_RESOURCE_VERSION,
    INVALID_CONTINUE_TOKEN,
)
from nodeheal.sim.apiserver.objectstore import COMPACTION_INTERVAL_SECONDS

NODES = ("gpu-a", "gpu-b", "gpu-c")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> Iterator[FakeKubeApiServer]:
    store = ClusterStore(clock=clock)
    store.add(*(make_node(name, instance_id=f"i-0{name[-1]}") for name in NODES))
    with FakeKubeApiServer(store) as srv:
        yield srv


def raw_list(core: client.CoreV1Api, **kwargs: Any) -> dict[str, Any]:
    resp = core.list_node(_preload_content=False, **kwargs)
    body: dict[str, Any] = json.loads(resp.data)
    return body


def token(value: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    return decoded


def make_token(content: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(content).encode()).rstrip(b"=").decode()


def error_of(call: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(client.ApiException) as err:
        call()
    return err.value.status, json.loads(err.value.body)


def test_later_pages_show_the_objects_as_they_were_at_the_first(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """Every page after the first is read from etcd at the revision in the continue token
    (``GetList`` in k8s.io/apiserver pkg/storage/etcd3/store.go, v0.33.1), so a paged list is one
    consistent snapshot: an object changed, deleted or created after the first page shows as it
    was. ``remainingItemCount`` is the keys after the page (``PrepareContinueToken`` in
    pkg/storage/continue.go), and the last page has neither it nor a token."""
    store = server.store
    first = raw_list(core, limit=1)
    snapshot = first["metadata"]["resourceVersion"]
    before_b = store.get("nodes", "gpu-b")
    store.set_node_condition("gpu-b", "GPUProblem", "True", "GPUHardwareError", "Xid 79")
    store.remove("nodes", "gpu-c")
    store.add(make_node("gpu-d", instance_id="i-0d"))
    second = raw_list(core, limit=1, _continue=first["metadata"]["continue"])
    third = raw_list(core, limit=1, _continue=second["metadata"]["continue"])
    assert [[n["metadata"]["name"] for n in page["items"]] for page in (first, second, third)] == [
        ["gpu-a"],
        ["gpu-b"],
        ["gpu-c"],
    ]
    # List items carry no kind or apiVersion (kubernetes#3030); the object is otherwise as it was.
    assert second["items"][0] == {k: v for k, v in before_b.items() if k not in ("kind", "apiVersion")}
    assert [page["metadata"]["resourceVersion"] for page in (first, second, third)] == [snapshot] * 3
    assert [page["metadata"].get("remainingItemCount") for page in (first, second, third)] == [2, 1, None]
    assert "continue" not in third["metadata"]
    # A new list sees today's state.
    assert [n.metadata.name for n in core.list_node(limit=10).items] == ["gpu-a", "gpu-b", "gpu-d"]


def test_continue_token_is_the_storage_key_and_revision(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """``storage.EncodeContinue`` (pkg/storage/continue.go): unpadded base64url JSON holding the
    API version, the revision and the key after the list's prefix, just past the last key read.
    A namespaced list's prefix includes the namespace; an all-namespaces list's does not."""
    first = raw_list(core, limit=2)
    assert token(first["metadata"]["continue"]) == {
        "v": "meta.k8s.io/v1",
        "rv": int(first["metadata"]["resourceVersion"]),
        "start": "gpu-b\x00",
    }
    assert "=" not in first["metadata"]["continue"]
    server.store.add(make_pod("p-0", "train", "gpu-a"), make_pod("p-1", "train", "gpu-a"))
    namespaced = core.list_namespaced_pod("train", limit=1, _preload_content=False)
    every = core.list_pod_for_all_namespaces(limit=1, _preload_content=False)
    assert token(json.loads(namespaced.data)["metadata"]["continue"])["start"] == "p-0\x00"
    assert token(json.loads(every.data)["metadata"]["continue"])["start"] == "train/p-0\x00"


def test_selectors_page_by_matches_and_hide_the_remaining_count(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """A page holds ``limit`` matching objects; with a selector the list still says there is
    more while any key follows (even if none of them match), and ``remainingItemCount`` is left
    out because etcd's count includes non-matching keys (etcd3 ``GetList``)."""
    server.store.add(make_node("gpu-d", instance_id="i-0d", node_pool="other"))
    first = raw_list(core, limit=2, label_selector="karpenter.sh/nodepool=gpu")
    assert [n["metadata"]["name"] for n in first["items"]] == ["gpu-a", "gpu-b"]
    assert "remainingItemCount" not in first["metadata"]
    second = raw_list(
        core, limit=2, label_selector="karpenter.sh/nodepool=gpu", _continue=first["metadata"]["continue"]
    )
    assert [n["metadata"]["name"] for n in second["items"]] == ["gpu-c"]
    assert "continue" not in second["metadata"]


def test_compacted_continue_token_is_410_with_a_fresh_token(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """Once etcd compacted the token's revision, the next page is 410 Expired with
    ``inconsistentContinue`` and a new token at resourceVersion -1 for the same key
    (``handleCompactedErrorForPaging`` in k8s.io/apiserver pkg/storage/etcd3/errors.go); that
    token continues at the latest revision, showing today's objects."""
    store = server.store
    first = raw_list(core, limit=1)
    store.set_node_condition("gpu-b", "GPUProblem", "True", "GPUHardwareError", "Xid 79")
    store.compact()
    status, body = error_of(lambda: core.list_node(limit=1, _continue=first["metadata"]["continue"]))
    assert status == 410
    fresh = body["metadata"]["continue"]
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {"continue": fresh},
        "status": "Failure",
        "message": CONTINUE_EXPIRED_INCONSISTENT,
        "reason": "Expired",
        "code": 410,
    }
    assert token(fresh) == {"v": "meta.k8s.io/v1", "rv": -1, "start": "gpu-a\x00"}
    rest = raw_list(core, limit=1, _continue=fresh)
    assert rest["items"][0]["metadata"]["resourceVersion"] == str(store.resource_version)
    assert rest["metadata"]["resourceVersion"] == str(store.resource_version)
    assert token(rest["metadata"]["continue"])["rv"] == store.resource_version


@pytest.mark.parametrize(
    ("elapsed", "expired"),
    [
        (COMPACTION_INTERVAL_SECONDS, False),
        (2 * COMPACTION_INTERVAL_SECONDS - 1, False),
        (2 * COMPACTION_INTERVAL_SECONDS, True),
    ],
)
def test_continue_tokens_live_until_the_second_compaction_after_them(
    server: FakeKubeApiServer, core: client.CoreV1Api, clock: ManualClock, elapsed: float, expired: bool
) -> None:
    """kube-apiserver's compactor runs every 5 minutes; each run writes ``compact_rev_key`` (one
    revision) and compacts to the revision its previous run saw, the first run only recording one
    (``runCompactLoop``/``compact`` in k8s.io/apiserver pkg/storage/etcd3/compact.go). A token is
    good for 5 to 10 minutes."""
    first = raw_list(core, limit=1)
    clock.advance(elapsed)
    if expired:
        status, body = error_of(lambda: core.list_node(limit=1, _continue=first["metadata"]["continue"]))
        assert (status, body["message"]) == (410, CONTINUE_EXPIRED_INCONSISTENT)
    else:
        page = raw_list(core, limit=1, _continue=first["metadata"]["continue"])
        assert [n["metadata"]["name"] for n in page["items"]] == ["gpu-b"]
    runs = int(elapsed // COMPACTION_INTERVAL_SECONDS)
    assert raw_list(core)["metadata"]["resourceVersion"] == str(
        int(first["metadata"]["resourceVersion"]) + runs
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "abc$",
            INVALID_CONTINUE_TOKEN.format(f"{CONTINUE_KEY_NOT_VALID}: illegal base64 data at input byte 3"),
        ),
        (
            make_token({"v": "meta.k8s.io/v1", "rv": 0, "start": "gpu-a\x00"}),
            INVALID_CONTINUE_TOKEN.format(CONTINUE_INVALID_START_RV),
        ),
        (
            make_token({"v": "meta.k8s.io/v1", "rv": 5, "start": "../secrets/x"}),
            INVALID_CONTINUE_TOKEN.format(f"{CONTINUE_KEY_NOT_VALID}: ../secrets/x"),
        ),
    ],
)
def test_bad_continue_tokens_are_400(core: client.CoreV1Api, value: str, message: str) -> None:
    """``storage.DecodeContinue`` errors, wrapped by ``ValidateListOptions`` into a 400
    (pkg/storage/continue.go, pkg/storage/interfaces.go); a start key may not leave the prefix."""
    status, body = error_of(lambda: core.list_node(limit=1, _continue=value))
    assert (status, body["reason"], body["message"]) == (400, "BadRequest", message)


def test_continue_with_a_resource_version_is_400(core: client.CoreV1Api) -> None:
    """A continue token fixes the revision; a resourceVersion beside it is refused
    (``ValidateListOptions`` in k8s.io/apiserver pkg/storage/interfaces.go)."""
    first = raw_list(core, limit=1)
    status, body = error_of(
        lambda: core.list_node(limit=1, _continue=first["metadata"]["continue"], resource_version="1")
    )
    assert (status, body["message"]) == (400, CONTINUE_WITH_RESOURCE_VERSION)
