"""One contract, two implementations of each cluster port: the real adapters (NodeOperations and
PodOperations over the fake API server, Ec2Instances over moto) and the in-memory ones the seeded
simulation runs the workflow against (MemoryNodes, MemoryPods, MemoryInstances over a World).

A schedule the seeded simulation explores is only evidence about production if the in-memory
adapters answer as the real ones do: a replaced Node must look gone, a PodDisruptionBudget must
answer 429, a uid precondition must protect a namesake pod, terminate must be idempotent. Every
case below runs against both.

Not covered, because the World deliberately leaves it out: resourceVersion conflicts on a Node
patch (the World applies a cordon atomically, so there is nothing to retry) and pod readiness
(World pods are Running and ready, so the eviction rules for unready or Pending pods never apply).
"""

from __future__ import annotations

import abc
import copy
import inspect
import random
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodeheal.aws.ec2 import Ec2Instances
from nodeheal.errors import InstanceNotFoundError, NodeGoneError
from nodeheal.kube.client import StaticClientProvider, request_json
from nodeheal.kube.event_writer import EventOperations
from nodeheal.kube.nodes import MAX_REASON_LENGTH, NodeOperations
from nodeheal.kube.pods import PodOperations, PodOutcome
from nodeheal.kube_event_body import EventType, ObjectEvent, ObjectRef, event_body
from nodeheal.kube_views import (
    ANNOTATION_CORDONED_AT,
    ANNOTATION_CORDONED_BY_NODEHEAL,
    ANNOTATION_EXECUTION,
    ANNOTATION_REASON,
    UNHEALTHY_TAINT_KEY,
    PodView,
)
from nodeheal.sim.apiserver.objects import make_node, make_pdb, make_pod
from nodeheal.sim.apiserver.server import FakeKubeApiServer
from nodeheal.sim.apiserver.status import ApiError
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.seeded.world import Budget, MemoryEvents, MemoryInstances, MemoryNodes, MemoryPods, World
from nodeheal.workflow.ports import EventPort, InstancePort, NodePort, PodPort
from tests.unit.workflow.fakes import CLUSTER

JSON = dict[str, Any]

START = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 21, 10, 0, 5, tzinfo=UTC)
NODE = "ip-10-0-158-235.us-west-2.compute.internal"
OTHER_NODE = "ip-10-0-7-9.us-west-2.compute.internal"
LONE_NODE = "ip-10-0-42-17.us-west-2.compute.internal"
KARPENTER_POOL_LABEL = "karpenter.sh/nodepool"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
NAMESPACE = "training"
OWNED_TAG = f"kubernetes.io/cluster/{CLUSTER}"
REGION = "us-west-2"
#: Well formed, so EC2 (and moto) answer InvalidInstanceID.NotFound rather than Malformed.
UNKNOWN_INSTANCE = "i-0123456789abcdef0"
#: One of the AMIs moto ships.
MOTO_AMI = "ami-12c6146b"
NODEHEAL_TAINT = {"key": UNHEALTHY_TAINT_KEY, "effect": "NoSchedule"}
#: The fake API server runs 1 simulated second as 10 ms, so a 30 s grace period takes 0.3 s.
TIME_SCALE = 0.01


class ManualClock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


# -- the two clusters -------------------------------------------------------------------------------


