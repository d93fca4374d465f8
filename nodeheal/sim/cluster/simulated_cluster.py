"""A simulated EKS GPU cluster that behaves enough like the real one for NodeHeal to heal it.

On top of the fake API server's store it plays the parts of the cluster NodeHeal relies on but
does not own:

* node-problem-detector and the node monitoring agent: :meth:`SimulatedCluster.inject` writes a
  Node condition as the detector that owns it does (``nodeheal.sim.detectors``);
* the kubelet after an EC2 reboot (:class:`NodeAgent`): a new boot ID, detectors that start clean,
  and a kubelet that :meth:`SimulatedCluster.kill_kubelet` had killed running again;
* Karpenter (:class:`KarpenterStandIn`): a deleted NodeClaim has its instance terminated; when an
  instance is terminated it deletes the Node and its NodeClaim and,
  after a delay, launches a replacement instance in moto and registers its Node;
* the Job/StatefulSet/DaemonSet controllers, pod garbage collection and the scheduler
  (:class:`WorkloadControllers`): a deleted workload pod comes back Pending and is bound to a
  Ready, schedulable node with enough free GPUs.

Every delay is a real-world duration divided by the simulation's speed, and every step is
reported on the :class:`~nodeheal.sim.timeline.Timeline`.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from nodeheal.conditions import is_positive_condition
from nodeheal.events import instance_id_from_provider_id
from nodeheal.sim.apiserver.objects import make_node, make_nodeclaim, make_pdb, make_pod, rfc3339
from nodeheal.sim.apiserver.status import ApiError
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.cluster.controllers import KarpenterStandIn, NodeAgent, WorkloadControllers
from nodeheal.sim.cluster.layout import ClusterLayout, ClusterTimings, SimClock
from nodeheal.sim.cluster.names import PrivateDnsNames, SuffixGenerator
from nodeheal.sim.cluster.workload import HEALTHY_CONDITIONS, JSON, TRAINING_JOB, is_running
from nodeheal.sim.local_aws import LocalAws
from nodeheal.sim.timeline import Timeline, short_node

logger = logging.getLogger(__name__)

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
TRAINING_NAMESPACE = "training"
NOTEBOOK_NAMESPACE = "research"
NOTEBOOK_SET = "jupyter"


# -- faults, as node-problem-detector and the EKS node monitoring agent report them ----------------


@dataclass(frozen=True, slots=True)
class Fault:
    """A Node condition a detector sets; ``label`` names it on the timeline."""

    label: str
    condition_type: str
    status: str
    reason: str
    message: str

    def describe(self, node: str) -> str:
        """The timeline's line for this fault set on ``node``."""
        return f"{self.label} on {short_node(node)}: {self.condition_type}={self.status} ({self.reason})"


XID_79 = Fault(
    "Xid 79 (GPU has fallen off the bus)",
    "GPUProblem",
    "True",
    # The reason of the rule this line matches in deploy/node-problem-detector/gpu-monitor.json.
    "GPUFellOffBus",
    "NVRM: Xid (PCI:0000:53:00): 79, pid=2411, name=python3, GPU has fallen off the bus.",
)
XID_48 = Fault(
    "Xid 48 (double-bit ECC error)",
    "GPUProblem",
    "True",
    "GPUDoubleBitECCError",
    "NVRM: Xid (PCI:0000:a8:00): 48, pid=2411, name=python3, An uncorrectable double bit error (DBE) "
    "has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
)
#: A fault NodeHeal decides ``none``, as a detector really writes one: the node monitoring agent
#: rates Xid 63 (a row-remapping event) fatal and sets AcceleratedHardwareReady=False
#: (monitors/nvidia/dcgm/dcgm_policies.go, WellKnownXidCodes and handleXidFinding); NVIDIA calls it
#: informational and NodeHeal's default policy records it and does nothing.
XID_63 = Fault(
    "Xid 63 (row remapping event)",
    "AcceleratedHardwareReady",
    "False",
    "NvidiaXID63Error",
    "detected XID-63 on the instance, review kernel logs for additional information.",
)
#: Xid 13 as a condition. No shipped detector writes this: NodeHeal's NPD config makes Xid 13 a
#: temporary rule (a Node Event, GPUProblem untouched) and the node monitoring agent reports it as
#: a Warning Event (``NvidiaXID13Warning``). Only a custom permanent NPD rule would; the scenarios
#: use :data:`XID_63` for a fault decided ``none``.
XID_13 = Fault(
    "Xid 13 (application error)",
    "GPUProblem",
    "True",
    "GPUApplicationError",
    "NVRM: Xid (PCI:0000:53:00): 13, pid=2411, name=python3, Graphics SM Warp Exception on "
    "(GPC 1, TPC 0, SM 1): Out Of Range Address",
)
DCGM_ERROR = Fault(
    "DCGMError (the GPU monitor failed)",
    "AcceleratedHardwareReady",
    "False",
    "DCGMError",
    "DCGM could not connect to the host engine",
)

