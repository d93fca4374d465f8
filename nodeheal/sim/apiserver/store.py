"""Thread-safe in-memory cluster store behind the fake API server.

`ObjectStore` keeps objects, the global resourceVersion, the bounded watch history and graceful
pod deletion. This class adds what is specific to a cluster: the eviction subresource checked
against live PodDisruptionBudgets, controller scales, and the helpers a simulation uses to play
kubelet, node-problem-detector and reboots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from nodeheal.sim.apiserver import pdb as pdbmath
from nodeheal.sim.apiserver.objects import new_uid, rfc3339
from nodeheal.sim.apiserver.objectstore import CompactedError, ObjectStore, Page, WatchEvent
from nodeheal.sim.apiserver.resources import PODS
from nodeheal.sim.apiserver.selectors import selector_from_label_selector
from nodeheal.sim.apiserver.status import (
    ApiError,
    bad_request,
    status_body,
    success_status,
    too_many_requests,
)
from nodeheal.sim.apiserver.watchcache import ResourceExpiredError

JSON = dict[str, Any]

__all__ = ["ClusterStore", "CompactedError", "Page", "ResourceExpiredError", "WatchEvent"]


def _condition_setter(type: str, status: str, reason: str, message: str, now: str) -> Callable[[JSON], None]:
    """The change a detector makes to one node condition (see ClusterStore.set_node_condition)."""

    def change(node: JSON) -> None:
        conditions = node.setdefault("status", {}).setdefault("conditions", [])
        for cond in conditions:
            if cond["type"] == type:
                if cond.get("status") != status:
                    cond["lastTransitionTime"] = now
                cond.update(
                    {"status": status, "reason": reason, "message": message, "lastHeartbeatTime": now}
                )
                return
        conditions.append(
            {
                "type": type,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )

    return change


class ClusterStore(ObjectStore):
    # ---- eviction ----------------------------------------------------------------------------

    def _budgets_for(self, pod: JSON) -> list[JSON]:
        ns = pod["metadata"]["namespace"]
        out = []
        for (pdb_ns, _), pdb in sorted(self._objects["poddisruptionbudgets"].items()):
            if pdb_ns != ns:
                continue
            selector = selector_from_label_selector((pdb.get("spec") or {}).get("selector"))
            # A PDB with an empty selector matches nothing for eviction purposes.
            if not selector.empty and selector.matches(pod["metadata"].get("labels")):
                out.append(pdb)
        return out

    def evict(self, namespace: str, name: str, eviction: JSON) -> JSON:
        """pods/eviction following pkg/registry/core/pod/storage/eviction.go."""
        meta = eviction.get("metadata") or {}
        if meta.get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        options = eviction.get("deleteOptions") or {}
        try:
            with self._lock:
                pod = self._stored(PODS, name, namespace)
                phase = (pod.get("status") or {}).get("phase")
                can_ignore = phase in ("Succeeded", "Failed", "Pending") or bool(
                    pod["metadata"].get("deletionTimestamp")
                )
                if not can_ignore:
                    budgets = self._budgets_for(pod)
                    if len(budgets) > 1:
                        body = status_body(
                            500,
                            "",
                            "This pod has more than one PodDisruptionBudget, which the eviction "
                            "subresource does not support.",
                        )
                        body.pop("reason")
                        body.pop("details")
                        raise ApiError(body)
                    if budgets:
                        self._check_budget(pod, budgets[0])
                self.delete("pods", name, namespace, options)
                if not options.get("dryRun"):
                    self._fire("pod_evicted", pod)
            return success_status(201)
        finally:
            self._run_hooks()

    def _check_budget(self, pod: JSON, budget: JSON) -> None:
        status = pdbmath.compute_status(budget, self._objects["pods"].values(), self._scales)
        if (
            not pdbmath.is_pod_ready(pod)
            and status.current_healthy >= status.desired_healthy
            and status.desired_healthy > 0
        ):
            return
        if status.disruptions_allowed == 0:
            raise too_many_requests(
                "Cannot evict pod as it would violate the pod's disruption budget.",
                [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {budget['metadata']['name']} needs "
                        f"{status.desired_healthy} healthy pods and has {status.current_healthy} currently",
                    }
                ],
            )

    def set_scale(self, namespace: str, kind: str, name: str, replicas: int) -> None:
        """Declare a controller's desired replicas, the denominator of percentage/maxUnavailable PDBs."""
        with self._lock:
            self._scales[(namespace, kind, name)] = replicas

    # ---- simulation helpers ------------------------------------------------------------------

    def set_node_condition(
        self, name: str, type: str, status: str, reason: str = "", message: str = ""
    ) -> JSON:
        """Set a node condition the way NPD and the kubelet do: the transition time moves only
        when the status changes; the heartbeat always moves."""
        return self.mutate("nodes", name, _condition_setter(type, status, reason, message, rfc3339()))

    def set_node_conditions(
        self, names: Sequence[str], type: str, status: str, reason: str = "", message: str = ""
    ) -> list[int]:
        """:meth:`set_node_condition` on many nodes at once: one write (and watch event) per node,
        all under one hold of the store's lock. Returns each write's resourceVersion."""
        setter = _condition_setter(type, status, reason, message, rfc3339())
        return self.mutate_many("nodes", [(name, setter) for name in names])

    def heartbeat(self, name: str) -> JSON:
        """A kubelet status heartbeat: only lastHeartbeatTime (and the resourceVersion) moves."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

        def change(node: JSON) -> None:
            for cond in node.get("status", {}).get("conditions", []):
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

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.changed.notify_all()