class Cluster(abc.ABC):
    """The ports under test and the cluster-side changes a case needs (what people, controllers and
    the kubelet do), on one of the two backends."""

    nodes: NodeOperations | MemoryNodes
    pods: PodOperations | MemoryPods
    events: EventOperations | MemoryEvents

    @abc.abstractmethod
    def add_node(self, name: str, *, pool: str = "gpu", pool_kind: str = "karpenter") -> str:
        """Add a healthy Node of a Karpenter NodePool, a managed node group (``pool_kind``
        "nodegroup") or neither ("none"); return its uid."""

    @abc.abstractmethod
    def instance_of(self, name: str) -> str: ...

    @abc.abstractmethod
    def replace_node(self, name: str) -> str:
        """Delete the Node object and register a new one under the same name; return its uid."""

    @abc.abstractmethod
    def set_condition(self, name: str, condition_type: str, status: str, reason: str) -> None: ...

    @abc.abstractmethod
    def person_cordons(self, name: str) -> None:
        """``kubectl cordon``: spec.unschedulable only, no NodeHeal marks."""

    @abc.abstractmethod
    def stored_node(self, name: str) -> JSON | None: ...

    @abc.abstractmethod
    def add_pod(self, node: str, app: str, *, owner: str = "ReplicaSet", grace: int = 30) -> PodView:
        """Add a running pod of workload ``app``; return it as the API lists it."""

    @abc.abstractmethod
    def add_budget(self, app: str, min_available: int) -> None: ...

    @abc.abstractmethod
    def recreate_pod(self, pod: PodView, node: str) -> str:
        """A StatefulSet recreates the pod: same name, new uid, on ``node``; return the new uid."""

    @abc.abstractmethod
    def stored_pod(self, name: str) -> JSON | None: ...

    @abc.abstractmethod
    def stored_events(self) -> list[JSON]:
        """Every Event stored, in the events.k8s.io/v1 shape, as the API server returns it."""

    @abc.abstractmethod
    def eventually(self, check: Callable[[], bool], *, within: float) -> bool:
        """Let up to ``within`` simulated seconds of the cluster's own work happen (containers
        stopping) until ``check`` holds; return whether it did."""


class ApiCluster(Cluster):
    def __init__(self, server: FakeKubeApiServer) -> None:
        self.store: ClusterStore = server.store
        transport = StaticClientProvider(server.url, token="sim").transport("sim")
        self.nodes = NodeOperations(transport)
        self.pods = PodOperations(transport)
        self.events = EventOperations(transport)
        self._transport = transport
        self._instances = 0
        self._pods = 0
        self._pools: dict[str, tuple[str, str]] = {}

    def add_node(self, name: str, *, pool: str = "gpu", pool_kind: str = "karpenter") -> str:
        self._instances += 1
        raw = make_node(name, instance_id=f"i-{self._instances:017x}", node_pool=pool)
        labels = raw["metadata"]["labels"]
        if pool_kind != "karpenter":
            del labels[KARPENTER_POOL_LABEL]
        if pool_kind == "nodegroup":
            labels[NODEGROUP_LABEL] = pool
        (stored,) = self.store.add(raw)
        self._pools[name] = (pool, pool_kind)
        return str(stored["metadata"]["uid"])

    def instance_of(self, name: str) -> str:
        return str(self.store.get("nodes", name)["spec"]["providerID"]).rsplit("/", 1)[-1]

    def replace_node(self, name: str) -> str:
        pool, pool_kind = self._pools[name]
        self.store.remove("nodes", name)
        return self.add_node(name, pool=pool, pool_kind=pool_kind)

    def set_condition(self, name: str, condition_type: str, status: str, reason: str) -> None:
        self.store.set_node_condition(name, condition_type, status, reason, reason)

    def person_cordons(self, name: str) -> None:
        self.store.mutate("nodes", name, lambda node: node["spec"].update({"unschedulable": True}))

    def stored_node(self, name: str) -> JSON | None:
        try:
            return copy.deepcopy(dict(self.store.get("nodes", name)))
        except ApiError as exc:
            assert exc.code == 404
            return None

    def add_pod(self, node: str, app: str, *, owner: str = "ReplicaSet", grace: int = 30) -> PodView:
        self._pods += 1
        name = f"{app}-{self._pods:04d}"
        (stored,) = self.store.add(
            make_pod(
                name,
                NAMESPACE,
                node,
                labels={"app": app},
                owner_kind=owner,
                owner_name=app,
                grace_seconds=grace,
            )
        )
        return PodView.from_api(stored)

    def add_budget(self, app: str, min_available: int) -> None:
        self.store.add(make_pdb(app, NAMESPACE, {"app": app}, min_available=min_available))

    def recreate_pod(self, pod: PodView, node: str) -> str:
        app = self.store.get("pods", pod.name, pod.namespace)["metadata"]["labels"]["app"]
        self.store.remove("pods", pod.name, pod.namespace)
        (stored,) = self.store.add(
            make_pod(
                pod.name, pod.namespace, node, labels={"app": app}, owner_kind="StatefulSet", owner_name=app
            )
        )
        return str(stored["metadata"]["uid"])

    def stored_pod(self, name: str) -> JSON | None:
        try:
            return copy.deepcopy(dict(self.store.get("pods", name, NAMESPACE)))
        except ApiError as exc:
            assert exc.code == 404
            return None

    def stored_events(self) -> list[JSON]:
        listed = request_json(self._transport, "GET", "/apis/events.k8s.io/v1/events", action="list events")
        return list(listed.object("list events")["items"])

    def eventually(self, check: Callable[[], bool], *, within: float) -> bool:
        deadline = time.monotonic() + within * self.store.time_scale + 5.0
        while not check():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True


