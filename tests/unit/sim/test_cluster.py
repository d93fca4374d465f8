"""The simulated cluster at fleet scale: building it, and faults as detectors report them."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from nodeheal.sim.apiserver import FakeKubeApiServer, make_pod
from nodeheal.sim.apiserver.status import ApiError
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.cluster.layout import ClusterLayout, ClusterTimings
from nodeheal.sim.cluster.simulated_cluster import XID_79, SimulatedCluster
from nodeheal.sim.cluster.workload import JSON
from nodeheal.sim.timeline import Timeline


class _Ec2:
    """What building the cluster needs from AWS: instance ids Karpenter's launches would get."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def run_instance(self, **_: object) -> str:
        return f"i-{next(self._ids):017x}"

    def run_instances(self, count: int, **_: object) -> list[str]:
        return [self.run_instance() for _ in range(count)]


def _cluster(store: ClusterStore, nodes: int, timeline: Timeline | None = None) -> SimulatedCluster:
    return SimulatedCluster(
        store,
        _Ec2(),  # type: ignore[arg-type]
        timeline or Timeline(),
        cluster="training-on-eks",
        layout=ClusterLayout(gpu_nodes=nodes, training_workers=0, notebook_gpus=0),
        timings=ClusterTimings().scaled(300),
    )


@pytest.fixture(scope="module")
def fleet() -> Iterator[SimulatedCluster]:
    store = ClusterStore()
    cluster = _cluster(store, 1500)
    cluster.build()
    yield cluster
    store.close()


@pytest.mark.slow  # a thousand-node fleet: `make test` runs it, `make check` does not
def test_a_fleet_builds_with_distinct_node_and_pod_names(fleet: SimulatedCluster) -> None:
    nodes = [n["metadata"]["name"] for n in fleet.nodes()]
    pods = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in fleet.pods()]
    assert len(nodes) == len(set(nodes)) == 1501  # the GPU fleet and the system node
    # Four DaemonSet pods per GPU node, two per system node, and four system pods: drawn at
    # random, 6,000 five-character suffixes collide more often than not.
    assert len(pods) == len(set(pods)) == 1500 * 4 + 2 + 4


def test_the_same_seed_builds_the_same_cluster() -> None:
    first, second = ClusterStore(), ClusterStore()
    _cluster(first, 5).build()
    _cluster(second, 5).build()
    assert [n["metadata"]["name"] for n in first.list_objects("nodes")[0]] == [
        n["metadata"]["name"] for n in second.list_objects("nodes")[0]
    ]
    assert [p["metadata"]["name"] for p in first.list_objects("pods")[0]] == [
        p["metadata"]["name"] for p in second.list_objects("pods")[0]
    ]


def _gpu_problem(node: JSON) -> JSON:
    return next(c for c in node["status"]["conditions"] if c["type"] == "GPUProblem")


def test_inject_many_is_one_real_transition_per_node() -> None:
    store, timeline = ClusterStore(), Timeline()
    cluster = _cluster(store, 50, timeline)
    cluster.build()
    before = store.resource_version
    victims = cluster.gpu_nodes[:40]
    cluster.inject_many(victims, XID_79)
    events, _ = store.events_after(before, "nodes")
    # One MODIFIED per node, each its own resourceVersion, False -> True as the exporter sees it.
    assert [e.object["metadata"]["name"] for e in events] == victims
    assert [e.type for e in events] == ["MODIFIED"] * 40
    assert len({e.resource_version for e in events}) == 40
    for event in events:
        assert event.previous is not None
        assert _gpu_problem(event.previous)["status"] == "False"
        now = _gpu_problem(event.object)
        assert (now["status"], now["reason"], now["message"]) == ("True", XID_79.reason, XID_79.message)
        assert now["lastTransitionTime"] == now["lastHeartbeatTime"]
    assert [e.node for e in timeline.events("fault")] == victims
    untouched = cluster.node(cluster.gpu_nodes[-1])
    assert untouched is not None and _gpu_problem(untouched)["status"] == "False"


def test_inject_many_refuses_a_node_twice_and_changes_nothing_for_a_missing_node() -> None:
    store = ClusterStore()
    cluster = _cluster(store, 3)
    cluster.build()
    before = store.resource_version
    with pytest.raises(ValueError, match="distinct"):
        cluster.inject_many([cluster.gpu_nodes[0], cluster.gpu_nodes[0]], XID_79)
    with pytest.raises(ApiError):
        cluster.inject_many([cluster.gpu_nodes[0], "ip-10-0-0-0.nowhere"], XID_79)
    assert store.resource_version == before


