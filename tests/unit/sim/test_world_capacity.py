"""The seeded world's capacity: what DescribeInstances and DescribeCapacityReservations answer for
its instances, drawn from a stream of its own so every seed's schedule stream stays as it was."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

from nodeheal.sim.seeded.world import START, ULTRASERVER_TYPE, MemoryInstances, World
from nodeheal.workflow.capacity import CAPACITY_BLOCK, RESERVATION_ODCR

NODES = 300


def _world(capacity_rng: random.Random | None) -> World:
    world = World(random.Random(11), lambda: START, capacity_rng=capacity_rng)
    for index in range(NODES):
        name = f"node-{index}"
        world.add_node(name, pool_kind="karpenter", pool="gpu")
        world.add_pod(name, "trainer")
    return world


def test_every_kind_of_capacity_is_drawn_and_described_as_ec2_would() -> None:
    world = _world(random.Random(5))
    ec2 = MemoryInstances(world, reboot_heals=lambda: True)
    kinds: Counter[str] = Counter()
    for instance_id, instance in world.instances.items():
        view = ec2.describe(instance_id)
        assert view is not None
        assert (view.lifecycle, view.capacity_reservation_id, view.instance_type) == (
            instance.lifecycle,
            instance.reservation_id,
            instance.instance_type,
        )
        # The Node's instance-type label follows the instance.
        labels = world.nodes[instance.node]["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"] == instance.instance_type
        reservation = ec2.capacity_reservation(instance.reservation_id) if instance.reservation_id else None
        if instance.lifecycle == CAPACITY_BLOCK:
            assert reservation is not None and reservation.reservation_type == CAPACITY_BLOCK
            assert reservation.end_date is not None
            assert START <= reservation.end_date <= START + timedelta(days=7)
            kinds["ultraserver block" if view.instance_type == ULTRASERVER_TYPE else "block"] += 1
            if reservation.end_date - START < timedelta(minutes=80):
                kinds["block ending within launch + minimum"] += 1
        elif instance.reservation_id:
            assert reservation is not None and reservation.reservation_type == RESERVATION_ODCR
            kinds["odcr"] += 1
        else:
            kinds[view.lifecycle or "on-demand"] += 1
    assert set(kinds) == {
        "on-demand",
        "spot",
        "odcr",
        "block",
        "ultraserver block",
        "block ending within launch + minimum",
    }, kinds
    assert kinds["on-demand"] > NODES // 2


def test_the_capacity_stream_leaves_the_schedule_stream_as_it_was() -> None:
    with_capacity, without = _world(random.Random(5)), _world(None)
    assert with_capacity.rng.random() == without.rng.random()
    assert list(with_capacity.instances) == list(without.instances)
    assert [(p["metadata"]["name"], p["spec"]["nodeName"]) for p in with_capacity.pods.values()] == [
        (p["metadata"]["name"], p["spec"]["nodeName"]) for p in without.pods.values()
    ]


def test_without_a_capacity_stream_every_instance_is_on_demand_with_no_reservation() -> None:
    world = _world(None)
    ec2 = MemoryInstances(world, reboot_heals=lambda: True)
    views = [ec2.describe(instance_id) for instance_id in world.instances]
    assert {(v.lifecycle, v.capacity_reservation_id) for v in views if v is not None} == {("", "")}
    assert ec2.capacity_reservation("cr-0123456789abcdef0") is None