class WorldCluster(Cluster):
    def __init__(self) -> None:
        self.clock = ManualClock(START)
        self.world = World(random.Random(0), self.clock)
        self.nodes = MemoryNodes(self.world)
        self.pods = MemoryPods(self.world)
        self.events = MemoryEvents(self.world)

    def add_node(self, name: str, *, pool: str = "gpu", pool_kind: str = "karpenter") -> str:
        return str(self.world.add_node(name, pool_kind=pool_kind, pool=pool)["metadata"]["uid"])

    def instance_of(self, name: str) -> str:
        return self.world.instance_of(name)

    def replace_node(self, name: str) -> str:
        old = self.world.delete_node_object(name)
        assert old is not None
        kind, pool = self.world.pool_of(old)
        return str(self.world.add_node(name, pool_kind=kind, pool=pool)["metadata"]["uid"])

    def set_condition(self, name: str, condition_type: str, status: str, reason: str) -> None:
        assert self.world.set_condition(name, condition_type, status, reason, reason)

    def person_cordons(self, name: str) -> None:
        node = self.world.nodes[name]
        node["spec"]["unschedulable"] = True
        self.world._touch(node)

    def stored_node(self, name: str) -> JSON | None:
        return copy.deepcopy(self.world.nodes.get(name))

    def add_pod(self, node: str, app: str, *, owner: str = "ReplicaSet", grace: int = 30) -> PodView:
        return PodView.from_api(copy.deepcopy(self.world.add_pod(node, app, owner=owner, grace=grace)))

    def add_budget(self, app: str, min_available: int) -> None:
        self.world.budgets.append(Budget(app, min_available))

    def recreate_pod(self, pod: PodView, node: str) -> str:
        old = self.world.pods.pop((pod.namespace, pod.name))
        new = copy.deepcopy(old)
        new["metadata"].pop("deletionTimestamp", None)
        new["metadata"]["uid"] = self.world.new_id("pod-")
        app = new["metadata"]["labels"]["app"]
        new["metadata"]["ownerReferences"] = [{"kind": "StatefulSet", "name": app, "controller": True}]
        new["spec"]["nodeName"] = node
        self.world.pods[(pod.namespace, pod.name)] = new
        self.world.pod_node_uid[new["metadata"]["uid"]] = self.world.node_uid(node)
        return str(new["metadata"]["uid"])

    def stored_pod(self, name: str) -> JSON | None:
        return copy.deepcopy(self.world.pods.get((NAMESPACE, name)))

    def stored_events(self) -> list[JSON]:
        return copy.deepcopy(list(self.world.events.values()))

    def _run_due_timers(self) -> None:
        while timer := self.world.pop_due_timer():
            timer.action()

    def eventually(self, check: Callable[[], bool], *, within: float) -> bool:
        for _ in range(int(within) + 1):
            self._run_due_timers()
            if check():
                return True
            self.clock.advance(1)
        self._run_due_timers()
        return check()


