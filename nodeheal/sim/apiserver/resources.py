"""The API resources the simulator serves, with the REST metadata the real server reports.

A resource is kept in one store (``RESOURCES``, by plural) and may be served by more than one API
group version (``SERVED``): ``events.k8s.io/v1`` events are a second view of the core/v1 Event
objects, as kube-apiserver serves both from the one ``/events`` etcd prefix with the same
registry (``eventstore.NewREST`` in
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/events/rest/storage_events.go).
"""

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
    # The Go struct of the kind in the schema table (codec decodes and writes objects with it).
    schema: str = ""
    # Registries with ReturnDeletedObject answer DELETE with the object instead of a Status.
    returns_deleted_object: bool = False
    # The registry strategy's AllowCreateOnUpdate: a PUT to a missing object creates it.
    allow_create_on_update: bool = False
    # AllowUnconditionalUpdate: a PUT without metadata.resourceVersion overwrites the current
    # object instead of being refused (422).
    allow_unconditional_update: bool = True
    # Served through a watch cache; kube-apiserver 1.33 disables it only for events
    # (``DefaultWatchCacheSizes`` in pkg/kubeapiserver/default_storage_factory_builder.go), whose
    # lists and watches go to etcd.
    watch_cached: bool = True
    # For a second view of another resource's objects: the resource that stores them. The view
    # converts them on the way in and out (:mod:`~nodeheal.sim.apiserver.views`).
    storage: ResourceType | None = None

    @property
    def stored(self) -> ResourceType:
        """The resource whose store holds these objects (itself, unless this is a view)."""
        return self.storage if self.storage is not None else self

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


NODES = ResourceType("nodes", "Node", "", "v1", namespaced=False, has_status=True, schema="core.Node")
PODS = ResourceType(
    "pods", "Pod", "", "v1", namespaced=True, has_status=True, schema="core.Pod", returns_deleted_object=True
)
# eventStrategy: AllowCreateOnUpdate true, AllowUnconditionalUpdate true
# (https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/event/strategy.go).
EVENTS = ResourceType(
    "events",
    "Event",
    "",
    "v1",
    namespaced=True,
    has_status=False,
    schema="core.Event",
    watch_cached=False,
    allow_create_on_update=True,
)
# The same objects through events.k8s.io/v1: the same registry and strategy, so the same storage,
# the same (absent) watch cache and the same update rules.
EVENTS_V1 = ResourceType(
    "events",
    "Event",
    "events.k8s.io",
    "v1",
    namespaced=True,
    has_status=False,
    schema="events.Event",
    watch_cached=False,
    allow_create_on_update=True,
    storage=EVENTS,
)
# leaseStrategy: AllowCreateOnUpdate true, AllowUnconditionalUpdate false
# (https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/coordination/lease/strategy.go).
LEASES = ResourceType(
    "leases",
    "Lease",
    "coordination.k8s.io",
    "v1",
    namespaced=True,
    has_status=False,
    schema="coordination.Lease",
    allow_create_on_update=True,
    allow_unconditional_update=False,
)
PDBS = ResourceType(
    "poddisruptionbudgets",
    "PodDisruptionBudget",
    "policy",
    "v1",
    namespaced=True,
    has_status=True,
    schema="policy.PodDisruptionBudget",
)

# Karpenter's NodeClaim: a cluster-scoped custom resource with a status subresource
# (https://github.com/kubernetes-sigs/karpenter/blob/v1.5.0/pkg/apis/crds/karpenter.sh_nodeclaims.yaml).
# Custom resources answer DELETE with the deleted object (``ReturnDeletedObject: true`` in
# https://github.com/kubernetes/apiextensions-apiserver/blob/v0.33.1/pkg/registry/customresource/etcd.go).
NODECLAIMS = ResourceType(
    "nodeclaims",
    "NodeClaim",
    "karpenter.sh",
    "v1",
    namespaced=False,
    has_status=True,
    schema="karpenter.NodeClaim",
    returns_deleted_object=True,
)

#: The stored resources, by plural.
RESOURCES: dict[str, ResourceType] = {r.plural: r for r in (NODES, PODS, EVENTS, LEASES, PDBS, NODECLAIMS)}
BY_KIND: dict[str, ResourceType] = {r.kind: r for r in RESOURCES.values()}
#: Every resource served, by (group, version, plural): the stored ones and the views.
SERVED: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in (*RESOURCES.values(), EVENTS_V1)
}
