"""Watch streams through `kubernetes.watch.Watch` and raw HTTP, plus leases and events.

Every test that needs a watch to be open, or time to pass, waits on what the fake reports (a
watch is open, a request was answered) or moves the store's clock; none sleeps.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch

from nodeheal.grants import PolicyRule
from nodeheal.sim.apiserver import (
    ClusterStore,
    FakeKubeApiServer,
    make_event,
    make_lease,
    make_node,
    make_pod,
)
from nodeheal.sim.apiserver.authorizer import RbacAuthorizer, RoleBinding, service_account
from nodeheal.sim.apiserver.clock import ManualClock
from nodeheal.sim.apiserver.messages import (
    ETCD_WATCH_TOO_OLD_RESOURCE_VERSION,
    INTERNAL_ERROR,
    TOO_LARGE_RESOURCE_VERSION,
    TOO_LARGE_RESOURCE_VERSION_CAUSE,
    WATCH_CACHE_TOO_OLD_RESOURCE_VERSION,
)
from nodeheal.sim.apiserver.objectstore import COMPACTION_INTERVAL_SECONDS
from nodeheal.sim.apiserver.watchcache import EVENT_FRESH_SECONDS, LOWER_BOUND_CAPACITY

NODES = "^/api/v1/nodes$"
#: Bounds a test that would otherwise hang; never what a test waits for.
HANG = 30


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(
        make_node("gpu-a", instance_id="i-0a"), make_node("gpu-b", instance_id="i-0b", node_pool="other")
    )
    with FakeKubeApiServer(store, bookmark_interval=0.2) as srv:
        yield srv


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def timed(clock: ManualClock) -> Iterator[FakeKubeApiServer]:
    """A server whose time moves only when the test advances `clock`."""
    store = ClusterStore(clock=clock)
    store.add(make_node("gpu-a", instance_id="i-0a"))
    with FakeKubeApiServer(store, bookmark_interval=60.0) as srv:
        yield srv


def background(fn: Callable[[], None]) -> tuple[threading.Thread, queue.Queue[BaseException]]:
    errors: queue.Queue[BaseException] = queue.Queue()

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test thread
            errors.put(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


class RawWatch:
    """A watch read line by line on its own thread: each event as it arrives, then how it ended
    (``"end"`` after the terminating chunk, the exception after an abrupt close)."""

    def __init__(self, server: FakeKubeApiServer, path: str, **query: str) -> None:
        self._http = urllib3.PoolManager(retries=False)
        self.events: queue.Queue[Any] = queue.Queue()
        self._response = self._http.request(
            "GET",
            f"{server.url}{path}",
            fields={"watch": "true", **query},
            preload_content=False,
            timeout=urllib3.Timeout(connect=HANG, read=HANG),
        )
        self.status = self._response.status
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            buffer = b""
            for chunk in self._response.stream(amt=None):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self.events.put(json.loads(line))
            self.events.put("end")
        except Exception as exc:  # handed to the test thread
            self.events.put(exc)

    def next(self) -> Any:
        return self.events.get(timeout=HANG)

    def rest(self) -> list[Any]:
        """Every event up to the clean end of the stream."""
        out: list[Any] = []
        while (event := self.next()) != "end":
            assert not isinstance(event, Exception), event
            out.append(event)
        return out


def collect(server: FakeKubeApiServer, clock: ManualClock, path: str, **query: str) -> list[Any]:
    """All a watch replays from its resourceVersion, on a server whose clock the test moves: the
    stream is opened, then ended by moving the clock past its one-second timeout."""
    pattern = f"^{path}$"
    opened = server.faults.watches_started(pattern)
    stream = RawWatch(server, path, timeoutSeconds="1", **query)
    server.faults.wait_for_watch(pattern, started_after=opened)
    clock.advance(1.0)
    return stream.rest()


# -- the stream ----------------------------------------------------------------------------------


def test_initial_state_then_live_events(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    """A watch without resourceVersion starts with the current state as ADDED events
    (``getIntervalFromStoreLocked`` in k8s.io/apiserver pkg/storage/cacher/watch_cache.go)."""
    seen: list[tuple[str, str]] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(core.list_node, timeout_seconds=HANG):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                w.stop()

    thread, errors = background(consume)
    server.faults.wait_for_watch(NODES)
    server.store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUHardwareError", "Xid 79")
    server.store.remove("nodes", "gpu-b")
    thread.join(HANG)
    assert errors.empty()
    assert seen == [("ADDED", "gpu-a"), ("ADDED", "gpu-b"), ("MODIFIED", "gpu-a"), ("DELETED", "gpu-b")]


def test_resume_from_resource_version_replays_history(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """A watch from a resourceVersion replays the cached events after it
    (``getAllEventsSinceLocked`` in pkg/storage/cacher/watch_cache.go)."""
    listed = core.list_node()
    server.store.heartbeat("gpu-a")
    server.store.add(make_node("gpu-c", instance_id="i-0c"))
    events = list(
        watch.Watch().stream(
            core.list_node, resource_version=listed.metadata.resource_version, timeout_seconds=1
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("MODIFIED", "gpu-a"),
        ("ADDED", "gpu-c"),
    ]


def test_label_selector_turns_leaving_into_deleted(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    """An object that stops (starts) matching the selector is DELETED (ADDED) for the watcher
    (``cacheWatcher.convertToWatchEvent`` in pkg/storage/cacher/cache_watcher.go)."""
    rv = core.list_node().metadata.resource_version
    core.patch_node("gpu-a", {"metadata": {"labels": {"karpenter.sh/nodepool": "moved"}}})
    core.patch_node("gpu-b", {"metadata": {"labels": {"karpenter.sh/nodepool": "gpu"}}})
    events = list(
        watch.Watch().stream(
            core.list_node, label_selector="karpenter.sh/nodepool=gpu", resource_version=rv, timeout_seconds=1
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("DELETED", "gpu-a"),
        ("ADDED", "gpu-b"),
    ]


def test_bookmarks_and_server_timeout(timed: FakeKubeApiServer, clock: ManualClock) -> None:
    """Bookmarks carry the latest resourceVersion, one goes out as the timeout ends the stream,
    which ends cleanly (``cacheWatcher.nextBookmarkTime`` and the watch's timeout in
    pkg/storage/cacher/cache_watcher.go). The store's clock drives both: no waiting."""
    store = timed.store
    start = str(store.resource_version)
    stream = RawWatch(
        timed,
        "/api/v1/nodes",
        resourceVersion=start,
        allowWatchBookmarks="true",
        timeoutSeconds="300",
    )
    timed.faults.wait_for_watch(NODES)
    store.add(make_lease("other", "kube-system", holder="someone"))  # moves the version, not a Node
    clock.advance(60.0)
    bookmark = stream.next()
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(store.resource_version), "creationTimestamp": None},
        },
    }
    clock.advance(240.0)
    closing = stream.rest()
    assert closing and {e["type"] for e in closing} == {"BOOKMARK"}