@pytest.fixture(params=["real", "memory"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if request.param == "memory":
        yield WorldCluster()
        return
    store = ClusterStore(time_scale=TIME_SCALE)
    try:
        with FakeKubeApiServer(store) as server:
            yield ApiCluster(server)
    finally:
        store.close()


# -- EC2 --------------------------------------------------------------------------------------------


class Ec2:
    def __init__(self, instances: Ec2Instances | MemoryInstances, launch: Callable[[], str]) -> None:
        self.instances = instances
        self.launch = launch


@pytest.fixture(params=["real", "memory"])
def ec2(request: pytest.FixtureRequest) -> Iterator[Ec2]:
    if request.param == "memory":
        world = World(random.Random(0), ManualClock(START), cluster=CLUSTER)
        names = iter(range(1, 1000))

        def add() -> str:
            name = f"ip-10-0-1-{next(names)}.us-west-2.compute.internal"
            world.add_node(name, pool_kind="karpenter", pool="gpu")
            return world.instance_of(name)

        yield Ec2(MemoryInstances(world, reboot_heals=lambda: True), add)
        return
    with mock_aws():
        client = boto3.client("ec2", region_name=REGION)

        def launch() -> str:
            reservation = client.run_instances(
                ImageId=MOTO_AMI,
                MinCount=1,
                MaxCount=1,
                InstanceType="p5.48xlarge",
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": [{"Key": OWNED_TAG, "Value": "owned"}]}
                ],
            )
            return str(reservation["Instances"][0]["InstanceId"])

        yield Ec2(Ec2Instances(client), launch)


# -- helpers ----------------------------------------------------------------------------------------


def _taints(node: JSON) -> list[JSON]:
    return [dict(t) for t in node["spec"].get("taints") or []]


def _annotations(node: JSON) -> dict[str, str]:
    return dict(node["metadata"].get("annotations") or {})


def _nodeheal_marks(node: JSON) -> set[str]:
    marks = {key for key in _annotations(node) if key.startswith("nodeheal.io/")}
    return marks | {t["key"] for t in _taints(node) if t["key"] == UNHEALTHY_TAINT_KEY}


def _listed(cluster: Cluster, node: str = NODE) -> dict[str, PodView]:
    return {pod.uid: pod for pod in cluster.pods.list_on_node(node)}


# -- the calls ---------------------------------------------------------------------------------------


def _call_shape(method: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]


@pytest.mark.parametrize(
    ("port", "real", "memory"),
    [
        (NodePort, NodeOperations, MemoryNodes),
        (PodPort, PodOperations, MemoryPods),
        (InstancePort, Ec2Instances, MemoryInstances),
        (EventPort, EventOperations, MemoryEvents),
    ],
)
def test_both_adapters_take_the_ports_calls_alike(
    port: type[Any], real: type[Any], memory: type[Any]
) -> None:
    methods = [name for name, value in vars(port).items() if not name.startswith("_") and callable(value)]
    assert methods
    for name in methods:
        assert _call_shape(getattr(memory, name)) == _call_shape(getattr(real, name)), name
        assert _call_shape(getattr(memory, name)) == _call_shape(getattr(port, name)), name


# -- nodes: reads -----------------------------------------------------------------------------------


def test_get_of_a_missing_node_is_none(cluster: Cluster) -> None:
    assert cluster.nodes.get(NODE) is None


def test_get_returns_uid_instance_and_conditions(cluster: Cluster) -> None:
    uid = cluster.add_node(NODE)
    cluster.set_condition(NODE, "GPUProblem", "True", "XID79")

    node = cluster.nodes.get(NODE)

    assert node is not None
    assert node.name == NODE
    assert node.uid == uid
    assert node.instance_id == cluster.instance_of(NODE)
    assert node.instance_id is not None and node.instance_id.startswith("i-")
    assert node.is_ready
    assert node.gpu_capacity == 8
    assert node.boot_id
    gpu = node.condition("GPUProblem")
    assert gpu is not None and gpu.status == "True" and gpu.reason == "XID79" and gpu.is_bad
    kernel = node.condition("KernelDeadlock")
    assert kernel is not None and not kernel.is_bad
    assert not node.unschedulable and not node.cordoned_by_nodeheal


def test_list_with_a_label_selector_returns_only_matching_nodes(cluster: Cluster) -> None:
    cluster.add_node(NODE, pool="gpu")
    cluster.add_node(OTHER_NODE, pool="cpu")

    assert {n.name for n in cluster.nodes.list()} == {NODE, OTHER_NODE}
    assert [n.name for n in cluster.nodes.list(f"{KARPENTER_POOL_LABEL}=gpu")] == [NODE]
    assert [n.name for n in cluster.nodes.list(f"{KARPENTER_POOL_LABEL}=cpu")] == [OTHER_NODE]
    assert cluster.nodes.list(f"{KARPENTER_POOL_LABEL}=none") == []


def test_list_with_the_selectors_admission_sends_for_each_kind_of_pool(cluster: Cluster) -> None:
    cluster.add_node(NODE, pool="gpu")
    cluster.add_node(OTHER_NODE, pool="gpu-ng", pool_kind="nodegroup")
    cluster.add_node(LONE_NODE, pool_kind="none")

    def names(selector: str) -> set[str]:
        return {n.name for n in cluster.nodes.list(selector)}

    assert names(f"{NODEGROUP_LABEL}=gpu-ng") == {OTHER_NODE}
    assert names(f"!{KARPENTER_POOL_LABEL},!{NODEGROUP_LABEL}") == {LONE_NODE}
    assert names(f"!{KARPENTER_POOL_LABEL}") == {OTHER_NODE, LONE_NODE}
    assert names(f"{KARPENTER_POOL_LABEL}=gpu,!{NODEGROUP_LABEL}") == {NODE}
    assert names(f"{KARPENTER_POOL_LABEL}=gpu,node.kubernetes.io/instance-type=p5.48xlarge") == {NODE}
    assert names(f"{KARPENTER_POOL_LABEL}=gpu,node.kubernetes.io/instance-type=g6e.48xlarge") == set()


def test_a_node_read_is_a_snapshot_later_changes_do_not_reach(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    read = cluster.nodes.get(NODE)
    (listed,) = cluster.nodes.list()
    assert read is not None

    cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)
    cluster.set_condition(NODE, "GPUProblem", "True", "XID79")

    for view in (read, listed):
        assert not view.unschedulable and not view.cordoned_by_nodeheal
        assert not set(view.annotations) & {ANNOTATION_EXECUTION, ANNOTATION_REASON}
        gpu = view.condition("GPUProblem")
        assert gpu is not None and gpu.status == "False"
    now = cluster.nodes.get(NODE)
    assert now is not None and now.unschedulable and now.resource_version != read.resource_version


# -- nodes: cordon and uncordon ---------------------------------------------------------------------


def test_cordon_sets_unschedulable_the_taint_and_the_annotations(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    reason = "Xid 79: GPU fell off the bus " + "x" * 2000

    result = cluster.nodes.cordon(NODE, execution="exec-1", reason=reason, now=NOW)

    assert result.changed is True
    assert result.flipped_unschedulable is True
    assert result.previous_execution is None
    assert result.node.unschedulable and result.node.cordoned_by_nodeheal
    stored = cluster.stored_node(NODE)
    assert stored is not None
    assert stored["spec"]["unschedulable"] is True
    assert _taints(stored).count(NODEHEAL_TAINT) == 1
    annotations = _annotations(stored)
    assert annotations[ANNOTATION_EXECUTION] == "exec-1"
    assert annotations[ANNOTATION_REASON] == reason[:MAX_REASON_LENGTH]
    assert annotations[ANNOTATION_CORDONED_AT] == "2026-11-21T10:00:05Z"
    assert annotations[ANNOTATION_CORDONED_BY_NODEHEAL] == "true"


def test_cordon_again_by_the_same_execution_changes_nothing(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)
    before = cluster.stored_node(NODE)
    assert before is not None

    again = cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW + timedelta(minutes=1))

    assert again.changed is False
    assert again.flipped_unschedulable is True
    after = cluster.stored_node(NODE)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert _annotations(after) == _annotations(before)
    assert _taints(after).count(NODEHEAL_TAINT) == 1


def test_cordon_by_a_later_execution_takes_over_and_keeps_ownership(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.nodes.cordon(NODE, execution="exec-1", reason="first", now=NOW)

    second = cluster.nodes.cordon(NODE, execution="exec-2", reason="second", now=NOW)

    assert second.changed is True
    assert second.flipped_unschedulable is True
    assert second.previous_execution == "exec-1"
    stored = cluster.stored_node(NODE)
    assert stored is not None
    assert _annotations(stored)[ANNOTATION_EXECUTION] == "exec-2"
    assert _annotations(stored)[ANNOTATION_CORDONED_BY_NODEHEAL] == "true"
    assert _taints(stored).count(NODEHEAL_TAINT) == 1


def test_a_persons_cordon_survives_nodeheals_cordon_and_uncordon(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.person_cordons(NODE)

    result = cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)

    assert result.changed is True
    assert result.flipped_unschedulable is False
    stored = cluster.stored_node(NODE)
    assert stored is not None
    assert ANNOTATION_CORDONED_BY_NODEHEAL not in _annotations(stored)
    assert NODEHEAL_TAINT in _taints(stored)

    assert cluster.nodes.uncordon(NODE) is True

    stored = cluster.stored_node(NODE)
    assert stored is not None
    assert stored["spec"]["unschedulable"] is True
    assert _nodeheal_marks(stored) == set()


def test_uncordon_undoes_nodeheals_own_cordon(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)

    assert cluster.nodes.uncordon(NODE) is True

    stored = cluster.stored_node(NODE)
    assert stored is not None
    assert stored["spec"].get("unschedulable", False) is False
    assert _nodeheal_marks(stored) == set()
    node = cluster.nodes.get(NODE)
    assert node is not None and not node.unschedulable and not node.cordoned_by_nodeheal


def test_uncordon_answers_false_when_nothing_of_nodeheals_is_there(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    assert cluster.nodes.uncordon(NODE) is False

    cluster.person_cordons(NODE)
    assert cluster.nodes.uncordon(NODE) is False
    stored = cluster.stored_node(NODE)
    assert stored is not None and stored["spec"]["unschedulable"] is True

    cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)
    assert cluster.nodes.uncordon(NODE) is True
    assert cluster.nodes.uncordon(NODE) is False


def test_cordon_of_a_replaced_node_is_gone_and_leaves_the_new_node_alone(cluster: Cluster) -> None:
    old_uid = cluster.add_node(NODE)
    new_uid = cluster.replace_node(NODE)
    assert new_uid != old_uid

    with pytest.raises(NodeGoneError):
        cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW, expected_uid=old_uid)
    with pytest.raises(NodeGoneError):
        cluster.nodes.uncordon(NODE, expected_uid=old_uid)

    stored = cluster.stored_node(NODE)
    assert stored is not None
    assert stored["metadata"]["uid"] == new_uid
    assert stored["spec"].get("unschedulable", False) is False
    assert _nodeheal_marks(stored) == set()
    # With the uid it was read with, the new node is cordoned as usual.
    result = cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW, expected_uid=new_uid)
    assert result.changed and result.node.uid == new_uid


