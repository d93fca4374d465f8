"""The controllers of the simulated cluster that NodeHeal relies on but does not own: Karpenter,
the kubelet after a reboot, and the workload controllers with the scheduler (see simulated_cluster.py)."""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from nodeheal.conditions import is_bad_status, is_positive_condition
from nodeheal.events import instance_id_from_provider_id
from nodeheal.sim.apiserver.objects import make_pod
from nodeheal.sim.apiserver.pdb import controller_of
from nodeheal.sim.apiserver.status import ApiError
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.cluster.layout import ClusterLayout, ClusterTimings, SimClock
from nodeheal.sim.cluster.workload import (
    GPU,
    HEALTHY_CONDITIONS,
    JSON,
    TRAINING_JOB,
    gpus_requested,
    is_ready,
    is_running,
)
from nodeheal.sim.local_aws import LocalAws
from nodeheal.sim.timeline import Timeline, short_node


class ControlledCluster(Protocol):
    """What the controllers need of the cluster that starts them
    (:class:`nodeheal.sim.cluster.simulated_cluster.SimulatedCluster`, which cannot be imported here)."""

    store: ClusterStore
    aws: LocalAws
    timeline: Timeline
    clock: SimClock
    layout: ClusterLayout
    timings: ClusterTimings
    #: The cluster's name.
    cluster: str

    def suffix(self) -> str: ...
    def node(self, name: str) -> JSON | None: ...
    def nodes(self) -> list[JSON]: ...
    def pods(self, namespace: str | None = None) -> list[JSON]: ...
    def pods_on(self, node: str) -> list[JSON]: ...
    def node_for_instance(self, instance_id: str) -> JSON | None: ...
    def running_workers(self) -> int: ...
    def add_node(
        self,
        *,
        pool: str | None = None,
        instance_type: str | None = None,
        zone: str | None = None,
        gpus: int | None = None,
        instance_id: str | None = None,
    ) -> str: ...
    def record_replacement(self, faulted: str, replacement: str, *, pool: str) -> None: ...


# -- Karpenter -------------------------------------------------------------------------------------


