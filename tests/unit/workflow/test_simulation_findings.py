"""The defects the seeded simulation found, each pinned at the lowest layer that shows it: the
steps run over the simulation's in-memory cluster (nodeheal.sim.seeded.world), which passes the
real adapters' contract tests (tests/unit/sim/test_memory_adapters.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeheal.actions import Mode
from nodeheal.config import RemediationSettings
from nodeheal.errors import NodeReplacedError
from nodeheal.kube_views import LiveNode
from nodeheal.sim.seeded.memory_ledger import MemoryLedger
from nodeheal.sim.seeded.world import MemoryInstances, MemoryNodes, MemoryPods, Mutation, World
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow import mutations
from nodeheal.workflow.admission import PROCEED, UNLABELLED_POOL, admit, budget_pool
from nodeheal.workflow.episode import sighting_of
from nodeheal.workflow.ports import KubeAccess
from nodeheal.workflow.state import WorkflowState
from tests.unit.workflow.fakes import CLUSTER

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
XID_48 = "NVRM: Xid (PCI:0000:97:00): 48, pid=2411, name=python3, An uncorrectable double bit error (DBE)"
XID_79 = "NVRM: Xid (PCI:0000:53:00): 79, pid=2411, name=python3, GPU has fallen off the bus."


class Watch:
    """The world's observer: records mutations and runs ``before[operation]`` once, first."""

    def __init__(self) -> None:
        self.mutations: list[Mutation] = []
        self.before: dict[str, Callable[[], None]] = {}

    def point(self, operation: str) -> None:
        action = self.before.pop(operation, None)
        if action is not None:
            action()

    def saw(self, node: Any) -> None:
        return None

    def mutated(self, mutation: Mutation) -> None:
        self.mutations.append(mutation)

    def caller(self) -> Any:
        return None


@pytest.fixture
def world() -> World:
    clock = {"now": T0}
    built = World(random.Random(7), lambda: clock["now"], cluster=CLUSTER)
    built.observer = Watch()
    return built


def watch(world: World) -> Watch:
    observer = world.observer
    assert isinstance(observer, Watch)
    return observer


def bad(world: World, name: str, message: str, condition: str = "GPUProblem") -> None:
    if condition == "AcceleratedHardwareReady":
        world.set_condition(name, condition, "False", "NvidiaXID79Error", message)
    else:
        world.set_condition(name, condition, "True", "GPUHardwareError", message)


def admitted(
    world: World, name: str, action: str, ledger: MemoryLedger, execution: str = "e-1"
) -> WorkflowState:
    """The state of an execution that admitted ``name`` for ``action``, took its lock and cordoned it."""
    node = LiveNode.from_api(world.nodes[name])
    condition = world.condition(name, "GPUProblem") or {}
    payload = {
        "event": {
            "schemaVersion": "1.1",
            "cluster": CLUSTER,
            "node": {"name": name, "uid": node.uid, "providerID": node.provider_id, "labels": {}},
            "condition": {k: v for k, v in condition.items() if k != "lastHeartbeatTime"},
            "previous": {"status": "False", "reason": "GPUHealthy"},
            "observedAt": format_timestamp(T0, millis=True),
            "resync": False,
        },
        "eventId": "evt-1",
        "receivedAt": format_timestamp(T0, millis=True),
        "settings": RemediationSettings().to_json(),
        "execution": {
            "name": execution,
            "id": f"arn:aws:states:::execution:sm:{execution}",
            "startedAt": "2026-11-23T08:00:00.000Z",
        },
        "admission": {
            "verdict": PROCEED,
            "decision": {
                "action": action,
                "plannedAction": action,
                "reason": "",
                "xid": None,
                "signal": "",
                "confirmSeconds": 0,
            },
            "node": {
                "name": name,
                "uid": node.uid,
                "instanceId": node.instance_id,
                "providerId": node.provider_id,
                "pool": "gpu",
                "instanceType": "p5.48xlarge",
                "bootId": node.boot_id,
            },
            "lockHeld": True,
            "at": format_timestamp(T0, millis=True),
        },
        "cordon": {"performed": True},
    }
    ledger.acquire_lock(CLUSTER, node.instance_id or "", execution, timedelta(hours=9))
    MemoryNodes(world).cordon(name, execution=execution, reason="test", now=T0, expected_uid=node.uid)
    return WorkflowState.parse(payload)


