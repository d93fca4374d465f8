"""The simulated cluster at fleet scale: building it, and faults as detectors report them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from nodeheal.sim.cluster import ClusterLayout, ClusterTimings, SimulatedCluster
from nodeheal.sim.store import ClusterStore
from nodeheal.sim.timeline import Timeline


class _Ec2:
    """What building the cluster needs from AWS: instance ids Karpenter's launches would get."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def run_instance(self, **_: object) -> str:
        return f"i-{next(self._ids):017x}"


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