# -- expired resourceVersions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "served"), [(EVENT_FRESH_SECONDS - 1, True), (EVENT_FRESH_SECONDS + 1, False)]
)
def test_watch_cache_window_keeps_75_seconds_or_the_last_100_events(
    timed: FakeKubeApiServer, clock: ManualClock, age: float, served: bool
) -> None:
    """A full window doubles when its oldest event is younger than ``eventFreshDuration`` (75 s)
    and drops its oldest otherwise (``resizeCacheLocked``/``updateCache`` in
    k8s.io/apiserver pkg/storage/cacher/watch_cache.go); a watch from before the window is 410
    messages.WATCH_CACHE_TOO_OLD_RESOURCE_VERSION (``getAllEventsSinceLocked``)."""
    store = timed.store
    before_add = 1  # the fixture's Node was the store's first write, over version 1
    for _ in range(LOWER_BOUND_CAPACITY - 1):
        store.heartbeat("gpu-a")  # with the ADDED, the window's first 100 events
    clock.advance(age)
    store.heartbeat("gpu-a")
    events = collect(timed, clock, "/api/v1/nodes", resourceVersion=str(before_add))
    if served:
        assert [e["type"] for e in events] == ["ADDED"] + ["MODIFIED"] * LOWER_BOUND_CAPACITY
        return
    oldest = before_add + 1  # the ADDED fell out; the window now starts right after it
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": WATCH_CACHE_TOO_OLD_RESOURCE_VERSION.format(requested=before_add, oldest=oldest),
                "reason": "Expired",
                "code": 410,
            },
        }
    ]
    # One version later is still in the window.
    assert len(collect(timed, clock, "/api/v1/nodes", resourceVersion=str(oldest))) == LOWER_BOUND_CAPACITY


