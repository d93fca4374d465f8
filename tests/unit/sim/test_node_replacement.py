"""Who replaces a terminated node in the seeded simulation's World, by the node's pool.

A Karpenter node is replaced by Karpenter: the Node object goes, then a replacement joins in the
same NodePool, sometimes under the old name (EC2 reuses private IPs). A managed node group's node is
replaced by its Auto Scaling group: a new instance joins under a new name with the labels and tags
EKS gives managed nodes, while the cloud node lifecycle controller deletes the old Node object on
its own schedule. These are the paths a NodeHeal terminate (or EKS node repair's) sets off.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from nodeheal.sim.seeded.world import World
from tests.unit.workflow.fakes import CLUSTER

START = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
NODE = "ip-10-0-1-13.us-west-2.compute.internal"


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def world_with(seed: int, pool_kind: str, pool: str) -> tuple[World, Clock, str]:
    clock = Clock()
    world = World(random.Random(seed), clock, cluster=CLUSTER)
    node = world.add_node(NODE, pool_kind=pool_kind, pool=pool)
    world.add_pod(NODE, "trainer")
    return world, clock, str(node["metadata"]["uid"])


def terminate_and_settle(world: World, clock: Clock) -> list[str]:
    """Terminate the node's instance and run the cluster's timers until nothing is left to do;
    returns the timers' labels in the order they ran."""
    world.instance_stopped(world.instance_of(NODE))
    ran = []
    while (due := world.next_timer_at()) is not None:
        clock.now = max(clock.now, due)
        timer = world.pop_due_timer()
        assert timer is not None
        ran.append(timer.label)
        timer.action()
    return ran


@pytest.mark.parametrize("seed", range(40))
def test_an_auto_scaling_group_replaces_a_managed_node_under_a_new_name(seed: int) -> None:
    world, clock, old_uid = world_with(seed, "nodegroup", "gpu-mng")
    old_instance = world.instance_of(NODE)
    ran = terminate_and_settle(world, clock)
    assert NODE not in world.nodes
    (replacement,) = world.nodes.values()
    name = replacement["metadata"]["name"]
    assert name != NODE and replacement["metadata"]["uid"] != old_uid
    assert ran[0] == f"node lifecycle controller deletes {NODE}"
    assert any(label.startswith("auto scaling group gpu-mng launches ip-10-0-") for label in ran)
    labels = replacement["metadata"]["labels"]
    assert labels["eks.amazonaws.com/nodegroup"] == "gpu-mng"
    assert labels["eks.amazonaws.com/capacityType"] == "ON_DEMAND"
    assert [key for key in labels if key.startswith(("karpenter.sh/", "karpenter.k8s.aws/"))] == []
    assert world.instances[old_instance].state == "terminated"
    new_instance = world.instances[world.instance_of(name)]
    assert new_instance.instance_id != old_instance and new_instance.state == "running"
    assert new_instance.tags == {
        f"kubernetes.io/cluster/{CLUSTER}": "owned",
        "eks:cluster-name": CLUSTER,
        "eks:nodegroup-name": "gpu-mng",
    }
    assert world.pods_on(name), "the replacement runs the workload again"


def test_the_group_launches_on_the_termination_not_on_the_node_objects_deletion() -> None:
    """Both actors start from the instance's end: the launch is queued before the Node is deleted."""
    world, _, _ = world_with(7, "nodegroup", "gpu-mng")
    world.instance_stopped(world.instance_of(NODE))
    assert NODE in world.nodes
    (launch,) = [timer for timer in world.timers if timer.label.startswith("auto scaling group gpu-mng")]
    (delete,) = [
        timer for timer in world.timers if timer.label == f"node lifecycle controller deletes {NODE}"
    ]
    assert launch.at > delete.at, "a GPU instance boots and joins after its predecessor's Node is gone"


def test_karpenter_replaces_its_node_in_its_pool_sometimes_under_the_old_name() -> None:
    reused = 0
    for seed in range(40):
        world, clock, old_uid = world_with(seed, "karpenter", "gpu")
        ran = terminate_and_settle(world, clock)
        assert ran[0] == f"karpenter removes {NODE}"
        (replacement,) = world.nodes.values()
        assert replacement["metadata"]["uid"] != old_uid
        assert replacement["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu"
        assert "eks.amazonaws.com/nodegroup" not in replacement["metadata"]["labels"]
        reused += replacement["metadata"]["name"] == NODE
    assert 0 < reused < 40


def test_a_node_in_no_pool_carries_no_pool_or_karpenter_label() -> None:
    world, _, _ = world_with(1, "none", "")
    labels = world.nodes[NODE]["metadata"]["labels"]
    assert [key for key in labels if key.startswith(("karpenter.", "eks.amazonaws.com/"))] == []
    assert world.pool_of(world.nodes[NODE]) == ("none", "")


def test_a_managed_nodes_replacement_takes_a_free_name_when_its_own_was_taken_meanwhile() -> None:
    world, clock, _ = world_with(3, "nodegroup", "gpu-mng")
    world.instance_stopped(world.instance_of(NODE))
    (launch,) = [t for t in world.timers if t.label.startswith("auto scaling group")]
    planned = launch.label.rsplit(" ", 1)[-1]
    # Another node joins under that name before the group's instance does.
    world.add_node(planned, pool_kind="karpenter", pool="gpu")
    clock.now = START + timedelta(hours=1)
    while (timer := world.pop_due_timer()) is not None:
        timer.action()
    names = set(world.nodes)
    assert planned in names and len(names) == 2
    (joined,) = names - {planned}
    assert joined.startswith(f"{planned}-")
    assert world.nodes[planned]["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu"
    assert world.nodes[joined]["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == "gpu-mng"
