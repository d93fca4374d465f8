"""Thread-safe in-memory cluster store behind the fake API server.

`ObjectStore` keeps objects, the global resourceVersion, the bounded watch history and graceful
pod deletion. This class adds what is specific to a cluster: PodDisruptionBudget status as the
disruption controller keeps it (live, or paused so it lags), the storage side of the eviction
subresource (whose order of checks lives in `eviction`), controller scales, and the helpers a
simulation uses to play the kubelet, the detectors (``nodeheal.sim.detectors``) and reboots.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from nodeheal.sim import detectors
from nodeheal.sim.apiserver import codec, messages
from nodeheal.sim.apiserver import pdb as pdbmath
from nodeheal.sim.apiserver.clock import Clock
from nodeheal.sim.apiserver.codec import copy_json
from nodeheal.sim.apiserver.eviction import EVICTIONS_RETRY, Backoff, EvictionRest, still_being_processed
from nodeheal.sim.apiserver.objects import new_uid, rfc3339
from nodeheal.sim.apiserver.objectstore import (
    COMPACTION_INTERVAL_SECONDS,
    CompactedError,
    ObjectStore,
    Page,
)
from nodeheal.sim.apiserver.podexec import ExecHandler, ExecResult, not_found_result
from nodeheal.sim.apiserver.resources import PDBS, PODS, ResourceType
from nodeheal.sim.apiserver.status import (
    ApiError,
    conflict,
    too_many_requests,
)
from nodeheal.sim.apiserver.watchcache import ResourceExpiredError, WatchEvent

JSON = dict[str, Any]
#: What a simulated container does when the kubelet runs it: given the pod as created, its exit
#: code and termination message (a test records what the container was asked to do).
ContainerRun = Callable[[JSON], tuple[int, str]]

__all__ = ["ClusterStore", "CompactedError", "ContainerRun", "Page", "ResourceExpiredError", "WatchEvent"]


def _set_pod_condition(pod: JSON, condition: JSON) -> None:
    """podutil.UpdatePodCondition: a new condition is appended; an existing one is replaced in
    place, keeping its transition time while its status is unchanged."""
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            if existing.get("status") == condition["status"]:
                condition = {**condition, "lastTransitionTime": existing.get("lastTransitionTime")}
            conditions[index] = condition
            return
    conditions.append(condition)


def _epoch(stamp: str) -> int:
    return int(datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())


def _condition_change(condition_type: str, write: detectors.Writer) -> Callable[[JSON], None]:
    """The change that replaces one node condition with what ``write`` makes of it (appended when
    the node has none)."""

    def change(node: JSON) -> None:
        conditions = node.setdefault("status", {}).setdefault("conditions", [])
        for index, cond in enumerate(conditions):
            if cond["type"] == condition_type:
                conditions[index] = write(cond)
                return
        conditions.append(write(None))

    return change


def _plain_setter(type: str, status: str, reason: str, message: str, now: str) -> Callable[[JSON], None]:
    return _condition_change(type, lambda cur: detectors.set_plainly(cur, type, status, reason, message, now))


def _detector_report(type: str, status: str, reason: str, message: str, now: str) -> Callable[[JSON], None]:
    return _condition_change(type, lambda cur: detectors.report(cur, type, status, reason, message, now))


class ClusterStore(ObjectStore):
    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        clock: Clock | None = None,
        compaction_interval: float = COMPACTION_INTERVAL_SECONDS,
        eviction_retry: Backoff = EVICTIONS_RETRY,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``eviction_retry`` and ``sleep`` are the eviction subresource's conflict retry and how it
        pauses (each pause multiplied by ``time_scale``), for tests that count or script them;
        ``clock`` and ``compaction_interval`` drive etcd's compaction and the watch caches."""
        super().__init__(time_scale=time_scale, clock=clock, compaction_interval=compaction_interval)
        self.eviction = EvictionRest(self, retry=eviction_retry, sleep=sleep)
        self._disruption_controller_running = True
        #: While the disruption controller is paused: the status it last wrote, by PDB uid.
        self._synced_budgets: dict[str, JSON] = {}
        #: status.disruptedPods, by PDB uid: pod name -> (pod uid, time written, monotonic expiry).
        self._disrupted: dict[str, dict[str, tuple[str, str, float]]] = {}
        #: The simulated container runtime (:meth:`run_pods`); None: created pods stay Pending.
        self._container_run: ContainerRun | None = None
        #: What ``pods/exec`` runs (:meth:`run_exec`); None: every executable is missing.
        self._exec_handler: ExecHandler | None = None

    # ---- PodDisruptionBudget status, as the disruption controller keeps it -----------------

    def _as_served(self, rtype: ResourceType, obj: JSON) -> JSON:
        out = copy_json(obj)
        if rtype is PDBS:
            out["status"] = self._budget_status(obj)
            # The status is computed on read here, so it is written as the server writes it here.
            out = codec.canonical(rtype.schema, out)
        return out

    def _live_disruptions(self, pdb: JSON) -> dict[str, tuple[str, str, float]]:
        """The disruptedPods entries the controller keeps (buildDisruptedPodMap): the pod is still
        there, is the pod the eviction read, has not started terminating, and the entry is younger
        than DeletionTimeout. The others are dropped for good."""
        entries = self._disrupted.get(pdb["metadata"]["uid"])
        if not entries:
            return {}
        now = time.monotonic()
        namespace = pdb["metadata"]["namespace"]
        for name, (uid, _, expires) in list(entries.items()):
            pod = self._objects["pods"].get((namespace, name))
            if (
                pod is None
                or pod["metadata"]["uid"] != uid
                or pod["metadata"].get("deletionTimestamp")
                or expires <= now
            ):
                del entries[name]
        return entries

    def _budget_status(self, pdb: JSON) -> JSON:
        uid = pdb["metadata"]["uid"]
        if not self._disruption_controller_running:
            return copy_json(self._synced_budgets.get(uid) or pdbmath.unsynced_status())
        disruptions = self._live_disruptions(pdb)
        status = pdbmath.compute_status(
            pdb, self._objects["pods"].values(), self._scales, {u for u, _, _ in disruptions.values()}
        )
        presented = pdbmath.with_status(
            copy_json(pdb), status, rfc3339(), {name: at for name, (_, at, _) in disruptions.items()}
        )
        return dict(presented["status"])

    def pause_disruption_controller(self) -> None:
        """The disruption controller stops syncing: every PDB keeps the status it has now, a PDB
        created meanwhile has none yet (observedGeneration 0), and a spec change leaves
        status.observedGeneration behind metadata.generation. Evictions still decrement what is
        served, as the eviction subresource writes status itself."""
        with self._lock:
            if not self._disruption_controller_running:
                return
            self._synced_budgets = {
                pdb["metadata"]["uid"]: self._budget_status(pdb)
                for pdb in self._objects["poddisruptionbudgets"].values()
            }
            self._disruption_controller_running = False

    def resume_disruption_controller(self) -> None:
        """The controller syncs every PDB again, from the pods and the evictions' disruptedPods."""
        with self._lock:
            self._disruption_controller_running = True
            self._synced_budgets = {}
            self.changed.notify_all()

    # ---- eviction ----------------------------------------------------------------------------

    def evict(self, namespace: str, name: str, eviction: JSON) -> JSON:
        """POST pods/{name}/eviction; see :mod:`nodeheal.sim.apiserver.eviction`."""
        return self.eviction.create(namespace, name, eviction)

    def budgets_for(self, pod: JSON) -> list[JSON]:
        """The PDBs covering the pod, as served (eviction.go getPodDisruptionBudgets)."""
        with self._lock:
            return [
                self._present(PDBS, pdb)
                for _, pdb in sorted(self._objects["poddisruptionbudgets"].items())
                if pdbmath.selects(pdb, pod)
            ]

    def check_and_decrement(self, budget: JSON, pod: JSON, *, dry_run: bool) -> None:
        """eviction.go checkAndDecrement against the budget's current status: 429 while the
        controller has not observed its generation (retry-after 10 s) or when it allows no
        disruption; otherwise one disruption is used up and, unless a dry run, the pod is written
        into status.disruptedPods, which keeps it out of the healthy count until it terminates
        (or DeletionTimeout passes). The status write cannot conflict: it is made under the lock."""
        with self._lock:
            meta = budget["metadata"]
            stored = self._stored(PDBS, meta["name"], meta["namespace"])
            status = self._budget_status(stored)
            if int(status.get("observedGeneration", 0)) < int(stored["metadata"].get("generation", 1)):
                raise still_being_processed(meta["name"])
            allowed = int(status.get("disruptionsAllowed", 0))
            if allowed == 0:
                raise too_many_requests(
                    messages.EVICTION_BUDGET_VIOLATION,
                    [
                        {
                            "reason": messages.DISRUPTION_BUDGET_CAUSE,
                            "message": messages.EVICTION_BUDGET_NEEDS.format(
                                name=meta["name"],
                                desired=status.get("desiredHealthy", 0),
                                current=status.get("currentHealthy", 0),
                            ),
                        }
                    ],
                )
            if dry_run:
                return
            at = rfc3339()
            expires = time.monotonic() + pdbmath.DELETION_TIMEOUT_SECONDS * self.time_scale
            pdb_uid = stored["metadata"]["uid"]
            self._disrupted.setdefault(pdb_uid, {})[pod["metadata"]["name"]] = (
                pod["metadata"]["uid"],
                at,
                expires,
            )
            if not self._disruption_controller_running:
                synced = self._synced_budgets.setdefault(pdb_uid, status)
                synced["disruptionsAllowed"] = allowed - 1
                synced.setdefault("disruptedPods", {})[pod["metadata"]["name"]] = at
                if allowed - 1 == 0:
                    pdbmath.update_allowed_condition(synced)

    def mark_disruption_target(self, namespace: str, name: str, preconditions: JSON) -> str:
        """addConditionAndDeletePod's status update: the preconditions are checked against the
        latest pod (getLatestPod, a Conflict on "Pod"), then podutil.UpdatePodCondition adds
        DisruptionTarget (a no-op, with no new resourceVersion, when it is already there).
        Returns the pod's resourceVersion after the write."""
        try:
            with self._lock:
                old = self._stored(PODS, name, namespace)
                meta = old["metadata"]
                uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
                if uid and uid != meta["uid"]:
                    why = messages.PRECONDITION_UID_MISMATCH.format(precondition=uid, record=meta["uid"])
                    raise conflict(PODS.kind, PODS.group, name, why)
                if version and version != meta["resourceVersion"]:
                    why = messages.PRECONDITION_RESOURCE_VERSION_MISMATCH.format(
                        precondition=version, record=meta["resourceVersion"]
                    )
                    raise conflict(PODS.kind, PODS.group, name, why)
                new = copy_json(old)
                _set_pod_condition(
                    new,
                    {
                        "type": messages.DISRUPTION_TARGET,
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": rfc3339(),
                        "reason": messages.DISRUPTION_TARGET_REASON,
                        "message": messages.DISRUPTION_TARGET_MESSAGE,
                    },
                )
                result = self._commit_update(PODS, self._key(PODS, namespace, name), old, new)
                return str(result["metadata"]["resourceVersion"])
        finally:
            self._run_hooks()

    def evicted(self, pod: JSON) -> None:
        """Report an eviction the subresource carried out to the ``pod_evicted`` hooks."""
        with self._lock:
            self._fire("pod_evicted", pod)
        self._run_hooks()

    def set_scale(self, namespace: str, kind: str, name: str, replicas: int) -> None:
        """Declare a controller's desired replicas, the denominator of percentage/maxUnavailable PDBs."""
        with self._lock:
            self._scales[(namespace, kind, name)] = replicas

    # ---- simulation helpers ------------------------------------------------------------------

    def set_node_condition(
        self, name: str, type: str, status: str, reason: str = "", message: str = ""
    ) -> JSON:
        """Set a node condition with a plain setter (``detectors.set_plainly``): the transition time
        moves only when the status changes, reason and message are replaced, the heartbeat always
        moves. That is how the kubelet writes its own conditions, and what a test uses to place a
        condition exactly; NPD and the node monitoring agent write otherwise
        (:meth:`report_node_condition`)."""
        return self.mutate("nodes", name, _plain_setter(type, status, reason, message, rfc3339()))

    def set_node_conditions(
        self, names: Sequence[str], type: str, status: str, reason: str = "", message: str = ""
    ) -> list[int]:
        """:meth:`set_node_condition` on many nodes at once: one write (and watch event) per node,
        all under one hold of the store's lock. Returns each write's resourceVersion."""
        setter = _plain_setter(type, status, reason, message, rfc3339())
        return self.mutate_many("nodes", [(name, setter) for name in names])

    def report_node_condition(
        self, name: str, type: str, status: str, reason: str = "", message: str = ""
    ) -> JSON:
        """Write a node condition as the detector that owns ``type`` does (``detectors.report``):
        NPD's log monitor for GPUProblem, KernelDeadlock and ReadonlyFilesystem (a new reason moves
        the transition time and replaces the message, the same reason keeps the old message; False
        is its start-up), NPD's custom plugin for GPUUnavailable, the node monitoring agent for
        AcceleratedHardwareReady and its other ``*Ready`` conditions (the transition time kept
        while the status stays False, the newest reason, the messages joined with "; "; True is
        its start-up), and a plain setter for the kubelet's conditions."""
        return self.mutate("nodes", name, _detector_report(type, status, reason, message, rfc3339()))

    def report_node_conditions(
        self, names: Sequence[str], type: str, status: str, reason: str = "", message: str = ""
    ) -> list[int]:
        """:meth:`report_node_condition` on many nodes at once: one write (and watch event) per node,
        all under one hold of the store's lock. Returns each write's resourceVersion."""
        change = _detector_report(type, status, reason, message, rfc3339())
        return self.mutate_many("nodes", [(name, change) for name in names])

    def heartbeat(self, name: str) -> JSON:
        """A kubelet status heartbeat: only lastHeartbeatTime (and the resourceVersion) moves.

        lastHeartbeatTime is a metav1.Time, kept to the second; a kubelet's heartbeats are
        seconds apart (nodeStatusUpdateFrequency, 10 s by default), so each one here is stamped
        at least a second after the last, or it would write nothing."""

        def change(node: JSON) -> None:
            conditions = node.get("status", {}).get("conditions", [])
            latest = max(
                (_epoch(c["lastHeartbeatTime"]) for c in conditions if c.get("lastHeartbeatTime")),
                default=0,
            )
            stamp = rfc3339(datetime.fromtimestamp(max(int(time.time()), latest + 1), UTC))
            for cond in conditions:
                cond["lastHeartbeatTime"] = stamp

        return self.mutate("nodes", name, change)

    def reboot_node(self, name: str) -> JSON:
        """The node came back from a reboot: a new bootID, as the kubelet reports it."""

        def change(node: JSON) -> None:
            node["status"]["nodeInfo"]["bootID"] = new_uid()

        return self.mutate("nodes", name, change)

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> JSON:
        value = "True" if ready else "False"
        now = rfc3339()

        def change(pod: JSON) -> None:
            for cond in pod.get("status", {}).get("conditions", []):
                if cond["type"] in ("Ready", "ContainersReady") and cond["status"] != value:
                    cond["status"], cond["lastTransitionTime"] = value, now
            for cs in pod.get("status", {}).get("containerStatuses", []):
                cs["ready"] = ready

        return self.mutate("pods", name, change, namespace)

    # ---- the kubelet running pods ------------------------------------------------------------

    def run_pods(self, run: ContainerRun) -> None:
        """From now on, play the kubelet for every pod created bound to a node (``spec.nodeName``
        set at creation, so no scheduler is involved, as for a DaemonSet's or ``kubectl debug
        node``'s pods): when that node's kubelet is alive it writes the pod ``Running`` with its
        first container started, calls ``run`` (the container's work), then writes the container
        terminated with the exit code and the pod ``Succeeded`` (0) or ``Failed``, as the kubelet's
        status manager reports a ``restartPolicy: Never`` pod. A pod whose policy restarts it stays
        ``Running``; a pod deleted meanwhile is left alone; a dead kubelet never starts anything."""
        with self._lock:
            self._container_run = run

    def run_exec(self, handler: ExecHandler) -> None:
        """From now on, ``pods/exec`` runs its command through ``handler`` (pod, container, argv)."""
        with self._lock:
            self._exec_handler = handler

    def exec_in(self, pod: JSON, container: str, argv: list[str]) -> ExecResult:
        handler = self._exec_handler
        if handler is None:
            return not_found_result(argv)
        return handler(copy_json(pod), container, list(argv))

    def create(
        self, resource: str | ResourceType, obj: JSON, namespace: str | None = None, *, dry_run: bool = False
    ) -> JSON:
        created = super().create(resource, obj, namespace, dry_run=dry_run)
        run = self._container_run
        if (
            run is not None
            and not dry_run
            and self._rtype(resource).stored is PODS
            and created.get("spec", {}).get("nodeName")
        ):
            meta = created["metadata"]
            threading.Thread(
                target=self._kubelet_runs,
                args=(run, meta["namespace"], meta["name"], meta["uid"]),
                name=f"sim-kubelet-{meta['name']}",
                daemon=True,
            ).start()
        return created

    def _kubelet_runs(self, run: ContainerRun, namespace: str, name: str, uid: str) -> None:
        try:
            pod = self.get("pods", name, namespace)
            if pod["metadata"]["uid"] != uid or not self.kubelet_alive(pod["spec"]["nodeName"]):
                return
        except ApiError:
            return
        container = pod["spec"]["containers"][0]
        started = rfc3339()
        if not self._pod_status(namespace, name, uid, _running(container, started)):
            return
        code, message = run(copy_json(pod))
        if pod["spec"].get("restartPolicy", "Always") == "Always":
            return
        self._pod_status(namespace, name, uid, _terminated(container, started, code, message))

    def _pod_status(self, namespace: str, name: str, uid: str, change: Callable[[JSON], None]) -> bool:
        """Write a status change to the pod ``uid`` unless it is gone or terminating; whether written."""

        def guarded(pod: JSON) -> None:
            if pod["metadata"]["uid"] == uid and not pod["metadata"].get("deletionTimestamp"):
                change(pod)

        try:
            written = self.mutate("pods", name, guarded, namespace)
        except ApiError:
            return False
        return bool(written["metadata"]["uid"] == uid and not written["metadata"].get("deletionTimestamp"))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.changed.notify_all()


def _running(container: JSON, started: str) -> Callable[[JSON], None]:
    def change(pod: JSON) -> None:
        status = pod.setdefault("status", {})
        status.update(phase="Running", startTime=started)
        status["containerStatuses"] = [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": started}},
            }
        ]
        for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled"):
            _set_pod_condition(pod, {"type": kind, "status": "True", "lastTransitionTime": started})

    return change


def _terminated(container: JSON, started: str, code: int, message: str) -> Callable[[JSON], None]:
    def change(pod: JSON) -> None:
        finished = rfc3339()
        status = pod.setdefault("status", {})
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        terminated: JSON = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": finished,
        }
        if message:
            terminated["message"] = message
        status["containerStatuses"] = [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"terminated": terminated},
            }
        ]
        for kind in ("Ready", "ContainersReady"):
            _set_pod_condition(
                pod,
                {"type": kind, "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished},
            )

    return change