def test_restarted_watch_cache_expires_every_earlier_version(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """An apiserver restart re-lists each watch cache at the current revision with an empty window
    (``watchCache.Replace`` in pkg/storage/cacher/watch_cache.go), so resuming from any earlier
    version is 410 and the client has to list again."""
    old = core.list_node().metadata.resource_version
    server.store.heartbeat("gpu-a")
    server.store.restart_watch_caches()
    current = server.store.resource_version
    resp = core.list_node(watch=True, resource_version=old, timeout_seconds=1, _preload_content=False)
    first = json.loads(resp.read().decode().splitlines()[0])
    assert (first["type"], first["object"]["code"], first["object"]["reason"]) == ("ERROR", 410, "Expired")
    assert first["object"]["message"] == WATCH_CACHE_TOO_OLD_RESOURCE_VERSION.format(
        requested=old, oldest=current
    )
    # The client retries once on its own without a timeout, then gives up with 410.
    with pytest.raises(client.ApiException) as err:
        list(watch.Watch().stream(core.list_node, resource_version=old))
    assert err.value.status == 410
    assert list(watch.Watch().stream(core.list_node, resource_version=str(current), timeout_seconds=1)) == []


@pytest.mark.parametrize(
    ("elapsed", "served"),
    [(2 * COMPACTION_INTERVAL_SECONDS - 1, True), (2 * COMPACTION_INTERVAL_SECONDS, False)],
)
def test_uncached_events_watch_expires_with_etcd_compaction(
    timed: FakeKubeApiServer, clock: ManualClock, elapsed: float, served: bool
) -> None:
    """Events have no watch cache in kube-apiserver 1.33 (``DefaultWatchCacheSizes``), so their
    watches are etcd's: a revision lives until the compactor's second run after it, which
    compacts to the revision its first run saw (``runCompactLoop``/``compact`` in
    k8s.io/apiserver pkg/storage/etcd3/compact.go, every 5 minutes), and a watch from a compacted
    revision is 410 with messages.ETCD_WATCH_TOO_OLD_RESOURCE_VERSION
    (``interpretWatchError`` in pkg/storage/etcd3/errors.go). Node watches, served by their
    watch cache, are not affected."""
    store = timed.store
    before = store.resource_version
    node = store.get("nodes", "gpu-a")
    store.add(make_event("gpu-a.1", "default", involved=node, reason="XidError", message="Xid 79"))
    clock.advance(elapsed)
    # Each run of the compactor is itself one write (compact_rev_key).
    assert store.resource_version == before + 1 + int(elapsed // COMPACTION_INTERVAL_SECONDS)
    lines = collect(timed, clock, "/api/v1/events", resourceVersion=str(before))
    if served:
        assert [(e["type"], e["object"]["message"]) for e in lines] == [("ADDED", "Xid 79")]
    else:
        assert [e["type"] for e in lines] == ["ERROR"]
        assert lines[0]["object"] == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": ETCD_WATCH_TOO_OLD_RESOURCE_VERSION,
            "reason": "Expired",
            "code": 410,
        }
    # Nothing happened to Nodes since, and their window still reaches back.
    assert collect(timed, clock, "/api/v1/nodes", resourceVersion=str(before)) == []


def test_watch_from_a_future_version_is_an_error_event_after_the_cache_wait(
    timed: FakeKubeApiServer, clock: ManualClock
) -> None:
    """The watch cache waits ``blockTimeout`` (3 s) for a version it has not seen, then ends the
    stream with an ERROR event, not an HTTP error (``waitUntilFreshAndBlock`` in
    pkg/storage/cacher/watch_cache.go, returned through ``newErrWatcher`` in cacher.go):
    504 Timeout with the ResourceVersionTooLarge cause and a one-second retry
    (``NewTooLargeResourceVersionError`` in pkg/storage/errors.go)."""
    current = timed.store.resource_version
    stream = RawWatch(timed, "/api/v1/nodes", resourceVersion=str(current + 5), timeoutSeconds="60")
    assert stream.status == 200
    timed.faults.wait_for_watch(NODES)
    clock.advance(3.0)
    assert stream.next() == {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": TOO_LARGE_RESOURCE_VERSION.format(requested=current + 5, current=current),
            "reason": "Timeout",
            "details": {
                "causes": [
                    {"reason": "ResourceVersionTooLarge", "message": TOO_LARGE_RESOURCE_VERSION_CAUSE}
                ],
                "retryAfterSeconds": 1,
            },
            "code": 504,
        },
    }
    assert stream.next() == "end"