def kube(world: World) -> KubeAccess:
    return KubeAccess(nodes=MemoryNodes(world), pods=MemoryPods(world))


def test_drain_stops_when_the_name_passes_to_a_new_node_between_its_proof_and_its_pod_list(
    world: World,
) -> None:
    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    world.add_pod("gpu-a", "trainer")
    bad(world, "gpu-a", XID_79)
    ledger = MemoryLedger(clock=world.now)
    state = admitted(world, "gpu-a", "replace", ledger)

    def replaced() -> None:
        old = world.nodes["gpu-a"]
        world.delete_node_object("gpu-a")
        world.join_node("gpu-a", old)

    watch(world).before["list pods"] = replaced
    with pytest.raises(NodeReplacedError):
        mutations.drain_round(state, kube(world), ledger, T0, mode=Mode.FULL)
    assert [m.kind for m in watch(world).mutations] == ["cordon"], "the new node's pods were not evicted"
    assert all(not p["metadata"].get("deletionTimestamp") for p in world.pods_on("gpu-a"))


def reboot(world: World, state: WorkflowState, ledger: MemoryLedger, at: datetime) -> dict[str, Any]:
    instances = MemoryInstances(world, reboot_heals=lambda: True)
    return mutations.reboot(state, kube(world), instances, ledger, at, mode=Mode.FULL)


def test_a_reboot_becomes_a_replacement_when_the_message_worsened_after_admission(world: World) -> None:
    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    bad(world, "gpu-a", XID_48)
    ledger = MemoryLedger(clock=world.now)
    state = admitted(world, "gpu-a", "reboot", ledger)
    bad(world, "gpu-a", XID_79)  # same status and reason: NPD sends no new event
    result = reboot(world, state, ledger, T0)
    assert result["performed"] is False and result["escalateTo"] == "replace"
    assert "reboot" not in [m.kind for m in watch(world).mutations]


def test_a_confirmed_replace_level_fault_on_another_condition_turns_the_reboot_into_a_replacement(
    world: World,
) -> None:
    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    bad(world, "gpu-a", XID_48)
    ledger = MemoryLedger(clock=world.now)
    state = admitted(world, "gpu-a", "reboot", ledger)
    bad(world, "gpu-a", "NVRM: Xid 79", condition="AcceleratedHardwareReady")
    assert reboot(world, state, ledger, T0)["escalateTo"] == "replace"


def test_a_fault_still_inside_its_confirmation_does_not_stop_the_reboot(world: World) -> None:
    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    bad(world, "gpu-a", XID_48)
    ledger = MemoryLedger(clock=world.now)
    state = admitted(world, "gpu-a", "reboot", ledger)
    # KernelDeadlock calls for replacement, but only once it has lasted its 600 s confirmation.
    world.set_condition(
        "gpu-a", "KernelDeadlock", "True", "DockerHung", "task blocked for more than 120 seconds"
    )
    result = reboot(world, state, ledger, T0 + timedelta(seconds=30))
    assert result["performed"] is True
    assert [m.kind for m in watch(world).mutations][-1] == "reboot"


@pytest.mark.parametrize(
    ("labels", "key", "selector"),
    [
        ({"karpenter.sh/nodepool": "gpu"}, "gpu", "karpenter.sh/nodepool=gpu"),
        (
            {"eks.amazonaws.com/nodegroup": "p5-mng"},
            "eks.amazonaws.com/nodegroup=p5-mng",
            "eks.amazonaws.com/nodegroup=p5-mng",
        ),
        ({}, UNLABELLED_POOL, "!karpenter.sh/nodepool,!eks.amazonaws.com/nodegroup"),
    ],
)
def test_every_node_belongs_to_a_pool_the_share_applies_to(
    labels: dict[str, str], key: str, selector: str
) -> None:
    assert budget_pool(labels, "karpenter.sh/nodepool") == (key, selector)


