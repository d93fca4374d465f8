"""A node whose kubelet died: graceful pod deletions never finish; a force delete still does.

On a real cluster the API server only marks a graceful deletion (deletionTimestamp and
deletionGracePeriodSeconds; k8s.io/apiserver registry Store.Delete and rest.BeforeDelete,
https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/generic/registry/store.go#L1128);
the object goes when the pod's kubelet has stopped the containers and sends the final delete with
grace period 0 and the pod's uid as a precondition (status_manager.go syncPod,
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/kubelet/status/status_manager.go).
With that kubelet dead nothing sends it, while a client's delete with gracePeriodSeconds=0 is
carried out by the API server alone (rest.BeforeDelete shortens the grace period to 0 and the
registry deletes the object at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, make_pod

NS = "train"


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    # 1 simulated second = 1 ms: a 30 s grace period is over in 30 ms.
    store = ClusterStore(time_scale=0.001)
    store.add(make_node("gpu-a", instance_id="i-0a"), make_node("gpu-b", instance_id="i-0b"))
    with FakeKubeApiServer(store) as srv:
        yield srv
    store.close()


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def removed(server: FakeKubeApiServer) -> dict[str, threading.Event]:
    events: dict[str, threading.Event] = {}
    for name in ("a", "b", "c", "fresh"):
        events[name] = threading.Event()
    server.store.on("pod_deleted", lambda pod: events[pod["metadata"]["name"]].set())
    return events


def test_pods_deleted_with_grace_on_a_dead_kubelet_stay_terminating(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """Past its grace period, a pod on the dead kubelet's node is still there, Terminating; the
    same deletion on a live node finishes. An eviction (a delete with the pod's own grace
    period) is stuck the same way."""
    store = server.store
    gone = removed(server)
    store.add(
        make_pod("a", NS, "gpu-a", grace_seconds=30),
        make_pod("b", NS, "gpu-b", grace_seconds=30),
        make_pod("c", NS, "gpu-a", grace_seconds=30),
    )
    store.set_kubelet_alive("gpu-a", False)
    assert not store.kubelet_alive("gpu-a") and store.kubelet_alive("gpu-b")
    core.delete_namespaced_pod("a", NS)
    core.delete_namespaced_pod("b", NS)
    core.create_namespaced_pod_eviction(
        "c", NS, client.V1Eviction(metadata=client.V1ObjectMeta(name="c", namespace=NS))
    )
    assert gone["b"].wait(5)
    wait_for(lambda: store.stuck_terminating("gpu-a") == ["train/a", "train/c"], "the grace periods to end")
    for name in ("a", "c"):
        pod = core.read_namespaced_pod(name, NS)
        assert pod.metadata.deletion_timestamp is not None
        assert pod.metadata.deletion_grace_period_seconds == 30
    assert not gone["a"].is_set() and not gone["c"].is_set()


def test_a_force_delete_still_removes_a_pod_of_a_dead_kubelet(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """gracePeriodSeconds=0 needs no kubelet: the pod is gone at once, terminating or not."""
    store = server.store
    store.add(make_pod("a", NS, "gpu-a", grace_seconds=30), make_pod("b", NS, "gpu-a", grace_seconds=30))
    store.set_kubelet_alive("gpu-a", False)
    core.delete_namespaced_pod("a", NS)
    wait_for(lambda: store.stuck_terminating("gpu-a") == ["train/a"], "the grace period to end")
    core.delete_namespaced_pod("a", NS, grace_period_seconds=0)
    core.delete_namespaced_pod("b", NS, grace_period_seconds=0)
    assert core.list_namespaced_pod(NS).items == []
    assert store.stuck_terminating("gpu-a") == []


def test_a_revived_kubelet_finishes_what_is_past_its_grace(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """The kubelet comes back (a reboot): it stops what is past its grace period and the pods go."""
    store = server.store
    gone = removed(server)
    store.add(make_pod("a", NS, "gpu-a", grace_seconds=30))
    store.set_kubelet_alive("gpu-a", False)
    core.delete_namespaced_pod("a", NS)
    wait_for(lambda: store.stuck_terminating("gpu-a") == ["train/a"], "the grace period to end")
    store.set_kubelet_alive("gpu-a", True)
    assert gone["a"].wait(5)
    assert core.list_namespaced_pod(NS).items == []


def test_a_new_node_of_the_same_name_has_a_live_kubelet(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """The switch belongs to the Node object: EC2 reuses private IPs, and the new Node that takes
    the name brings its own kubelet."""
    store = server.store
    gone = removed(server)
    store.set_kubelet_alive("gpu-a", False)
    store.remove("nodes", "gpu-a")
    store.add(make_node("gpu-a", instance_id="i-0new"), make_pod("fresh", NS, "gpu-a", grace_seconds=30))
    assert store.kubelet_alive("gpu-a")
    core.delete_namespaced_pod("fresh", NS)
    assert gone["fresh"].wait(5)