class KarpenterStandIn:
    """Replaces terminated instances: deletes the Node, launches a new instance, registers it."""

    def __init__(self, cluster: ControlledCluster) -> None:
        self._cluster = cluster
        self._lock = threading.Lock()
        self._handled: set[str] = set()
        self._paused = False
        self._backlog: list[tuple[str, JSON]] = []

    def instances_terminated(self, instance_ids: list[str]) -> None:
        """moto's TerminateInstances hook (runs in the caller's thread: only schedules work)."""
        for instance_id in instance_ids:
            node = self._cluster.node_for_instance(instance_id)
            with self._lock:
                if node is None or instance_id in self._handled:
                    continue
                self._handled.add(instance_id)
                if self._paused:
                    self._backlog.append((instance_id, node))
                    continue
            self._replace(instance_id, node)

    def nodeclaim_deleting(self, claim: JSON) -> None:
        """The store's hook when a NodeClaim is marked for deletion (replace.method
        delete-nodeclaim): Karpenter's termination finalizer terminates its instance, and the
        termination then goes on as any other (Node and NodeClaim removed, a replacement launched).
        Karpenter's second drain finds nothing left after NodeHeal's, so it is not modelled."""
        provider_id = str((claim.get("status") or {}).get("providerID", ""))
        instance_id = instance_id_from_provider_id(provider_id)
        name = str(claim["metadata"]["name"])
        cluster = self._cluster
        if not instance_id:
            cluster.clock.after(0.0, lambda: self._remove_nodeclaim(name))
            return
        cluster.timeline.emit(
            "karpenter",
            "nodeclaim-deleting",
            f"NodeClaim {name} deleted: terminating its instance {instance_id}",
            node=str((claim.get("status") or {}).get("nodeName", "")),
            instance=instance_id,
        )
        # Not from the API server's request thread that fired the hook: from the clock's.
        cluster.clock.after(
            0.0, lambda: cluster.aws.client("ec2").terminate_instances(InstanceIds=[instance_id])
        )

    def _remove_nodeclaim(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            self._cluster.store.remove("nodeclaims", name)

    def _nodeclaims_of(self, instance_id: str) -> list[str]:
        claims, _ = self._cluster.store.list_objects("nodeclaims")
        return [
            str(claim["metadata"]["name"])
            for claim in claims
            if instance_id_from_provider_id(str((claim.get("status") or {}).get("providerID", "")))
            == instance_id
        ]

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Karpenter has not noticed yet: terminations queue up and are handled on exit."""
        with self._lock:
            self._paused = True
        try:
            yield
        finally:
            with self._lock:
                self._paused = False
                backlog, self._backlog = self._backlog, []
            for instance_id, node in backlog:
                self._replace(instance_id, node)

    def _replace(self, instance_id: str, node: JSON) -> None:
        cluster = self._cluster
        timings = cluster.timings
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels", {})
        pool = labels.get("karpenter.sh/nodepool", cluster.layout.node_pool)
        instance_type = labels.get("node.kubernetes.io/instance-type", cluster.layout.instance_type)
        zone = labels.get("topology.kubernetes.io/zone", cluster.layout.zone)
        gpus = int(node.get("status", {}).get("capacity", {}).get(GPU, 0))
        uid = node["metadata"]["uid"]

        def remove_node() -> None:
            current = cluster.node(name)
            if current is None or current["metadata"]["uid"] != uid:
                return
            cluster.store.remove("nodes", name)
            # The instance is gone, so Karpenter lets its NodeClaim go too (the termination
            # finalizer's last step, or garbage collection after a terminate from outside).
            for claim in self._nodeclaims_of(instance_id):
                self._remove_nodeclaim(claim)
            cluster.timeline.emit(
                "karpenter",
                "node-deleted",
                f"Node {short_node(name)} deleted: its instance {instance_id} is terminated",
                node=name,
                instance=instance_id,
            )

        def launch() -> None:
            new_instance = cluster.aws.run_instance(
                cluster=cluster.cluster, node_pool=pool, instance_type=instance_type, zone=zone
            )
            # About the new instance, which has no Node yet; the text names the node it replaces.
            cluster.timeline.emit(
                "karpenter",
                "instance-launched",
                f"launched {new_instance} ({instance_type}, {zone}) for the pods evicted from "
                f"{short_node(name)}",
                instance=new_instance,
            )
            cluster.clock.after(timings.node_ready_seconds, lambda: register(new_instance))

        def register(new_instance: str) -> None:
            new_name = cluster.add_node(
                pool=pool, instance_type=instance_type, zone=zone, gpus=gpus, instance_id=new_instance
            )
            cluster.record_replacement(name, new_name, pool=pool)
            cluster.timeline.emit(
                "karpenter",
                "node-ready",
                f"replacement Node {short_node(new_name)} Ready ({new_instance}, {gpus} GPUs) "
                f"for {short_node(name)}",
                node=new_name,
                instance=new_instance,
            )

        cluster.clock.after(timings.node_removal_seconds, remove_node)
        cluster.clock.after(timings.instance_launch_seconds, launch)


# -- the kubelet after an EC2 reboot ---------------------------------------------------------------


class NodeAgent:
    """An EC2 reboot brings the node back with a new boot ID and detectors that start clean."""

    def __init__(self, cluster: ControlledCluster) -> None:
        self._cluster = cluster

    def instances_rebooted(self, instance_ids: list[str]) -> None:
        for instance_id in instance_ids:
            node = self._cluster.node_for_instance(instance_id)
            if node is not None:
                name = node["metadata"]["name"]
                self._cluster.clock.after(
                    self._cluster.timings.reboot_seconds, functools.partial(self._back, name)
                )

    def _back(self, name: str) -> None:
        cluster = self._cluster
        if cluster.node(name) is None:
            return
        # Ready is not flipped: NodeHeal's recovery check keys on the new boot ID, and whether a real
        # reboot shows as NotReady depends on the node controller's grace period, not on NodeHeal.
        cluster.store.reboot_node(name)
        # A kubelet that had died starts again with the node and finishes the pods left terminating.
        revived = not cluster.store.kubelet_alive(name)
        if revived:
            cluster.store.set_kubelet_alive(name, True)
        node = cluster.node(name) or {}
        cleared = []
        for condition in node.get("status", {}).get("conditions", []):
            kind = condition["type"]
            if kind in HEALTHY_CONDITIONS and is_bad_status(kind, condition.get("status", "")):
                reason, message = HEALTHY_CONDITIONS[kind]
                cluster.store.set_node_condition(
                    name, kind, "True" if is_positive_condition(kind) else "False", reason, message
                )
                cleared.append(kind)
        what = f", {', '.join(cleared)} healthy" if cleared else ""
        if revived:
            what += ", the kubelet running again"
        cluster.timeline.emit(
            "node", "node-rebooted", f"{short_node(name)} back from the reboot: new boot ID{what}", node=name
        )


# -- controllers and the scheduler -----------------------------------------------------------------


def _waits_for_node(pod: JSON) -> bool:
    """Pending, unbound and not being deleted: the scheduler's work."""
    return (
        not pod["spec"].get("nodeName")
        and pod.get("status", {}).get("phase") == "Pending"
        and not pod["metadata"].get("deletionTimestamp")
    )


@dataclass
class _Disruption:
    """A workload lost a pod; reported when it is whole again."""

    workload: str
    pods: set[str] = field(default_factory=set)


class WorkloadControllers:
    """Job/StatefulSet/ReplicaSet controllers, DaemonSets, pod GC and the scheduler, minimally."""

    def __init__(self, cluster: ControlledCluster) -> None:
        self._cluster = cluster
        self.stopping = False
        self._disrupted: dict[str, _Disruption] = {}
        self._lock = threading.Lock()
        #: The store's resourceVersion the scheduler last looked at (0: never).
        self._scheduled_version = 0

    # Hooks run in whichever thread changed the store (an API request, the pod reaper).

    def pod_deleted(self, pod: JSON) -> None:
        if self.stopping:
            return
        owner = controller_of(pod) or {}
        kind = owner.get("kind")
        if kind not in ("Job", "StatefulSet", "ReplicaSet"):
            return  # DaemonSet pods follow their node; bare pods are gone for good
        cluster = self._cluster
        meta = pod["metadata"]
        labels = dict(meta.get("labels") or {})
        if kind == "Job":
            index = labels.get("batch.kubernetes.io/job-completion-index", "0")
            name = f"{owner['name']}-{index}-{cluster.suffix()}"
        elif kind == "StatefulSet":
            name = meta["name"]
        else:
            name = f"{owner['name']}-{cluster.suffix()}"
        replacement = make_pod(
            name,
            meta["namespace"],
            None,
            owner_kind=kind,
            owner_name=owner["name"],
            labels=labels,
            annotations=dict(meta.get("annotations") or {}),
            gpus=gpus_requested(pod),
            grace_seconds=int(pod["spec"].get("terminationGracePeriodSeconds", 30)),
            phase="Pending",
        )
        cluster.store.add(replacement)
        with self._lock:
            self._disrupted.setdefault(owner["name"], _Disruption(owner["name"])).pods.add(name)
        need = gpus_requested(pod)
        needs = f", needs {need} GPUs" if need else ""
        cluster.timeline.emit(
            "scheduler",
            "pod-pending",
            f"{meta['name']} gone from {short_node(pod['spec'].get('nodeName', '?'))}; "
            f"{kind} {owner['name']} recreated it as {name} (Pending{needs})",
            node=str(pod["spec"].get("nodeName", "")),
        )

    def node_deleted(self, node: JSON) -> None:
        """Pod garbage collection: pods bound to a Node that no longer exists are deleted."""
        if self.stopping:
            return
        name = node["metadata"]["name"]
        for pod in self._cluster.pods_on(name):
            with contextlib.suppress(ApiError):
                self._cluster.store.remove("pods", pod["metadata"]["name"], pod["metadata"]["namespace"])

    def add_daemon_pods(self, node: str, *, gpu: bool) -> None:
        cluster = self._cluster
        daemonsets = [("aws-node", "k8s-app"), ("kube-proxy", "k8s-app")]
        if gpu:
            daemonsets += [
                ("nvidia-device-plugin-daemonset", "name"),
                ("dcgm-exporter", "app.kubernetes.io/name"),
            ]
        cluster.store.add(
            *[
                make_pod(
                    f"{ds}-{cluster.suffix()}",
                    "kube-system",
                    node,
                    owner_kind="DaemonSet",
                    owner_name=ds,
                    labels={key: ds},
                )
                for ds, key in daemonsets
            ]
        )

    def schedule_pending(self) -> None:
        """Bind each Pending pod to a Ready, schedulable, untainted node with room (best fit).

        Runs on every clock tick, so the common case is cheap: no pod and no node changed since
        the last pass (the outcome depends on them alone; the Events and Leases a storm writes do
        not count), or no pod waits for a node (found without copying every pod of a thousand-node
        cluster twenty times a second).
        """
        if self.stopping:
            return
        cluster = self._cluster
        version = cluster.store.changed_at("pods", "nodes")
        if version == self._scheduled_version:
            return
        if not cluster.store.select("pods", _waits_for_node):
            self._scheduled_version = version
            return
        pods = cluster.pods()
        pending = [p for p in pods if _waits_for_node(p)]
        free: dict[str, int] = {}
        for node in cluster.nodes():
            spec = node.get("spec", {})
            if spec.get("unschedulable") or not is_ready(node) or node["metadata"].get("deletionTimestamp"):
                continue
            if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
                continue
            capacity = int(node.get("status", {}).get("allocatable", {}).get(GPU, 0))
            free[node["metadata"]["name"]] = capacity
        for pod in pods:
            node_name = pod["spec"].get("nodeName")
            if node_name in free and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                free[node_name] -= gpus_requested(pod)
        for pod in sorted(
            pending, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])
        ):
            need = gpus_requested(pod)
            fits = sorted((room, name) for name, room in free.items() if room >= need)
            if not fits:
                continue
            _, target = fits[0]
            free[target] -= need
            self._bind(pod, target)
        # Binding wrote to the store, so the next pass runs again; a pod that fit nowhere waits for
        # the next change (a node registering, a pod leaving).
        self._scheduled_version = version

    def _bind(self, pod: JSON, node: str) -> None:
        cluster = self._cluster
        meta = pod["metadata"]
        uid = meta["uid"]

        def status_for(phase: str) -> JSON:
            template = make_pod(meta["name"], meta["namespace"], node, gpus=gpus_requested(pod), phase=phase)
            return copy.deepcopy(template["status"])

        def bind(obj: JSON) -> None:
            obj["spec"]["nodeName"] = node
            obj["status"] = {
                **status_for("Pending"),
                "qosClass": obj.get("status", {}).get("qosClass", "Burstable"),
            }

        try:
            cluster.store.mutate("pods", meta["name"], bind, meta["namespace"])
        except ApiError:
            return
        cluster.timeline.emit(
            "scheduler", "pod-bound", f"{meta['name']} bound to {short_node(node)}", node=node
        )
        cluster.clock.after(
            cluster.timings.pod_start_seconds,
            lambda: self._started(meta["namespace"], meta["name"], uid, node),
        )

    def _started(self, namespace: str, name: str, uid: str, node: str) -> None:
        cluster = self._cluster
        try:
            current = cluster.store.get("pods", name, namespace)
        except ApiError:
            return
        if current["metadata"]["uid"] != uid or current["metadata"].get("deletionTimestamp"):
            return
        if not self._kubelet_alive(node):
            # No kubelet to start the containers: the pod waits, bound, until it is back.
            cluster.clock.after(
                cluster.timings.pod_start_seconds,
                lambda: self._started(namespace, name, uid, node),
            )
            return
        running = make_pod(name, namespace, node, gpus=gpus_requested(current), phase="Running")["status"]

        def start(obj: JSON) -> None:
            obj["status"] = {**running, "qosClass": obj.get("status", {}).get("qosClass", "Burstable")}

        cluster.store.mutate("pods", name, start, namespace)
        cluster.timeline.emit("scheduler", "pod-running", f"{name} Running on {short_node(node)}", node=node)
        self._report_whole()

    def _kubelet_alive(self, node: str) -> bool:
        try:
            return self._cluster.store.kubelet_alive(node)
        except ApiError:
            return True  # the Node is gone: pod garbage collection removes its pods

    def _report_whole(self) -> None:
        cluster = self._cluster
        with self._lock:
            disrupted = list(self._disrupted.values())
        for disruption in disrupted:
            if disruption.workload == TRAINING_JOB:
                running, wanted = cluster.running_workers(), cluster.layout.workers
            else:
                running = sum(
                    1
                    for p in cluster.pods()
                    if is_running(p) and (controller_of(p) or {}).get("name") == disruption.workload
                )
                wanted = len(disruption.pods)
            if running >= wanted:
                with self._lock:
                    self._disrupted.pop(disruption.workload, None)
                cluster.timeline.emit(
                    "scheduler",
                    "workload-running",
                    f"{disruption.workload} running again: {running}/{wanted} pods Running",
                )