@pytest.mark.slow  # a thousand-node fleet: `make test` runs it, `make check` does not
def test_a_thousand_faults_reach_a_watcher_through_the_api_server(fleet: SimulatedCluster) -> None:
    seen: list[str] = []
    with FakeKubeApiServer(fleet.store) as server:
        core = client.CoreV1Api(server.api_client())
        version = core.list_node().metadata.resource_version
        victims = fleet.gpu_nodes[:1000]
        fleet.inject_many(victims, XID_79)
        for event in watch.Watch().stream(core.list_node, resource_version=version, timeout_seconds=5):
            if event["type"] == "MODIFIED":
                conditions = {c.type: c.status for c in event["object"].status.conditions}
                if conditions["GPUProblem"] == "True":
                    seen.append(event["object"].metadata.name)
            if len(seen) == len(victims):
                break
    assert seen == victims


def test_the_scheduler_binds_pending_pods_and_skips_passes_when_nothing_changed() -> None:
    store = ClusterStore()
    cluster = _cluster(store, 2)
    cluster.build()
    selects = 0
    select = store.select

    def counting(*args: Any, **kwargs: Any) -> list[JSON]:
        nonlocal selects
        selects += 1
        return select(*args, **kwargs)

    store.select = counting  # type: ignore[method-assign]
    cluster.controllers.schedule_pending()
    cluster.controllers.schedule_pending()
    assert selects == 1  # the second pass saw the same store and did not look at a pod
    store.add(make_pod("trainer", "training", None, gpus=8, phase="Pending"))
    cluster.controllers.schedule_pending()
    bound = store.get("pods", "trainer", "training")
    assert bound["spec"]["nodeName"] in cluster.gpu_nodes
    assert selects == 2


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_dead_kubelet_holds_terminating_pods_until_the_node_reboots() -> None:
    """kill_kubelet uses the fake API server's switch: a deleted pod stays Terminating past its
    grace period (no kubelet sends the final delete, pkg/kubelet/status/status_manager.go syncPod),
    a pod bound meanwhile does not start, and the reboot brings the kubelet back, which finishes both."""
    store, timeline = ClusterStore(time_scale=0.001), Timeline()
    cluster = SimulatedCluster(
        store,
        _Ec2(),  # type: ignore[arg-type]
        timeline,
        cluster="training-on-eks",
        layout=ClusterLayout(gpu_nodes=1, training_workers=0, notebook_gpus=0),
        timings=ClusterTimings().scaled(3000),
    )
    cluster.build()
    node = cluster.gpu_nodes[0]
    store.add(make_pod("job-0", "training", node, grace_seconds=30))
    cluster.kill_kubelet(node)
    store.delete("pods", "job-0", "training")
    _wait_for(lambda: store.stuck_terminating(node) == ["training/job-0"], "the grace period to end")
    assert store.get("pods", "job-0", "training")["metadata"]["deletionTimestamp"]
    store.add(make_pod("late", "training", None, gpus=8, phase="Pending"))
    cluster.clock.start()
    try:
        cluster.controllers.schedule_pending()
        assert store.get("pods", "late", "training")["spec"]["nodeName"] == node
        cluster.agent.instances_rebooted([cluster.instance_of(node)])
        _wait_for(
            lambda: not store.select("pods", lambda p: p["metadata"]["name"] == "job-0"), "the pod to go"
        )
        _wait_for(
            lambda: store.get("pods", "late", "training")["status"]["phase"] == "Running",
            "the late pod to start",
        )
    finally:
        cluster.clock.stop()
        store.close()
    assert store.kubelet_alive(node)
    assert [e.kind for e in timeline.events(node=node) if e.kind in ("kubelet-dead", "node-rebooted")] == [
        "kubelet-dead",
        "node-rebooted",
    ]
    assert "the kubelet running again" in timeline.events("node-rebooted")[0].text
    kinds = [e.kind for e in timeline.events(node=node) if e.kind in ("node-rebooted", "pod-running")]
    assert kinds == ["node-rebooted", "pod-running"]  # the late pod started only with the kubelet
    assert cluster.clock.errors == []
