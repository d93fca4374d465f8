"""The fake Kubernetes API server: real REST paths, status codes, watch streams and RBAC.

It is the half of `nodeheal.sim` that stands in for kube-apiserver and nothing else: an
in-memory store with etcd's resourceVersion semantics and compaction (`store`, `objectstore`),
the watch cache's window of events (`watchcache`), paged lists and their continue tokens
(`paging`), the decoder that keeps of a body what the Go structs of k8s.io/api keep and writes
objects back as Go does (`codec`, from the struct-tag table `schema`, with Go's time parsing in
`gotime` and `Warning` headers in `warning`), the resources served (`resources`) and the
conversions of a resource served under a second API version (`views`: events.k8s.io/v1 Events
are the core/v1 Events), the three patch types (`patch`), selectors,
validation (`validation`, `fielderrors`), PodDisruptionBudget arithmetic (`pdb`), the eviction
subresource (`eviction`), watch streams (`watch`), authentication and RBAC (`authorizer`),
injected request faults (`faults`), the HTTP front (`server`), the clock all of them read
(`clock`), and the server strings tests assert on (`messages`). Every behaviour is meant to be the real
server's; `docs/fake-apiserver.md` holds the conformance table with the source of each.
"""

from __future__ import annotations

from nodeheal.sim.apiserver.objects import (
    make_event,
    make_lease,
    make_node,
    make_nodeclaim,
    make_pdb,
    make_pod,
)
from nodeheal.sim.apiserver.request_faults import FaultInjector
from nodeheal.sim.apiserver.server import FakeKubeApiServer
from nodeheal.sim.apiserver.store import ClusterStore, WatchEvent

__all__ = [
    "ClusterStore",
    "FakeKubeApiServer",
    "FaultInjector",
    "WatchEvent",
    "make_event",
    "make_lease",
    "make_node",
    "make_nodeclaim",
    "make_pdb",
    "make_pod",
]