@pytest.mark.parametrize("pool_kind", ["nodegroup", "none"])
def test_a_second_node_of_a_small_node_group_or_of_the_unlabelled_nodes_is_refused(
    world: World, pool_kind: str
) -> None:
    for index in range(4):
        world.add_node(f"node-{index}", pool_kind=pool_kind, pool="p5-mng")
    ledger = MemoryLedger(clock=world.now)
    access = kube(world)
    first = admitted(world, "node-0", "replace", ledger, execution="e-0")  # cordoned: one unhealthy already
    assert first.admitted_node is not None
    bad(world, "node-1", XID_79)
    node = LiveNode.from_api(world.nodes["node-1"])
    payload = dict(first.raw)
    payload.pop("admission")
    payload.pop("cordon")
    payload["event"] = {
        **payload["event"],
        "node": {"name": "node-1", "uid": node.uid, "providerID": node.provider_id, "labels": {}},
    }
    payload["execution"] = {**payload["execution"], "name": "e-1"}
    second = admit(WorkflowState.parse(payload), access, ledger, T0, mode=Mode.FULL)
    # Four nodes at a 0.2 share allow max(1, floor(0.8)) = 1 unhealthy node: the second is refused.
    assert second.refused and "budget: pool" in second.note


def test_a_fault_refused_by_the_budget_still_decides_when_a_lesser_message_comes_later(world: World) -> None:
    """Seed 376: Xid 79 on AcceleratedHardwareReady was refused (the pool's allowance was taken);
    twenty minutes later the agent re-reported the same dead GPU as Xid 48. A new execution must
    not reboot it: the episode's worst fault, in the ledger, still decides (severity only rises)."""
    from nodeheal.actions import Action
    from nodeheal.workflow.records import Outcome, RemediationRecord

    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    world.set_condition("gpu-a", "AcceleratedHardwareReady", "False", "NvidiaXID79Error", XID_79)
    ledger = MemoryLedger(clock=world.now)
    node = LiveNode.from_api(world.nodes["gpu-a"])
    ledger.put_record(
        RemediationRecord(
            cluster=CLUSTER,
            node="gpu-a",
            execution="refused-one",
            started_at=T0 + timedelta(seconds=1),
            finished_at=T0 + timedelta(seconds=2),
            outcome=Outcome.REFUSED,
            action=Action.ALERT,
            planned_action=Action.REPLACE,
            reason="Xid 79; not acted on: budget",
            summary="refused",
            xid=79,
            signal="xid:79",
            condition={"type": "AcceleratedHardwareReady", "status": "False", "reason": "NvidiaXID79Error"},
            instance_id=node.instance_id or "",
            node_uid=node.uid,
        )
    )
    world.set_condition("gpu-a", "AcceleratedHardwareReady", "False", "NvidiaXID48Error", XID_48)
    state = admitted(world, "gpu-a", "reboot", ledger)
    payload = dict(state.raw)
    payload.pop("admission")
    payload.pop("cordon")
    condition = world.condition("gpu-a", "AcceleratedHardwareReady") or {}
    payload["event"] = {
        **payload["event"],
        "condition": {k: v for k, v in condition.items() if k != "lastHeartbeatTime"},
    }
    ledger.release_lock(CLUSTER, node.instance_id or "", "e-1")
    MemoryNodes(world).uncordon("gpu-a")
    decided = admit(
        WorkflowState.parse(payload), kube(world), ledger, T0 + timedelta(minutes=20), mode=Mode.FULL
    )
    assert decided.decision is not None
    assert decided.decision.action is Action.REPLACE, decided.decision.reason
    assert "severity only rises" in decided.decision.reason


def test_a_worse_fault_read_during_the_drain_still_decides_at_the_reboot(world: World) -> None:
    """Seed 1006862: the message read Xid 79 during a drain round, then Xid 48 again by the time
    the reboot step read the node. What a round saw is kept in the drain's result."""
    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    bad(world, "gpu-a", XID_48)
    ledger = MemoryLedger(clock=world.now)
    state = admitted(world, "gpu-a", "reboot", ledger)
    bad(world, "gpu-a", XID_79)
    drained = mutations.drain_round(state, kube(world), ledger, T0, mode=Mode.FULL)
    assert "calls for replacement" in drained["worsened"]
    bad(world, "gpu-a", XID_48)
    after_drain = WorkflowState.parse({**state.raw, "drain": drained})
    result = reboot(world, after_drain, ledger, T0 + timedelta(seconds=30))
    assert result["escalateTo"] == "replace" and "reboot" not in [m.kind for m in watch(world).mutations]


