"""The API resources the simulator serves, with the REST metadata the real server reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    has_status: bool
    # Registries with ReturnDeletedObject answer DELETE with the object instead of a Status.
    returns_deleted_object: bool = False
    # Served through a watch cache; kube-apiserver 1.33 disables it only for events
    # (``DefaultWatchCacheSizes`` in pkg/kubeapiserver/default_storage_factory_builder.go), whose
    # lists and watches go to etcd.
    watch_cached: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


NODES = ResourceType("nodes", "Node", "", "v1", namespaced=False, has_status=True)
PODS = ResourceType("pods", "Pod", "", "v1", namespaced=True, has_status=True, returns_deleted_object=True)
EVENTS = ResourceType("events", "Event", "", "v1", namespaced=True, has_status=False, watch_cached=False)
LEASES = ResourceType("leases", "Lease", "coordination.k8s.io", "v1", namespaced=True, has_status=False)
PDBS = ResourceType(
    "poddisruptionbudgets", "PodDisruptionBudget", "policy", "v1", namespaced=True, has_status=True
)

RESOURCES: dict[str, ResourceType] = {r.plural: r for r in (NODES, PODS, EVENTS, LEASES, PDBS)}
BY_KIND: dict[str, ResourceType] = {r.kind: r for r in RESOURCES.values()}