def test_watch_from_a_future_version_starts_once_the_store_reaches_it(
    timed: FakeKubeApiServer, clock: ManualClock
) -> None:
    """Within ``blockTimeout`` the cache catches up and the watch is served from that version."""
    store = timed.store
    target = store.resource_version + 1
    stream = RawWatch(timed, "/api/v1/nodes", resourceVersion=str(target), timeoutSeconds="60")
    timed.faults.wait_for_watch(NODES)
    clock.advance(2.0)
    store.heartbeat("gpu-a")  # reaches target
    store.heartbeat("gpu-a")
    event = stream.next()
    assert (event["type"], event["object"]["metadata"]["resourceVersion"]) == ("MODIFIED", str(target + 1))


# -- injected faults -----------------------------------------------------------------------------


def test_dropped_watch_surfaces_protocol_error(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    """A server going away closes the stream without its terminating chunk."""

    def consume() -> None:
        for _ in watch.Watch().stream(core.list_node, timeout_seconds=HANG):
            pass

    thread, errors = background(consume)
    server.faults.wait_for_watch(NODES)
    assert server.faults.drop_watches() == 1
    thread.join(HANG)
    assert isinstance(errors.get(timeout=HANG), urllib3.exceptions.ProtocolError)


def test_injected_expiry_reaches_open_watch(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    """An injected 410 is the cacher's Expired Status, as a client's relist path expects it."""

    def consume() -> None:
        for _ in watch.Watch().stream(core.list_node, timeout_seconds=HANG):
            pass

    thread, errors = background(consume)
    server.faults.wait_for_watch(NODES)
    assert server.faults.expire_watches() == 1
    thread.join(HANG)
    error: Any = errors.get(timeout=HANG)
    assert isinstance(error, client.ApiException)
    assert error.status == 410


def test_injected_internal_error_ends_the_stream_with_its_status(server: FakeKubeApiServer) -> None:
    """An etcd failure under a watch reaches the client as an ERROR event carrying an
    InternalError Status (``transformErrorToEvent`` in k8s.io/apiserver
    pkg/storage/etcd3/watcher.go, ``NewInternalError`` in apimachinery's errors.go); then the
    stream ends."""
    stream = RawWatch(server, "/api/v1/nodes", resourceVersion=str(server.store.resource_version))
    server.faults.wait_for_watch(NODES)
    assert server.faults.error_watches(500, "etcdserver: request timed out", path=NODES) == 1
    assert stream.next() == {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": INTERNAL_ERROR.format("etcdserver: request timed out"),
            "reason": "InternalError",
            "details": {"causes": [{"message": "etcdserver: request timed out"}]},
            "code": 500,
        },
    }
    assert stream.next() == "end"


def test_a_watch_after_its_binding_is_deleted_is_forbidden() -> None:
    """RBAC is checked when a request arrives (``WithAuthorization`` in
    k8s.io/apiserver pkg/endpoints/filters/authorization.go): a watch opened after the
    (Cluster)RoleBinding is deleted is refused with 403, an open one is not cut."""
    user = service_account("nodeheal", "watcher")
    authorizer = RbacAuthorizer(
        [
            RoleBinding(
                "node-reader",
                (PolicyRule(("",), ("nodes",), ("list", "watch"), "what the test reads"),),
                users=(user.name,),
            )
        ]
    )
    with FakeKubeApiServer(authorizer=authorizer) as srv:
        core = client.CoreV1Api(srv.api_client(authorizer.token_for(user)))
        rv = core.list_node().metadata.resource_version
        assert authorizer.unbind("node-reader") == 1
        with pytest.raises(client.ApiException) as err:
            core.list_node(watch=True, resource_version=rv, timeout_seconds=1)
        assert err.value.status == 403
        assert json.loads(err.value.body)["reason"] == "Forbidden"


# -- other resources ------------------------------------------------------------------------------


def test_pod_watch_sees_graceful_deletion(core: client.CoreV1Api, server: FakeKubeApiServer) -> None:
    """Deleting a pod first sets its deletionTimestamp (MODIFIED), then removes it (DELETED)."""
    server.store.time_scale = 0.001
    server.store.add(make_pod("p", "train", "gpu-a"))
    rv = core.list_namespaced_pod("train").metadata.resource_version
    core.delete_namespaced_pod("p", "train")
    types: list[str] = []
    for event in watch.Watch().stream(
        core.list_namespaced_pod, "train", resource_version=rv, timeout_seconds=HANG
    ):
        types.append(event["type"])
        if event["type"] == "DELETED":
            break
    assert types == ["MODIFIED", "DELETED"]


def test_lease_lifecycle_and_conflict(server: FakeKubeApiServer) -> None:
    coord = client.CoordinationV1Api(server.api_client())
    lease = coord.create_namespaced_lease("nodeheal", make_lease("exporter", "nodeheal", holder="pod-a"))
    assert lease.spec.holder_identity == "pod-a"
    lease.spec.holder_identity = "pod-b"
    renewed = coord.replace_namespaced_lease("exporter", "nodeheal", lease)
    assert renewed.spec.holder_identity == "pod-b"
    lease.spec.holder_identity = "pod-c"
    with pytest.raises(client.ApiException) as err:
        coord.replace_namespaced_lease("exporter", "nodeheal", lease)
    assert err.value.status == 409
    patched = coord.patch_namespaced_lease("exporter", "nodeheal", {"spec": {"leaseDurationSeconds": 30}})
    assert patched.spec.lease_duration_seconds == 30
    coord.delete_namespaced_lease("exporter", "nodeheal")
    with pytest.raises(client.ApiException) as missing:
        coord.read_namespaced_lease("exporter", "nodeheal")
    assert json.loads(missing.value.body)["message"] == 'leases.coordination.k8s.io "exporter" not found'


def test_events_create_list_and_watch(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    node = server.store.get("nodes", "gpu-a")
    rv = core.list_event_for_all_namespaces().metadata.resource_version
    core.create_namespaced_event(
        "default", make_event("gpu-a.1", "default", involved=node, reason="XidError", message="Xid 79")
    )
    listed = core.list_event_for_all_namespaces(field_selector="involvedObject.name=gpu-a,reason=XidError")
    assert [e.reason for e in listed.items] == ["XidError"]
    events = list(
        watch.Watch().stream(core.list_event_for_all_namespaces, resource_version=rv, timeout_seconds=1)
    )
    assert [(e["type"], e["object"].message) for e in events] == [("ADDED", "Xid 79")]
