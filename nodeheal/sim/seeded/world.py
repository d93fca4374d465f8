"""The simulated cluster and EC2 the seeded schedules run against, and in-memory adapters to them.

One :class:`World` holds Nodes, Pods, PodDisruptionBudgets and EC2 instances as plain data on a
virtual clock. The workflow reaches it only through :class:`MemoryNodes`, :class:`MemoryPods` and
:class:`MemoryInstances`, which implement the workflow's ports (nodeheal.workflow.ports) with the
semantics of the real adapters over the API server and EC2 (uid preconditions, PDB 429s, a
replaced Node answering as gone, terminate idempotent, ...); the contract tests in
``tests/unit/sim/test_memory_adapters.py`` run the same cases against both. The rest of the cluster
(the kubelet finishing pod shutdowns, ReplicaSets replacing evicted pods, an instance rebooting,
Karpenter or a managed node group's Auto Scaling group replacing a terminated node) happens on
timers the scheduler runs like any other actor.

Every adapter operation first calls ``observer.point(operation)``: the scheduler may run other
work there (another step, a fault) before the operation reads or writes, and every mutation is
reported to ``observer.mutated`` so the invariants can see who changed what.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from nodeheal.conditions import is_bad_status
from nodeheal.errors import (
    Ec2IncorrectStateError,
    InstanceNotFoundError,
    NodeGoneError,
)
from nodeheal.instances import (
    CLUSTER_TAG_PREFIX,
    EKS_CLUSTER_NAME_TAGS,
    GONE_STATES,
    CapacityReservationView,
    InstanceView,
    TerminateOutcome,
)
from nodeheal.kube.nodes import MAX_REASON_LENGTH, NODEHEAL_ANNOTATIONS, CordonResult
from nodeheal.kube.pods import DeletionReport, EvictionReport, PodOutcome, PodResult
from nodeheal.kube_event_body import ObjectEvent, event_body
from nodeheal.kube_views import (
    ANNOTATION_CORDONED_AT,
    ANNOTATION_CORDONED_BY_NODEHEAL,
    ANNOTATION_EXECUTION,
    ANNOTATION_REASON,
    UNHEALTHY_TAINT_KEY,
    LiveNode,
    PodView,
)
from nodeheal.sim import detectors
from nodeheal.sim.apiserver.objects import make_node
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.capacity import CAPACITY_BLOCK, RESERVATION_ODCR

JSON = dict[str, Any]
CLUSTER = "training-on-eks"
#: Where the virtual clock of every schedule starts.
START = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
KARPENTER_POOL_LABEL = "karpenter.sh/nodepool"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
#: What EKS puts on a managed node group's nodes besides the group's name (EKS user guide, "Managed
#: node groups": capacity type label); Karpenter's own labels are never on them.
NODEGROUP_CAPACITY_LABEL = "eks.amazonaws.com/capacityType"
KARPENTER_LABEL_PREFIXES = ("karpenter.sh/", "karpenter.k8s.aws/")


@dataclass(frozen=True, slots=True)
class Mutation:
    """One change an adapter made on behalf of a workflow step."""

    kind: str  # cordon | uncordon | evict | force-delete | delete-node | reboot | terminate
    at: datetime
    node: str
    node_uid: str
    instance_id: str
    pod: str = ""
    #: The Node object the pod was bound to (a pod follows its node's name, never its uid).
    pod_node_uid: str = ""
    #: The pod was already terminating (evicted earlier): a PodDisruptionBudget no longer holds it.
    pod_terminating: bool = False
    #: The adapter call's caller (the scheduler's invocation object), for the invariants.
    caller: Any = None


class Observer(Protocol):
    def point(self, operation: str) -> None: ...
    def mutated(self, mutation: Mutation) -> None: ...
    def caller(self) -> Any: ...
    def saw(self, node: JSON) -> None:
        """A step read this Node (what NodeHeal has seen of its conditions)."""
        ...


class _Quiet:
    def point(self, operation: str) -> None:
        return None

    def saw(self, node: JSON) -> None:
        return None

    def mutated(self, mutation: Mutation) -> None:
        return None

    def caller(self) -> Any:
        return None


@dataclass
class Instance:
    instance_id: str
    node: str
    state: str = "running"
    tags: dict[str, str] = field(default_factory=dict)
    #: How it was bought, as DescribeInstances says: "" (on-demand), "spot" or "capacity-block".
    lifecycle: str = ""
    #: The reservation it runs in (an ODCR or a Capacity Block of ``World.reservations``), "" for none.
    reservation_id: str = ""
    instance_type: str = "p5.48xlarge"


#: What a new instance's capacity is, with the weight of each (:func:`draw_capacity`): on-demand
#: is the common case; the rest are there for the capacity rules (D12) to meet.
CAPACITY_KINDS: tuple[tuple[str, int], ...] = (
    ("on-demand", 65),
    ("odcr", 12),
    ("capacity-block", 15),
    ("spot", 8),
)
#: How long after its instance's launch a Capacity Block ends, with the weight of each range in
#: minutes. The first ranges put the end inside a replacement's lifetime (EC2 reclaiming already,
#: or before a replacement would have minBlockRemainingMinutes): blocks that end soon are where
#: the Capacity Block rule decides, so they are drawn often; the 30-hour horizon needs the rest.
BLOCK_END_MINUTES: tuple[tuple[tuple[int, int], int], ...] = (
    ((0, 45), 3),  # reclaiming: EC2's lead (30 or 60 min) and Karpenter's drain have begun or soon will
    ((45, 150), 4),  # too soon for launchMinutes + minBlockRemainingMinutes + the leads
    ((150, 24 * 60), 4),  # hours: ends while the schedule runs
    ((24 * 60, 7 * 24 * 60), 2),  # days: outlives the schedule
)
#: Chance that a fault a reboot cleared returns on the instance (:meth:`World._maybe_returns`).
FAULT_RETURNS_CHANCE = 0.5
#: UltraServer members get 60 minutes of EC2 lead instead of 30 (nodeheal.workflow.capacity).
ULTRASERVER_TYPE = "p6e-gb200.36xlarge"


def _weighted(rng: random.Random, choices: Sequence[tuple[Any, int]]) -> Any:
    return rng.choices([value for value, _ in choices], weights=[weight for _, weight in choices])[0]


@dataclass(frozen=True, slots=True)
class Budget:
    """A PodDisruptionBudget over the pods of one workload (label ``app``)."""

    app: str
    min_available: int


@dataclass(order=True)
class Timer:
    at: datetime
    seq: int
    label: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)


class World:
    """Nodes, pods, budgets and instances on a virtual clock (see the module docstring)."""

    def __init__(
        self,
        rng: random.Random,
        clock: Callable[[], datetime],
        *,
        cluster: str = CLUSTER,
        capacity_rng: random.Random | None = None,
    ) -> None:
        self.rng = rng
        #: Draws each new instance's capacity (:meth:`_draw_capacity`) and whether a fault a reboot
        #: cleared comes back (:meth:`_maybe_returns`): what the capacity rules (D12) act on. A
        #: stream of its own, so the schedule's own stream, and with it every fault and timing a
        #: seed drew before instances had capacity, stays as it was. None: every instance
        #: on-demand with no reservation, and no fault returns.
        self.capacity_rng = capacity_rng
        #: The Capacity Reservations (ODCRs and Capacity Blocks) instances run in, by id.
        self.reservations: dict[str, CapacityReservationView] = {}
        self.clock = clock
        self.cluster = cluster
        self.nodes: dict[str, JSON] = {}
        self.pods: dict[tuple[str, str], JSON] = {}
        #: pod uid -> uid of the Node object it was scheduled on.
        self.pod_node_uid: dict[str, str] = {}
        self.budgets: list[Budget] = []
        self.instances: dict[str, Instance] = {}
        #: Nodes whose kubelet is dead: their terminating pods never finish.
        self.dead_kubelets: set[str] = set()
        #: Node name -> the providerID the cloud controller has not set yet (provider-id-late).
        self.unnamed_instances: dict[str, str] = {}
        #: Events the steps told, by (namespace, name), as the API server would have stored them.
        self.events: dict[tuple[str, str], JSON] = {}
        #: Each Event stored, with the invocation that told it (the observer's caller), in order.
        self.told: list[tuple[Any, JSON]] = []
        #: Why Events could not even be built (a bug in nodeheal.workflow.step_events).
        self.untold: list[str] = []
        self.observer: Observer = _Quiet()
        #: Called after every change of a Node object (the exporter's watch).
        self.on_node_change: Callable[[JSON, bool], None] = lambda node, deleted: None
        self.timers: list[Timer] = []
        self._ids = itertools.count(1)
        self._rv = itertools.count(100)

    # -- identities and time ------------------------------------------------------------------

    def now(self) -> datetime:
        return self.clock()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    def new_instance_id(self) -> str:
        return f"i-{next(self._ids):017x}"

    def at(self, delay_seconds: float, label: str, action: Callable[[], None]) -> None:
        heapq.heappush(
            self.timers, Timer(self.now() + timedelta(seconds=delay_seconds), next(self._ids), label, action)
        )

    def next_timer_at(self) -> datetime | None:
        return self.timers[0].at if self.timers else None

    def pop_due_timer(self) -> Timer | None:
        if self.timers and self.timers[0].at <= self.now():
            return heapq.heappop(self.timers)
        return None

    # -- building the cluster ---------------------------------------------------------------------

    def add_node(self, name: str, *, pool_kind: str, pool: str, instance_type: str = "p5.48xlarge") -> JSON:
        instance_id = self.new_instance_id()
        instance = self._draw_capacity(Instance(instance_id, name, instance_type=instance_type))
        # The Node's instance-type label is the instance's (an UltraServer member in a block).
        raw = make_node(name, instance_id=instance_id, instance_type=instance.instance_type, node_pool=pool)
        labels = raw["metadata"]["labels"]
        tags = {f"kubernetes.io/cluster/{self.cluster}": "owned"}
        if pool_kind == "karpenter":
            labels[KARPENTER_POOL_LABEL] = pool
        else:
            # A node Karpenter did not launch carries none of its labels.
            for key in [k for k in labels if k.startswith(KARPENTER_LABEL_PREFIXES)]:
                del labels[key]
        if pool_kind == "nodegroup":
            labels[NODEGROUP_LABEL] = pool
            labels[NODEGROUP_CAPACITY_LABEL] = "ON_DEMAND"
            tags.update({"eks:cluster-name": self.cluster, "eks:nodegroup-name": pool})
        stamp = format_timestamp(self.now())
        raw["metadata"]["uid"] = self.new_id("uid-")
        raw["metadata"]["creationTimestamp"] = stamp
        raw["metadata"]["resourceVersion"] = str(next(self._rv))
        raw["status"]["nodeInfo"]["bootID"] = self.new_id("boot-")
        for condition in raw["status"]["conditions"]:
            condition["lastTransitionTime"] = stamp
            condition["lastHeartbeatTime"] = stamp
        self.nodes[name] = raw
        instance.tags = tags
        self.instances[instance_id] = instance
        self.on_node_change(raw, False)
        return raw

    def _draw_capacity(self, instance: Instance) -> Instance:
        """How ``instance`` was bought, from :attr:`capacity_rng`: on-demand, in an ODCR, in a
        Capacity Block of its own (ending from already reclaiming to days after the launch), or spot.
        DescribeInstances and DescribeCapacityReservations tell it; of the Node, only the
        instance-type label follows it."""
        rng = self.capacity_rng
        if rng is None:
            return instance
        kind = _weighted(rng, CAPACITY_KINDS)
        if kind == "spot":
            instance.lifecycle = "spot"
        elif kind == "odcr":
            instance.reservation_id = f"cr-{rng.getrandbits(68):017x}"
            # An ODCR mostly runs until cancelled; some end, days away.
            end = self.now() + timedelta(days=rng.randint(2, 30)) if rng.random() < 0.3 else None
            self.reservations[instance.reservation_id] = self._reservation(instance, RESERVATION_ODCR, end)
        elif kind == "capacity-block":
            instance.lifecycle = CAPACITY_BLOCK
            instance.reservation_id = f"cr-{rng.getrandbits(68):017x}"
            if rng.random() < 0.2:
                instance.instance_type = ULTRASERVER_TYPE
            low, high = _weighted(rng, BLOCK_END_MINUTES)
            end = self.now() + timedelta(minutes=rng.uniform(low, high))
            self.reservations[instance.reservation_id] = self._reservation(instance, CAPACITY_BLOCK, end)
        return instance

    def _reservation(
        self, instance: Instance, reservation_type: str, end: datetime | None
    ) -> CapacityReservationView:
        return CapacityReservationView(
            reservation_id=instance.reservation_id,
            reservation_type=reservation_type,
            state="active",
            instance_type=instance.instance_type,
            availability_zone="us-west-2a",
            total_instance_count=1,
            available_instance_count=0,
            end_date=end,
        )

    def block_end(self, instance_id: str) -> tuple[datetime, str] | None:
        """(end date, instance type) of the Capacity Block ``instance_id`` runs in; None if it
        runs in none."""
        instance = self.instances.get(instance_id)
        if instance is None or instance.lifecycle != CAPACITY_BLOCK:
            return None
        reservation = self.reservations.get(instance.reservation_id)
        if reservation is None or reservation.end_date is None:
            return None
        return reservation.end_date, instance.instance_type

    def add_pod(
        self,
        node: str,
        app: str,
        *,
        owner: str | None = "ReplicaSet",
        grace: int = 30,
        empty_dir: bool = False,
        namespace: str = "training",
    ) -> JSON:
        """A running pod; ``owner`` None makes it unmanaged (no controller recreates it), and
        ``empty_dir`` gives it an emptyDir volume (the drain policy's data-loss classes)."""
        name = f"{app}-{self.new_id('')}"
        pod: JSON = {
            "metadata": {
                "namespace": namespace,
                "name": name,
                "uid": self.new_id("pod-"),
                "labels": {"app": app},
                "annotations": {},
                # As the API server returns them: apiVersion, kind, name, uid and the controller flag
                # (kubectl drain and NodeHeal tell a DaemonSet pod by its apps/v1 controller).
                "ownerReferences": (
                    [
                        {
                            "apiVersion": "apps/v1",
                            "kind": owner,
                            "name": app,
                            "uid": f"owner-{namespace}-{app}",
                            "controller": True,
                        }
                    ]
                    if owner
                    else []
                ),
            },
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": grace},
            "status": {"phase": "Running"},
        }
        if empty_dir:
            pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        self.pods[(namespace, name)] = pod
        self.pod_node_uid[pod["metadata"]["uid"]] = self.nodes[node]["metadata"]["uid"]
        return pod

    # -- reading ------------------------------------------------------------------------------------

    def node_uid(self, name: str) -> str:
        node = self.nodes.get(name)
        return str(node["metadata"]["uid"]) if node else ""

    def instance_of(self, name: str) -> str:
        node = self.nodes.get(name)
        if node is None:
            return ""
        return str(node["spec"].get("providerID", "")).rsplit("/", 1)[-1]

    def condition(self, name: str, condition_type: str) -> JSON | None:
        node = self.nodes.get(name)
        if node is None:
            return None
        for condition in node["status"]["conditions"]:
            if condition["type"] == condition_type:
                return dict(condition)
        return None

    def is_bad(self, name: str, condition_type: str) -> bool:
        condition = self.condition(name, condition_type)
        return condition is not None and is_bad_status(condition_type, str(condition["status"]))

    def pods_on(self, node: str) -> list[JSON]:
        return [p for p in self.pods.values() if p["spec"].get("nodeName") == node]

    def pool_of(self, node: JSON) -> tuple[str, str]:
        """(kind, name) of the node's pool: a Karpenter NodePool, a managed node group, or none."""
        labels = node["metadata"]["labels"]
        if KARPENTER_POOL_LABEL in labels:
            return "karpenter", str(labels[KARPENTER_POOL_LABEL])
        if NODEGROUP_LABEL in labels:
            return "nodegroup", str(labels[NODEGROUP_LABEL])
        return "none", ""

    # -- changes the cluster makes (detectors, kubelet, controllers, Karpenter) -----------------------

    def _touch(self, node: JSON) -> None:
        node["metadata"]["resourceVersion"] = str(next(self._rv))
        self.on_node_change(node, False)

    def _write_condition(self, name: str, condition_type: str, write: detectors.Writer) -> bool:
        node = self.nodes.get(name)
        if node is None:
            return False
        conditions = node["status"]["conditions"]
        for index, condition in enumerate(conditions):
            if condition["type"] == condition_type:
                conditions[index] = write(condition)
                break
        else:
            conditions.insert(len(conditions) - 1, write(None))
        self._touch(node)
        return True

    def set_condition(self, name: str, condition_type: str, status: str, reason: str, message: str) -> bool:
        """A plain write (``detectors.set_plainly``): the transition time moves only when the
        status changes, reason and message are replaced. How the kubelet (and the node lifecycle
        controller) write Ready, and what a test uses to place a condition exactly. The detectors
        write otherwise: :meth:`report_condition`."""
        stamp = format_timestamp(self.now())
        return self._write_condition(
            name,
            condition_type,
            lambda current: detectors.set_plainly(current, condition_type, status, reason, message, stamp),
        )

    def report_condition(
        self, name: str, condition_type: str, status: str, reason: str, message: str
    ) -> bool:
        """What the detector that owns ``condition_type`` writes for this report
        (``detectors.report``): NPD's log monitor moves the transition time and replaces the
        message when the reason changes and keeps the old message when it repeats; the node
        monitoring agent keeps the transition time while the condition stays False, takes the
        newest reason and joins the messages with "; "."""
        stamp = format_timestamp(self.now())
        return self._write_condition(
            name,
            condition_type,
            lambda current: detectors.report(current, condition_type, status, reason, message, stamp),
        )

    def restart_detector(self, name: str, condition_type: str) -> bool:
        """The detector that owns ``condition_type`` starts again (its pod restarts, or the node
        booted): it writes the condition's start-up state, healthy, with a new transition time."""
        return self.report_condition(name, condition_type, *detectors.healthy(condition_type))

    def delete_node_object(self, name: str) -> JSON | None:
        node = self.nodes.pop(name, None)
        if node is None:
            return None
        # The pod garbage collector removes the pods of a deleted node.
        for key in [k for k, p in self.pods.items() if p["spec"].get("nodeName") == name]:
            del self.pods[key]
        self.dead_kubelets.discard(name)
        self.on_node_change(node, True)
        return node

    def join_node(self, name: str, like: JSON) -> JSON:
        """A new instance joins as Node ``name`` (Karpenter's replacement; EC2 may reuse the IP,
        so the name may be an old one) in the same pool, healthy."""
        kind, pool = self.pool_of(like)
        fresh = self.add_node(name, pool_kind=kind, pool=pool or "gpu")
        for app in ("trainer", "sidecar"):
            self.add_pod(name, app)
        return fresh

    def reregister_node(self, name: str) -> JSON | None:
        """The kubelet registers Node ``name`` again, its object having been deleted while it ran:
        the same instance and boot under a new UID. The kubelet registers with its own taints only,
        so NodeHeal's taint, cordon and annotations are gone; NPD posts its conditions again as it
        holds them (status, reason, message and transition time), so a dead GPU reads as before."""
        old = self.delete_node_object(name)
        if old is None:
            return None
        raw = copy.deepcopy(old)
        metadata = raw["metadata"]
        metadata["uid"] = self.new_id("uid-")
        metadata["creationTimestamp"] = format_timestamp(self.now())
        metadata["resourceVersion"] = str(next(self._rv))
        metadata["annotations"] = {
            key: value
            for key, value in (metadata.get("annotations") or {}).items()
            if key not in NODEHEAL_ANNOTATIONS
        }
        spec = raw["spec"]
        spec.pop("unschedulable", None)
        spec["taints"] = [t for t in spec.get("taints", []) if t.get("key") != UNHEALTHY_TAINT_KEY]
        self.nodes[name] = raw
        self.on_node_change(raw, False)
        for app in ("trainer", "sidecar"):
            self.add_pod(name, app)
        return raw

    def join_without_provider_id(self, like: JSON) -> str:
        """A node joins ``like``'s pool before its providerID is set: its instance runs, but the
        Node does not name it yet. Returns its name; :meth:`set_provider_id` names the instance."""
        name = f"ip-10-0-{self.rng.randrange(1, 250)}-{self.rng.randrange(1, 250)}"
        if name in self.nodes:
            name = f"{name}-{self.new_id('')}"
        raw = self.join_node(name, like)
        self.unnamed_instances[name] = str(raw["spec"].pop("providerID"))
        self._touch(raw)
        return name

    def set_provider_id(self, name: str) -> bool:
        """The cloud controller sets the providerID of a node that joined without one."""
        provider_id = self.unnamed_instances.pop(name, None)
        raw = self.nodes.get(name)
        if provider_id is None or raw is None:
            return False
        raw["spec"]["providerID"] = provider_id
        self._touch(raw)
        return True

    def person_takes_back(self, name: str) -> bool:
        """A person takes the node back from NodeHeal: uncordons it and removes NodeHeal's taint and
        annotations (``kubectl uncordon`` and ``kubectl taint ... nodeheal.io/unhealthy-``)."""
        raw = self.nodes.get(name)
        if raw is None:
            return False
        spec = raw["spec"]
        taints = spec.get("taints", [])
        if not any(t.get("key") == UNHEALTHY_TAINT_KEY for t in taints):
            return False
        spec["taints"] = [t for t in taints if t.get("key") != UNHEALTHY_TAINT_KEY]
        spec.pop("unschedulable", None)
        annotations = raw["metadata"].get("annotations") or {}
        for key in NODEHEAL_ANNOTATIONS:
            annotations.pop(key, None)
        self._touch(raw)
        return True

    def untag_instance(self, name: str) -> bool:
        """The node's instance loses every cluster ownership tag (``kubernetes.io/cluster/<name>``,
        ``eks:cluster-name``): it is no longer this cluster's to reboot or terminate."""
        instance = self.instances.get(self.instance_of(name))
        if instance is None:
            return False
        owned = [
            key for key in instance.tags if key.startswith(CLUSTER_TAG_PREFIX) or key in EKS_CLUSTER_NAME_TAGS
        ]
        for key in owned:
            del instance.tags[key]
        return bool(owned)

    def instance_stopped(self, instance_id: str) -> None:
        """The instance is gone: its node goes NotReady, and who replaces it depends on its pool.

        Karpenter deletes the Node object later and brings up a replacement (EC2 may reuse the IP,
        so possibly under the old name). A managed node group's Auto Scaling group launches a new
        instance to keep its desired capacity (EC2 Auto Scaling user guide, "Health checks": an
        instance that terminates unexpectedly is replaced), which joins under a new name, while the
        cloud node lifecycle controller deletes the old Node object: the two are independent."""
        instance = self.instances.get(instance_id)
        if instance is None:
            return
        instance.state = "terminated"
        name = instance.node
        node = self.nodes.get(name)
        if node is None or self.instance_of(name) != instance_id:
            return
        self.dead_kubelets.add(name)
        self.set_condition(
            name, "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
        )
        uid = node["metadata"]["uid"]
        if self.pool_of(node)[0] == "nodegroup":
            self._auto_scaling_group_replace(name, uid, node)
            return
        self.at(
            self.rng.uniform(5, 60), f"karpenter removes {name}", lambda: self._karpenter_replace(name, uid)
        )

    def _auto_scaling_group_replace(self, name: str, uid: str, node: JSON) -> None:
        def delete() -> None:
            current = self.nodes.get(name)
            if current is not None and current["metadata"]["uid"] == uid:
                self.delete_node_object(name)

        self.at(self.rng.uniform(5, 60), f"node lifecycle controller deletes {name}", delete)
        # A new instance gets a new private IP, so its Node has a name no current node has.
        new_name = f"ip-10-0-{self.rng.randrange(1, 250)}-{self.rng.randrange(1, 250)}"
        if new_name == name or new_name in self.nodes:
            new_name = f"{new_name}-{self.new_id('')}"
        group = self.pool_of(node)[1]

        def join() -> None:
            taken = new_name in self.nodes  # by a node that joined meanwhile
            self.join_node(f"{new_name}-{self.new_id('')}" if taken else new_name, node)

        self.at(self.rng.uniform(60, 300), f"auto scaling group {group} launches {new_name}", join)

    def _karpenter_replace(self, name: str, uid: str) -> None:
        node = self.nodes.get(name)
        if node is None or node["metadata"]["uid"] != uid:
            return
        self.delete_node_object(name)
        reuse = self.rng.random() < 0.3
        new_name = name if reuse else f"ip-10-0-{self.rng.randrange(1, 250)}-{self.rng.randrange(1, 250)}"
        if new_name in self.nodes:
            new_name = f"{new_name}-{self.new_id('')}"

        def join() -> None:
            self.join_node(new_name, node)

        self.at(self.rng.uniform(30, 120), f"{new_name} joins", join)

    def reboot_instance(self, instance_id: str, *, heals: bool) -> None:
        instance = self.instances[instance_id]
        name = instance.node

        def down() -> None:
            if self.instance_of(name) == instance_id:
                self.set_condition(name, "Ready", "False", "KubeletNotReady", "node is rebooting")

        def up() -> None:
            node = self.nodes.get(name)
            if node is None or self.instance_of(name) != instance_id or instance.state != "running":
                return
            node["status"]["nodeInfo"]["bootID"] = self.new_id("boot-")
            for condition in list(node["status"]["conditions"]):
                kind = condition["type"]
                if kind != "Ready" and is_bad_status(kind, condition["status"]) and heals:
                    # The detectors start again with the node and write their start-up state.
                    self.restart_detector(name, kind)
                    self._maybe_returns(instance_id, dict(condition))
            self.set_condition(name, "Ready", "True", "KubeletReady", "kubelet is posting ready status")

        self.at(self.rng.uniform(1, 10), f"{name} goes down for reboot", down)
        self.at(self.rng.uniform(40, 200), f"{name} is back from reboot", up)

    def _maybe_returns(self, instance_id: str, fault: JSON) -> None:
        """Sometimes (drawn from :attr:`capacity_rng`) a fault a reboot cleared comes back on the
        same instance, 20 minutes to 8 hours later: the reboot only seemed to fix it. That is what
        ``rebootEscalationHours`` escalates to replace, and what the scarce-pool rule (D12) keeps
        rebooting on scarce on-demand capacity, so the rule meets it often enough to be tested."""
        rng = self.capacity_rng
        if rng is None or rng.random() >= FAULT_RETURNS_CHANCE:
            return
        instance = self.instances[instance_id]

        def back() -> None:
            if instance.state != "running" or self.instance_of(instance.node) != instance_id:
                return
            self.report_condition(
                instance.node,
                str(fault["type"]),
                str(fault["status"]),
                str(fault["reason"]),
                str(fault["message"]),
            )

        self.at(rng.uniform(20 * 60, 8 * 3600), f"{fault['type']} returns on {instance.node}", back)

    def _finish_pod(self, key: tuple[str, str], uid: str) -> None:
        pod = self.pods.get(key)
        if pod is None or pod["metadata"]["uid"] != uid:
            return
        if pod["spec"].get("nodeName") in self.dead_kubelets:
            return  # nobody stops the containers: the pod stays Terminating
        del self.pods[key]

    def _begin_delete(self, pod: JSON, grace: int) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        uid = pod["metadata"]["uid"]
        already_terminating = bool(pod["metadata"].get("deletionTimestamp"))
        if grace <= 0:
            del self.pods[key]
        elif not already_terminating:
            pod["metadata"]["deletionTimestamp"] = format_timestamp(self.now() + timedelta(seconds=grace))
            stop = self.rng.uniform(0.2, min(grace, 45))
            self.at(stop, f"pod {key[1]} stops", lambda: self._finish_pod(key, uid))
        if already_terminating:
            return  # its controller replaced it when its deletion began
        owner = (pod["metadata"].get("ownerReferences") or [{}])[0].get("kind")
        app = pod["metadata"]["labels"].get("app", "")
        if owner in ("ReplicaSet", "StatefulSet"):
            self.at(self.rng.uniform(5, 60), f"replacement {app} pod", lambda: self._replace_pod(app))

    def _replace_pod(self, app: str) -> None:
        candidates = sorted(
            name
            for name, node in self.nodes.items()
            if not node["spec"].get("unschedulable") and name not in self.dead_kubelets
        )
        if candidates:
            self.add_pod(self.rng.choice(candidates), app)

    def _disruptions_allowed(self, pod: JSON) -> int | None:
        app = pod["metadata"]["labels"].get("app")
        budgets = [b for b in self.budgets if b.app == app]
        if not budgets:
            return None
        healthy = sum(
            1
            for p in self.pods.values()
            if p["metadata"]["labels"].get("app") == app
            and not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") == "Running"
        )
        return min(healthy - b.min_available for b in budgets)


def _selects(selector: str, labels: dict[str, str]) -> bool:
    """The label selectors NodeHeal sends: ``key=value`` and ``!key`` requirements, comma-joined."""
    for requirement in filter(None, (part.strip() for part in selector.split(","))):
        if requirement.startswith("!"):
            if requirement[1:] in labels:
                return False
            continue
        key, _, value = requirement.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _pod_key(pod: JSON) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


class MemoryNodes:
    """NodePort over the world, with nodeheal.kube.nodes.NodeOperations' semantics."""

    def __init__(self, world: World) -> None:
        self._world = world

    def get(self, name: str) -> LiveNode | None:
        self._world.observer.point("get node")
        raw = self._world.nodes.get(name)
        if raw is None:
            return None
        self._world.observer.saw(raw)
        # LiveNode copies what it keeps, so the stored object is not shared with the caller.
        return LiveNode.from_api(raw)

    def list(self, label_selector: str | None = None) -> list[LiveNode]:
        self._world.observer.point("list nodes")
        selected = [
            raw
            for raw in self._world.nodes.values()
            if _selects(label_selector or "", raw["metadata"]["labels"])
        ]
        for raw in selected:
            self._world.observer.saw(raw)
        return [LiveNode.from_api(raw) for raw in selected]

    def _read_for_update(self, name: str, expected_uid: str | None, action: str) -> JSON:
        raw = self._world.nodes.get(name)
        if raw is None:
            raise NodeGoneError(f"{action}: node {name} no longer exists")
        if expected_uid and raw["metadata"]["uid"] != expected_uid:
            raise NodeGoneError(f"{action}: node {name} was replaced (uid {raw['metadata']['uid']})")
        return raw

    def _mutated(self, kind: str, raw: JSON) -> None:
        world = self._world
        name = raw["metadata"]["name"]
        world.observer.mutated(
            Mutation(
                kind,
                world.now(),
                name,
                raw["metadata"]["uid"],
                world.instance_of(name),
                caller=world.observer.caller(),
            )
        )

    def cordon(
        self, name: str, *, execution: str, reason: str, now: datetime, expected_uid: str | None = None
    ) -> CordonResult:
        self._world.observer.point("patch node (cordon)")
        action = f"cordon node {name}"
        raw = self._read_for_update(name, expected_uid, action)
        annotations = raw["metadata"].setdefault("annotations", {})
        taints = raw["spec"].setdefault("taints", [])
        has_taint = any(t.get("key") == UNHEALTHY_TAINT_KEY for t in taints)
        owned_flag = annotations.get(ANNOTATION_CORDONED_BY_NODEHEAL) == "true"
        previous = annotations.get(ANNOTATION_EXECUTION)
        unschedulable = bool(raw["spec"].get("unschedulable"))
        if unschedulable and has_taint and previous == execution:
            return CordonResult(
                node=LiveNode.from_api(copy.deepcopy(raw)), changed=False, flipped_unschedulable=owned_flag
            )
        flipped = owned_flag if unschedulable else True
        annotations[ANNOTATION_EXECUTION] = execution
        annotations[ANNOTATION_REASON] = reason[:MAX_REASON_LENGTH]
        annotations[ANNOTATION_CORDONED_AT] = format_timestamp(now)
        if flipped:
            annotations[ANNOTATION_CORDONED_BY_NODEHEAL] = "true"
        else:
            annotations.pop(ANNOTATION_CORDONED_BY_NODEHEAL, None)
        if not has_taint:
            taints.append({"key": UNHEALTHY_TAINT_KEY, "effect": "NoSchedule"})
        raw["spec"]["unschedulable"] = True
        self._world._touch(raw)
        self._mutated("cordon", raw)
        return CordonResult(
            node=LiveNode.from_api(copy.deepcopy(raw)),
            changed=True,
            flipped_unschedulable=flipped,
            previous_execution=previous if previous and previous != execution else None,
        )

    def uncordon(self, name: str, *, expected_uid: str | None = None) -> bool:
        self._world.observer.point("patch node (uncordon)")
        raw = self._read_for_update(name, expected_uid, f"uncordon node {name}")
        annotations = raw["metadata"].setdefault("annotations", {})
        taints = raw["spec"].get("taints") or []
        kept = [t for t in taints if t.get("key") != UNHEALTHY_TAINT_KEY]
        ours = [key for key in NODEHEAL_ANNOTATIONS if key in annotations]
        clear_flag = annotations.get(ANNOTATION_CORDONED_BY_NODEHEAL) == "true" and bool(
            raw["spec"].get("unschedulable")
        )
        if len(kept) == len(taints) and not ours and not clear_flag:
            return False
        raw["spec"]["taints"] = kept
        if clear_flag:
            raw["spec"]["unschedulable"] = False
        for key in ours:
            del annotations[key]
        self._world._touch(raw)
        self._mutated("uncordon", raw)
        return True

    def delete(self, name: str, uid: str) -> bool:
        self._world.observer.point("delete node")
        raw = self._world.nodes.get(name)
        if raw is None or raw["metadata"]["uid"] != uid:
            return False
        self._mutated("delete-node", raw)
        self._world.delete_node_object(name)
        return True


class MemoryPods:
    """PodPort over the world, with nodeheal.kube.pods.PodOperations' semantics: every eviction and
    deletion carries the pod's uid as a precondition, PDBs answer 429."""

    def __init__(self, world: World) -> None:
        self._world = world

    def list_on_node(self, node_name: str) -> list[PodView]:
        self._world.observer.point("list pods")
        return [PodView.from_api(p) for p in self._world.pods_on(node_name)]

    def _current(self, pod: PodView) -> JSON | None:
        stored = self._world.pods.get((pod.namespace, pod.name))
        return stored if stored is not None and stored["metadata"]["uid"] == pod.uid else None

    def _mutated(self, kind: str, stored: JSON) -> None:
        world = self._world
        node = str(stored["spec"].get("nodeName", ""))
        world.observer.mutated(
            Mutation(
                kind,
                world.now(),
                node,
                world.node_uid(node),
                world.instance_of(node),
                pod=_pod_key(stored),
                pod_node_uid=world.pod_node_uid.get(stored["metadata"]["uid"], ""),
                pod_terminating=bool(stored["metadata"].get("deletionTimestamp")),
                caller=world.observer.caller(),
            )
        )

    def evict(self, pods: Sequence[PodView], *, parallelism: int) -> EvictionReport:
        results = []
        for pod in pods:
            self._world.observer.point("create eviction")
            stored = self._current(pod)
            if stored is None:
                results.append(PodResult(pod.key, pod.uid, PodOutcome.GONE, 404, "pod not found"))
                continue
            allowed = self._world._disruptions_allowed(stored)
            if allowed is not None and allowed <= 0 and not stored["metadata"].get("deletionTimestamp"):
                results.append(
                    PodResult(
                        pod.key,
                        pod.uid,
                        PodOutcome.BLOCKED,
                        429,
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    )
                )
                continue
            self._mutated("evict", stored)
            self._world._begin_delete(stored, int(stored["spec"].get("terminationGracePeriodSeconds", 30)))
            results.append(PodResult(pod.key, pod.uid, PodOutcome.EVICTED, 201))
        return EvictionReport(tuple(results))

    def delete(self, pods: Sequence[PodView], *, grace_seconds: int, parallelism: int) -> DeletionReport:
        results = []
        for pod in pods:
            self._world.observer.point("delete pod")
            stored = self._current(pod)
            if stored is None:
                results.append(PodResult(pod.key, pod.uid, PodOutcome.GONE, 404, "pod not found"))
                continue
            self._mutated("force-delete", stored)
            self._world._begin_delete(stored, grace_seconds)
            results.append(PodResult(pod.key, pod.uid, PodOutcome.DELETED, 200))
        return DeletionReport(tuple(results))


class MemoryEvents:
    """EventPort over the world, with nodeheal.kube.event_writer.EventOperations' semantics: the same
    body is stored (``World.events``) and a second write of the same name is already there.

    The one adapter that calls no ``observer.point``: an Event changes nothing a step or an
    invariant reads, and a scheduling point per Event would move every fault of every seeded
    schedule (and the seeds that found the defects). How a failing or slow Events endpoint leaves
    the steps alone is tested against the fake API server instead."""

    def __init__(self, world: World) -> None:
        self._world = world

    def record(self, events: Sequence[ObjectEvent]) -> None:
        for event in events:
            body = event_body(event)
            key = (body["metadata"]["namespace"], body["metadata"]["name"])
            if key not in self._world.events:
                self._world.events[key] = body
                self._world.told.append((self._world.observer.caller(), body))

    def lost(self, count: int, why: str) -> None:
        # Production logs and counts these; the simulation keeps them for a test to fail on.
        self._world.untold.append(f"{count} Event(s): {why}")


class MemoryInstances:
    """InstancePort over the world, with nodeheal.aws.ec2.Ec2Instances' semantics."""

    def __init__(self, world: World, *, reboot_heals: Callable[[], bool]) -> None:
        self._world = world
        self._reboot_heals = reboot_heals
        #: (instance, fault start) of each ReportInstanceStatus EC2 accepted.
        self.impaired_reports: list[tuple[str, datetime]] = []

    def describe(self, instance_id: str) -> InstanceView | None:
        self._world.observer.point("ec2:DescribeInstances")
        instance = self._world.instances.get(instance_id)
        if instance is None:
            return None
        return InstanceView(
            instance_id,
            instance.state,
            dict(instance.tags),
            lifecycle=instance.lifecycle,
            capacity_reservation_id=instance.reservation_id,
            instance_type=instance.instance_type,
        )

    def _mutated(self, kind: str, instance: Instance) -> None:
        world = self._world
        node = instance.node
        current = world.instance_of(node) == instance.instance_id
        world.observer.mutated(
            Mutation(
                kind,
                world.now(),
                node,
                world.node_uid(node) if current else "",
                instance.instance_id,
                caller=world.observer.caller(),
            )
        )

    def terminate(self, instance_id: str) -> TerminateOutcome:
        self._world.observer.point("ec2:TerminateInstances")
        instance = self._world.instances.get(instance_id)
        if instance is None:
            return TerminateOutcome(instance_id, "", "terminated", already_gone=True)
        previous = instance.state
        if previous in GONE_STATES:
            return TerminateOutcome(instance_id, previous, previous, already_gone=True)
        self._mutated("terminate", instance)
        instance.state = "shutting-down"
        self._world.at(
            self._world.rng.uniform(5, 40),
            f"{instance_id} terminated",
            lambda: self._world.instance_stopped(instance_id),
        )
        return TerminateOutcome(instance_id, previous, "shutting-down", already_gone=False)

    def capacity_reservation(self, reservation_id: str) -> CapacityReservationView | None:
        """The reservation (ODCR or Capacity Block) the world holds under ``reservation_id``."""
        self._world.observer.point("ec2:DescribeCapacityReservations")
        return self._world.reservations.get(reservation_id)

    def report_impaired(self, instance_id: str, start_time: datetime) -> None:
        self._world.observer.point("ec2:ReportInstanceStatus")
        if instance_id not in self._world.instances:
            raise InstanceNotFoundError(f"ec2:ReportInstanceStatus {instance_id}: InvalidInstanceID.NotFound")
        self.impaired_reports.append((instance_id, start_time))

    def reboot(self, instance_id: str) -> None:
        self._world.observer.point("ec2:RebootInstances")
        instance = self._world.instances.get(instance_id)
        if instance is None:
            raise InstanceNotFoundError(f"ec2:RebootInstances {instance_id}: InvalidInstanceID.NotFound")
        if instance.state != "running":
            raise Ec2IncorrectStateError(
                f"ec2:RebootInstances {instance_id}: IncorrectInstanceState ({instance.state})"
            )
        self._mutated("reboot", instance)
        self._world.reboot_instance(instance_id, heals=self._reboot_heals())