def test_cordon_or_uncordon_of_a_missing_node_is_gone(cluster: Cluster) -> None:
    with pytest.raises(NodeGoneError):
        cluster.nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)
    with pytest.raises(NodeGoneError):
        cluster.nodes.uncordon(NODE)
    assert cluster.nodes.get(NODE) is None


# -- nodes: delete ----------------------------------------------------------------------------------


def test_delete_removes_the_node_once(cluster: Cluster) -> None:
    uid = cluster.add_node(NODE)

    assert cluster.nodes.delete(NODE, uid) is True
    assert cluster.nodes.get(NODE) is None
    assert cluster.nodes.delete(NODE, uid) is False


def test_delete_of_a_replaced_node_leaves_the_new_node(cluster: Cluster) -> None:
    old_uid = cluster.add_node(NODE)
    new_uid = cluster.replace_node(NODE)

    assert cluster.nodes.delete(NODE, old_uid) is False

    node = cluster.nodes.get(NODE)
    assert node is not None and node.uid == new_uid


# -- pods -------------------------------------------------------------------------------------------


def test_list_on_node_returns_the_nodes_pods(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.add_node(OTHER_NODE)
    trainer = cluster.add_pod(NODE, "trainer", owner="StatefulSet", grace=120)
    exporter = cluster.add_pod(NODE, "dcgm-exporter", owner="DaemonSet")
    elsewhere = cluster.add_pod(OTHER_NODE, "trainer", owner="StatefulSet")

    listed = _listed(cluster)

    assert set(listed) == {trainer.uid, exporter.uid}
    assert elsewhere.uid in _listed(cluster, OTHER_NODE)
    assert cluster.pods.list_on_node("ip-10-0-0-1.us-west-2.compute.internal") == []
    on_node = listed[trainer.uid]
    assert (on_node.namespace, on_node.name) == (NAMESPACE, trainer.name)
    assert on_node.owner_kinds == ("StatefulSet",)
    assert on_node.phase == "Running"
    assert on_node.termination_grace_seconds == 120
    assert on_node.needs_eviction and not on_node.deletion_requested
    assert listed[exporter.uid].owner_kinds == ("DaemonSet",)
    assert listed[exporter.uid].is_daemonset_pod and not listed[exporter.uid].needs_eviction


def test_a_pod_listing_is_a_snapshot_later_changes_do_not_reach(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    pod = cluster.add_pod(NODE, "web", grace=600)
    (before,) = cluster.pods.list_on_node(NODE)

    cluster.pods.evict([before], parallelism=1)

    assert before.uid == pod.uid and not before.deletion_requested
    (after,) = cluster.pods.list_on_node(NODE)
    assert after.uid == pod.uid and after.deletion_requested


def test_eviction_blocked_by_a_budget_answers_429_and_the_pod_stays(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.add_budget("trainer", min_available=1)
    pod = cluster.add_pod(NODE, "trainer", owner="StatefulSet")

    report = cluster.pods.evict([pod], parallelism=2)

    (result,) = report.results
    assert result.outcome is PodOutcome.BLOCKED
    assert result.status == 429
    assert result.retryable
    assert "disruption budget" in result.message
    assert [r.pod for r in report.blocked] == [pod.key]
    assert report.evicted == () and report.gone == ()
    listed = _listed(cluster)
    assert pod.uid in listed and not listed[pod.uid].deletion_requested


def test_a_terminating_pod_no_longer_counts_toward_its_budget(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.add_budget("trainer", min_available=1)
    first = cluster.add_pod(NODE, "trainer", owner="StatefulSet", grace=600)
    second = cluster.add_pod(NODE, "trainer", owner="StatefulSet", grace=600)

    assert [r.outcome for r in cluster.pods.evict([first], parallelism=1).results] == [PodOutcome.EVICTED]
    assert [r.outcome for r in cluster.pods.evict([second], parallelism=1).results] == [PodOutcome.BLOCKED]
    # Evicting the pod that is already terminating is accepted: the budget does not apply to it.
    assert [r.outcome for r in cluster.pods.evict([first], parallelism=1).results] == [PodOutcome.EVICTED]


def test_evicting_an_allowed_pod_terminates_it_and_it_leaves(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.add_budget("trainer", min_available=1)
    pod = cluster.add_pod(NODE, "trainer", owner="StatefulSet", grace=30)
    other = cluster.add_pod(NODE, "trainer", owner="StatefulSet", grace=30)
    web = cluster.add_pod(NODE, "web")

    report = cluster.pods.evict([pod, web], parallelism=2)

    assert [r.pod for r in report.evicted] == [pod.key, web.key]
    assert all(r.status == 201 for r in report.evicted)
    listed = _listed(cluster)
    for evicted in (pod, web):
        assert evicted.uid not in listed or listed[evicted.uid].deletion_requested
    assert not listed[other.uid].deletion_requested
    assert cluster.eventually(lambda: not {pod.uid, web.uid} & set(_listed(cluster)), within=60)
    assert other.uid in _listed(cluster)


def test_evicting_a_recreated_namesake_is_gone_and_the_new_pod_stays(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.add_node(OTHER_NODE)
    pod = cluster.add_pod(NODE, "trainer", owner="StatefulSet")
    new_uid = cluster.recreate_pod(pod, OTHER_NODE)
    assert new_uid != pod.uid

    evicted = cluster.pods.evict([pod], parallelism=1)
    deleted = cluster.pods.delete([pod], grace_seconds=0, parallelism=1)

    assert [r.outcome for r in evicted.results] == [PodOutcome.GONE]
    assert [r.outcome for r in deleted.results] == [PodOutcome.GONE]
    assert not evicted.results[0].retryable
    stored = cluster.stored_pod(pod.name)
    assert stored is not None
    assert stored["metadata"]["uid"] == new_uid
    assert not stored["metadata"].get("deletionTimestamp")
    assert [p.uid for p in cluster.pods.list_on_node(OTHER_NODE)] == [new_uid]


def test_delete_with_no_grace_removes_the_pod_at_once(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    cluster.add_budget("trainer", min_available=1)
    pod = cluster.add_pod(NODE, "trainer", owner="StatefulSet", grace=600)

    report = cluster.pods.delete([pod], grace_seconds=0, parallelism=1)

    assert [r.pod for r in report.deleted] == [pod.key]
    assert report.results[0].status == 200
    assert pod.uid not in _listed(cluster)
    assert cluster.stored_pod(pod.name) is None


def test_delete_with_grace_terminates_the_pod_until_it_stops(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    pod = cluster.add_pod(NODE, "web", grace=600)

    report = cluster.pods.delete([pod], grace_seconds=5, parallelism=1)

    assert [r.outcome for r in report.results] == [PodOutcome.DELETED]
    listed = _listed(cluster)
    assert pod.uid not in listed or listed[pod.uid].deletion_requested
    assert cluster.eventually(lambda: pod.uid not in _listed(cluster), within=10)


def test_delete_or_evict_of_a_gone_pod_answers_gone(cluster: Cluster) -> None:
    cluster.add_node(NODE)
    pod = cluster.add_pod(NODE, "web")
    cluster.pods.delete([pod], grace_seconds=0, parallelism=1)

    deleted = cluster.pods.delete([pod], grace_seconds=0, parallelism=1)
    evicted = cluster.pods.evict([pod], parallelism=1)

    assert [r.outcome for r in deleted.results] == [PodOutcome.GONE]
    assert [r.outcome for r in evicted.results] == [PodOutcome.GONE]
    assert deleted.results[0].status == evicted.results[0].status == 404
    assert deleted.deleted == () and evicted.evicted == ()


# -- events -----------------------------------------------------------------------------------------

#: The fields NodeHeal sends; the API server adds its own (uid, resourceVersion, creationTimestamp).
_SENT = (
    "eventTime",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "note",
    "type",
    "regarding",
)


def _as_sent(event: JSON) -> JSON:
    metadata = event["metadata"]
    kept = {key: event[key] for key in _SENT}
    kept["related"] = event.get("related")
    kept["metadata"] = {k: metadata.get(k) for k in ("name", "namespace", "annotations")}
    return kept


def test_events_are_stored_as_sent_and_a_second_write_is_the_same_event(cluster: Cluster) -> None:
    node = ObjectRef.node(NODE, cluster.add_node(NODE))
    pod = cluster.add_pod(NODE, "web")
    told = [
        ObjectEvent(node, EventType.NORMAL, "Cordoned", "Cordon", "Cordoned", "exec-1", "cordon", NOW),
        ObjectEvent(
            ObjectRef.pod(pod),
            EventType.NORMAL,
            "Evicted",
            "Evict",
            "Evicted",
            "exec-1",
            "drain",
            NOW,
            related=node,
        ),
    ]

    cluster.events.record(told)
    cluster.events.record(told)

    sent = [{**event_body(e), "related": event_body(e).get("related")} for e in told]
    for body in sent:
        del body["apiVersion"], body["kind"]
    assert sorted(map(_as_sent, cluster.stored_events()), key=lambda e: e["reason"]) == sent


# -- instances --------------------------------------------------------------------------------------


def test_describe_of_an_unknown_instance_is_none(ec2: Ec2) -> None:
    assert ec2.instances.describe(UNKNOWN_INSTANCE) is None
    assert ec2.instances.describe("not-an-instance") is None


def test_describe_returns_the_state_and_the_tags(ec2: Ec2) -> None:
    instance_id = ec2.launch()

    view = ec2.instances.describe(instance_id)

    assert view is not None
    assert view.instance_id == instance_id
    assert view.state == "running"
    assert view.tags[OWNED_TAG] == "owned"
    assert not view.is_gone


def test_terminate_is_idempotent(ec2: Ec2) -> None:
    instance_id = ec2.launch()

    first = ec2.instances.terminate(instance_id)
    second = ec2.instances.terminate(instance_id)

    assert first.already_gone is False
    assert first.previous_state == "running"
    assert first.current_state == "shutting-down"
    assert second.already_gone is True
    assert second.previous_state in ("shutting-down", "terminated")
    view = ec2.instances.describe(instance_id)
    assert view is not None and view.is_gone


def test_terminate_of_an_unknown_instance_is_already_gone(ec2: Ec2) -> None:
    outcome = ec2.instances.terminate(UNKNOWN_INSTANCE)
    assert outcome.already_gone is True
    assert outcome.current_state == "terminated"


def test_reboot_of_a_running_instance_returns_and_of_an_unknown_one_raises(ec2: Ec2) -> None:
    instance_id = ec2.launch()

    ec2.instances.reboot(instance_id)  # accepted: no error

    view = ec2.instances.describe(instance_id)
    assert view is not None and view.state == "running"
    with pytest.raises(InstanceNotFoundError):
        ec2.instances.reboot(UNKNOWN_INSTANCE)