def test_a_fault_another_execution_saw_decides_before_its_record_exists(world: World) -> None:
    """Seed 1007907: the execution that admitted Xid 79 lost its lock in an outage and had not
    written its record yet; the detector had overwritten the message with Xid 48, and the next
    execution admitted that and rebooted. What the first admission saw is in the episode memory,
    so the next one decides to replace."""
    from nodeheal.actions import Action

    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    bad(world, "gpu-a", XID_79)
    ledger = MemoryLedger(clock=world.now)
    first = admitted(world, "gpu-a", "replace", ledger)
    payload = dict(first.raw)
    payload.pop("admission")
    payload.pop("cordon")
    assert admit(WorkflowState.parse(payload), kube(world), ledger, T0, mode=Mode.FULL).decision is not None
    (remembered,) = ledger.sightings(CLUSTER, LiveNode.from_api(world.nodes["gpu-a"]).instance_id or "")
    assert remembered.action is Action.REPLACE and remembered.xid == 79

    bad(world, "gpu-a", XID_48)  # same status and reason: the first one's lock expires meanwhile
    ledger.locks.clear()
    second = {**payload, "execution": {**payload["execution"], "name": "e-2"}}
    condition = world.condition("gpu-a", "GPUProblem") or {}
    second["event"] = {
        **payload["event"],
        "condition": {k: v for k, v in condition.items() if k != "lastHeartbeatTime"},
    }
    decided = admit(
        WorkflowState.parse(second), kube(world), ledger, T0 + timedelta(minutes=5), mode=Mode.FULL
    )
    assert decided.decision is not None
    assert decided.decision.action is Action.REPLACE, decided.decision.reason
    assert "xid:79 (replace) was seen first and still decides" in decided.decision.reason


def test_the_reboot_step_replaces_for_a_fault_remembered_from_another_execution(world: World) -> None:
    """The reboot step reads the episode memory too: a replace-level fault another execution saw
    (and the detector has since overwritten) turns the reboot into a replacement."""
    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    bad(world, "gpu-a", XID_79)
    ledger = MemoryLedger(clock=world.now)
    node = LiveNode.from_api(world.nodes["gpu-a"])
    seen = sighting_of(
        node.conditions["GPUProblem"], node, RemediationSettings().policy, execution="other", now=T0
    )
    assert seen is not None
    ledger.remember_sighting(CLUSTER, node.instance_id or "", seen)
    bad(world, "gpu-a", XID_48)
    state = admitted(world, "gpu-a", "reboot", ledger)
    result = reboot(world, state, ledger, T0 + timedelta(seconds=30))
    assert result["escalateTo"] == "replace" and "execution other saw it" in result["skipped"]
    assert "reboot" not in [m.kind for m in watch(world).mutations]


def test_a_remembered_fault_ends_with_the_boot_it_was_seen_on(world: World) -> None:
    """A reboot ends the episode (D2): a sighting from the previous boot no longer decides."""
    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    bad(world, "gpu-a", XID_79)
    ledger = MemoryLedger(clock=world.now)
    node = LiveNode.from_api(world.nodes["gpu-a"])
    seen = sighting_of(
        node.conditions["GPUProblem"], node, RemediationSettings().policy, execution="other", now=T0
    )
    assert seen is not None
    ledger.remember_sighting(CLUSTER, node.instance_id or "", replace(seen, boot_id="an-earlier-boot"))
    bad(world, "gpu-a", XID_48)
    state = admitted(world, "gpu-a", "reboot", ledger)
    assert reboot(world, state, ledger, T0 + timedelta(seconds=30))["performed"] is True


def test_a_step_remembers_a_worse_fault_it_reads(world: World) -> None:
    """Every mutating step remembers a bad condition that calls for more than its execution
    planned (one conditional write), so a successor decides by it even if this one stops."""
    from nodeheal.actions import Action

    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    bad(world, "gpu-a", XID_48)
    ledger = MemoryLedger(clock=world.now)
    state = admitted(world, "gpu-a", "reboot", ledger)
    mutations.drain_round(state, kube(world), ledger, T0, mode=Mode.FULL)
    assert ledger.remembered == {}  # nothing worse than the plan: no write
    bad(world, "gpu-a", XID_79)
    mutations.drain_round(state, kube(world), ledger, T0 + timedelta(seconds=10), mode=Mode.FULL)
    (remembered,) = ledger.remembered.values()
    assert (remembered.action, remembered.execution) == (Action.REPLACE, "e-1")
