"""Local simulation: a fake Kubernetes API server over an in-memory cluster store."""

from __future__ import annotations

from nodeheal.sim.apiserver import FakeKubeApiServer
from nodeheal.sim.faults import FaultInjector
from nodeheal.sim.objects import make_event, make_lease, make_node, make_pdb, make_pod
from nodeheal.sim.store import ClusterStore, WatchEvent

__all__ = [
    "ClusterStore",
    "FakeKubeApiServer",
    "FaultInjector",
    "WatchEvent",
    "make_event",
    "make_lease",
    "make_node",
    "make_pdb",
    "make_pod",
]