#: A network fault as NodeHeal's NPD plugin writes it: check_gateway.sh got no reply from the
#: node's default gateway, which answered earlier on this boot
#: (deploy/node-problem-detector/gateway-monitor.json; the message is the plugin's first line).
GATEWAY_UNREACHABLE = Fault(
    "default gateway unreachable",
    "GatewayUnreachable",
    "True",
    "GatewayNotAnswering",
    "gateway 10.0.0.1 unreachable: no reply to 3 pings, answered this boot",
)


# -- the cluster -----------------------------------------------------------------------------------


class SimulatedCluster:
    """The cluster's objects plus the controllers that keep it alive; see the module docstring."""

    def __init__(
        self,
        store: ClusterStore,
        aws: LocalAws,
        timeline: Timeline,
        *,
        cluster: str,
        layout: ClusterLayout,
        timings: ClusterTimings,
        region: str = "us-west-2",
        seed: int = 7,
    ) -> None:
        self.store = store
        self.aws = aws
        self.timeline = timeline
        self.cluster = cluster
        self.layout = layout
        self.timings = timings
        self.region = region
        self.clock = SimClock()
        rng = random.Random(seed)
        self._node_names = PrivateDnsNames(region, rng)
        self._suffixes = SuffixGenerator(rng)
        self._lock = threading.RLock()
        #: GPU node names in creation order (replacements appended).
        self.gpu_nodes: list[str] = []
        self.system_node = ""
        self.notebook_node = ""
        #: Faulted node -> the node Karpenter brought up in its place.
        self.replacements: dict[str, str] = {}
        self.karpenter = KarpenterStandIn(self)
        self.agent = NodeAgent(self)
        self.controllers = WorkloadControllers(self)

    # -- building ----------------------------------------------------------------------------------

    def node_name(self) -> str:
        """A fresh EC2-style private DNS name (deterministic per seed, never reused)."""
        return self._node_names()

    def suffix(self) -> str:
        """A generateName-style pod name suffix (deterministic per seed, never reused)."""
        return self._suffixes()

    def build(self) -> None:
        layout = self.layout
        self.system_node = self.add_node(
            pool="system", instance_type="m6i.2xlarge", zone=f"{self.region}a", gpus=0
        )
        instances = (
            self.aws.run_instances(
                layout.gpu_nodes,
                cluster=self.cluster,
                node_pool=layout.node_pool,
                instance_type=layout.instance_type,
                zone=layout.zone,
            )
            if layout.gpu_nodes
            else []
        )
        for instance_id in instances:
            self.gpu_nodes.append(
                self.add_node(instance_id=instance_id, joined_seconds_ago=layout.node_age_seconds)
            )
        self.store.add(
            *[
                make_pod(
                    f"coredns-787cb67946-{self.suffix()}",
                    "kube-system",
                    self.system_node,
                    owner_kind="ReplicaSet",
                    owner_name="coredns-787cb67946",
                    labels={"k8s-app": "kube-dns"},
                )
                for _ in range(2)
            ],
            make_pod(
                f"karpenter-5d9b8f8c7b-{self.suffix()}",
                "kube-system",
                self.system_node,
                owner_kind="ReplicaSet",
                owner_name="karpenter-5d9b8f8c7b",
                labels={"app.kubernetes.io/name": "karpenter"},
            ),
            make_pod(
                f"nodeheal-exporter-6c8d5b9f4-{self.suffix()}",
                "nodeheal",
                self.system_node,
                owner_kind="ReplicaSet",
                owner_name="nodeheal-exporter-6c8d5b9f4",
                labels={"app.kubernetes.io/name": "nodeheal-exporter"},
            ),
        )
        workers = layout.workers
        for index in range(workers):
            self.store.add(self._training_pod(index, self.gpu_nodes[index % len(self.gpu_nodes)]))
        self.store.set_scale(TRAINING_NAMESPACE, "Job", TRAINING_JOB, workers)
        # One worker may be disrupted at a time: the job checkpoints and restarts the lost rank.
        self.store.add(
            make_pdb(TRAINING_JOB, TRAINING_NAMESPACE, {"job-name": TRAINING_JOB}, max_unavailable=1)
        )
        if layout.notebook_gpus:
            self.notebook_node = self.gpu_nodes[-1]
            self.store.add(self._notebook_pod(self.notebook_node))

    def record_replacement(self, faulted: str, replacement: str, *, pool: str) -> None:
        """Karpenter brought ``replacement`` up in the place of ``faulted``."""
        with self._lock:
            self.replacements[faulted] = replacement
            if pool == self.layout.node_pool:
                self.gpu_nodes.append(replacement)

    def add_node(
        self,
        *,
        pool: str | None = None,
        instance_type: str | None = None,
        zone: str | None = None,
        gpus: int | None = None,
        instance_id: str | None = None,
        joined_seconds_ago: int = 0,
    ) -> str:
        """An EC2 instance tagged as Karpenter tags it, its Node, and the node's DaemonSet pods;
        ``joined_seconds_ago`` dates the Node's creationTimestamp back that far."""
        pool = pool or self.layout.node_pool
        instance_type = instance_type or self.layout.instance_type
        zone = zone or self.layout.zone
        gpus = self.layout.gpus_per_node if gpus is None else gpus
        instance_id = instance_id or self.aws.run_instance(
            cluster=self.cluster, node_pool=pool, instance_type=instance_type, zone=zone
        )
        name = self.node_name()
        node = make_node(
            name,
            instance_id=instance_id,
            zone=zone,
            instance_type=instance_type,
            node_pool=pool,
            gpus=gpus,
            cluster=self.cluster,
            extra_labels={"nvidia.com/gpu.present": "true" if gpus else "false"},
            # The EKS node monitoring agent reports this on accelerated nodes from the start.
            extra_conditions=[
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "True",
                    "reason": "NvidiaAcceleratedHardwareIsReady",
                    "message": "NVIDIA accelerated hardware is ready",
                }
            ]
            if gpus
            else None,
        )
        if joined_seconds_ago:
            node["metadata"]["creationTimestamp"] = rfc3339(
                datetime.now(UTC) - timedelta(seconds=joined_seconds_ago)
            )
        self.store.add(node)
        # Karpenter's record of the instance, bound to it by providerID as Karpenter binds it once
        # the node registered (what replace.method delete-nodeclaim deletes).
        node = self.store.get("nodes", name)
        self.store.add(
            make_nodeclaim(
                f"{pool}-{self.suffix()}",
                provider_id=node["spec"]["providerID"],
                node_name=name,
                node_pool=pool,
                instance_type=instance_type,
            )
        )
        self.timeline.note_instance(name, instance_id)
        self.controllers.add_daemon_pods(name, gpu=bool(gpus))
        return name

    def _training_pod(self, index: int, node: str | None) -> JSON:
        return make_pod(
            f"{TRAINING_JOB}-{index}-{self.suffix()}",
            TRAINING_NAMESPACE,
            node,
            owner_kind="Job",
            owner_name=TRAINING_JOB,
            labels={
                "job-name": TRAINING_JOB,
                "batch.kubernetes.io/job-name": TRAINING_JOB,
                "batch.kubernetes.io/job-completion-index": str(index),
            },
            annotations={"batch.kubernetes.io/job-completion-index": str(index)},
            gpus=self.layout.gpus_per_node,
            phase="Running" if node else "Pending",
        )

    def _notebook_pod(self, node: str | None) -> JSON:
        return make_pod(
            f"{NOTEBOOK_SET}-0",
            NOTEBOOK_NAMESPACE,
            node,
            owner_kind="StatefulSet",
            owner_name=NOTEBOOK_SET,
            labels={"app": NOTEBOOK_SET, "statefulset.kubernetes.io/pod-name": f"{NOTEBOOK_SET}-0"},
            # Someone's interactive session: Karpenter's consolidation must not take it away.
            annotations={DO_NOT_DISRUPT: "true"},
            gpus=self.layout.notebook_gpus,
            phase="Running" if node else "Pending",
        )

    def start(self) -> None:
        self.aws.on_instances_terminated.append(self.karpenter.instances_terminated)
        self.aws.on_instances_rebooted.append(self.agent.instances_rebooted)
        self.store.on("nodeclaim_deleting", self.karpenter.nodeclaim_deleting)
        self.store.on("pod_deleted", self.controllers.pod_deleted)
        self.store.on("node_deleted", self.controllers.node_deleted)
        self.clock.every(0.05, self.controllers.schedule_pending)
        self.clock.start()

    def stop(self) -> None:
        self.controllers.stopping = True
        self.clock.stop()
        for hooks, callback in (
            (self.aws.on_instances_terminated, self.karpenter.instances_terminated),
            (self.aws.on_instances_rebooted, self.agent.instances_rebooted),
        ):
            with contextlib.suppress(ValueError):
                hooks.remove(callback)

    # -- what detectors and people do --------------------------------------------------------------

    def inject(self, node: str, fault: Fault) -> None:
        """Write the condition as its detector does (``ClusterStore.report_node_condition``):
        node-problem-detector for GPUProblem, the node monitoring agent for AcceleratedHardwareReady."""
        # On the timeline first: the exporter may see the write before this thread runs again.
        self.timeline.emit("fault", "fault", fault.describe(node), node=node)
        self.store.report_node_condition(
            node, fault.condition_type, fault.status, fault.reason, fault.message
        )

    def inject_many(self, nodes: Sequence[str], fault: Fault) -> None:
        """:meth:`inject` on many distinct nodes at once, as a fleet-wide event would set them.

        Each node gets its own write and watch event (a real condition transition the exporter
        sees), but all are made under one hold of the store's lock, so a thousand faults land
        within milliseconds instead of queueing behind every other writer and reader one by one.
        """
        if len(set(nodes)) != len(nodes):
            raise ValueError("inject_many faults distinct nodes; inject twice to flap one node")
        for node in nodes:
            self.timeline.emit("fault", "fault", fault.describe(node), node=node)
        self.store.report_node_conditions(
            nodes, fault.condition_type, fault.status, fault.reason, fault.message
        )

    def kill_kubelet(self, node: str) -> None:
        """The node's kubelet dies with its GPU (the kernel hung on the fallen-off device): pods
        deleted or evicted from now on stay Terminating, as nothing stops their containers and
        sends the final delete, until the node reboots or is replaced (a delete with grace 0
        still removes them). The drain's slowest real case. Ready is left alone, as for a
        reboot: when the node controller notices depends on its grace period, not on NodeHeal."""
        self.store.set_kubelet_alive(node, False)
        self.timeline.emit(
            "node",
            "kubelet-dead",
            f"the kubelet of {short_node(node)} died: its pods can no longer finish terminating",
            node=node,
        )

    def clear(self, node: str, condition_type: str) -> None:
        """The detector reports the condition healthy again. NPD's log monitor and the node
        monitoring agent do that only when they start again (their pod restarts): the start-up
        state, with a new transition time."""
        status = "True" if is_positive_condition(condition_type) else "False"
        reason, message = HEALTHY_CONDITIONS.get(condition_type, (f"{condition_type}Healthy", "healthy"))
        self.store.report_node_condition(node, condition_type, status, reason, message)
        self.timeline.emit(
            "fault", "fault-cleared", f"{condition_type} healthy again on {short_node(node)}", node=node
        )

    def block_drains(self) -> None:
        """Make the training PDB refuse every eviction (all workers must stay up)."""

        def change(pdb: JSON) -> None:
            pdb["spec"].pop("maxUnavailable", None)
            pdb["spec"]["minAvailable"] = self.layout.workers

        self.store.mutate("poddisruptionbudgets", TRAINING_JOB, change, TRAINING_NAMESPACE)

    # -- reading -----------------------------------------------------------------------------------

    def node(self, name: str) -> JSON | None:
        try:
            return self.store.get("nodes", name)
        except ApiError:
            return None

    def nodes(self) -> list[JSON]:
        return self.store.list_objects("nodes")[0]

    def pods(self, namespace: str | None = None) -> list[JSON]:
        return self.store.list_objects("pods", namespace)[0]

    def pods_on(self, node: str) -> list[JSON]:
        return [p for p in self.pods() if p.get("spec", {}).get("nodeName") == node]

    def instance_of(self, node: str) -> str:
        obj = self.node(node)
        provider = (obj or {}).get("spec", {}).get("providerID", "")
        return instance_id_from_provider_id(provider) or ""

    def node_for_instance(self, instance_id: str) -> JSON | None:
        for node in self.nodes():
            if instance_id_from_provider_id(node.get("spec", {}).get("providerID", "")) == instance_id:
                return node
        return None

    def training_pods(self) -> list[JSON]:
        return [
            p
            for p in self.pods(TRAINING_NAMESPACE)
            if p["metadata"].get("labels", {}).get("job-name") == TRAINING_JOB
        ]

    def running_workers(self) -> int:
        return sum(1 for p in self.training_pods() if is_running(p))

    def workload_healthy(self) -> bool:
        """Every training worker (and the notebook) Running on a Ready node."""
        if self.running_workers() != self.layout.workers:
            return False
        if self.layout.notebook_gpus:
            notebooks = [p for p in self.pods(NOTEBOOK_NAMESPACE) if is_running(p)]
            return len(notebooks) == 1
        return True
