"""In-memory fakes of the workflow ports, for step tests that need no server at all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeheal.config import RemediationSettings
from nodeheal.errors import LedgerContentionError
from nodeheal.kube.model import UNHEALTHY_TAINT_KEY, LiveNode, PodView, Taint
from nodeheal.sim.objects import make_node
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.ports import KubeAccess
from nodeheal.workflow.records import DroppedEvent, RemediationRecord
from nodeheal.workflow.state import WorkflowState

NOW = datetime(2026, 11, 21, 10, 5, tzinfo=UTC)
CLUSTER = "training-on-eks"
XID_79 = "NVRM: Xid (PCI:0000:53:00): 79, pid=2411, name=python3, GPU has fallen off the bus."


def live_node(name: str = "gpu-a", *, condition: dict[str, Any] | None = None, **kwargs: Any) -> LiveNode:
    extra = [condition] if condition else None
    raw = make_node(
        name, instance_id=kwargs.pop("instance_id", "i-0abc1234def567890"), extra_conditions=extra, **kwargs
    )
    return LiveNode.from_api(raw)


def gpu_problem(
    status: str = "True", message: str = XID_79, at: str = "2026-11-21T10:00:00Z"
) -> dict[str, Any]:
    return {
        "type": "GPUProblem",
        "status": status,
        "reason": "GPUHardwareError" if status == "True" else "GPUHealthy",
        "message": message,
        "lastTransitionTime": at,
        "lastHeartbeatTime": at,
    }


@dataclass
class FakeNodes:
    nodes: dict[str, LiveNode] = field(default_factory=dict)

    def get(self, name: str) -> LiveNode | None:
        return self.nodes.get(name)

    def list(self, label_selector: str | None = None) -> list[LiveNode]:
        if not label_selector:
            return list(self.nodes.values())
        key, value = label_selector.split("=", 1)
        return [n for n in self.nodes.values() if n.labels.get(key) == value]

    def cordon(
        self, name: str, *, execution: str, reason: str, now: datetime, expected_uid: str | None = None
    ) -> Any:
        node = self.nodes[name]
        self.nodes[name] = replace(
            node, unschedulable=True, taints=(*node.taints, Taint(UNHEALTHY_TAINT_KEY, "NoSchedule"))
        )
        return type("Cordoned", (), {"changed": True, "flipped_unschedulable": True})()

    def uncordon(self, name: str, *, expected_uid: str | None = None) -> bool:
        node = self.nodes[name]
        self.nodes[name] = replace(
            node, unschedulable=False, taints=tuple(t for t in node.taints if t.key != UNHEALTHY_TAINT_KEY)
        )
        return True

    def delete(self, name: str, uid: str) -> bool:
        return self.nodes.pop(name, None) is not None

    def taint(self, name: str) -> None:
        node = self.nodes[name]
        self.nodes[name] = replace(node, taints=(*node.taints, Taint(UNHEALTHY_TAINT_KEY, "NoSchedule")))


class NoPods:
    def list_on_node(self, node_name: str) -> list[PodView]:
        return []

    def evict(self, pods: Sequence[PodView], *, parallelism: int) -> Any:
        raise AssertionError("no eviction expected")

    def delete(self, pods: Sequence[PodView], *, grace_seconds: int, parallelism: int) -> Any:
        raise AssertionError("no deletion expected")


@dataclass
class Lock:
    acquired: bool
    holder: str


@dataclass
class FakeLedger:
    locks: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    states: dict[str, ClusterAdmissionState] = field(default_factory=dict)
    records: list[RemediationRecord] = field(default_factory=list)
    dropped: list[DroppedEvent] = field(default_factory=list)
    now: datetime = NOW
    contention_once: bool = False

    def acquire_lock(self, cluster: str, node: str, execution: str, ttl: timedelta) -> Lock:
        holder = self.locks.get(node)
        if holder and holder[0] != execution and holder[1] > self.now:
            return Lock(False, holder[0])
        self.locks[node] = (execution, self.now + ttl)
        return Lock(True, execution)

    def lock_holder(self, cluster: str, node: str) -> str | None:
        holder = self.locks.get(node)
        return holder[0] if holder and holder[1] > self.now else None

    def release_lock(self, cluster: str, node: str, execution: str) -> bool:
        if self.locks.get(node, ("",))[0] == execution:
            del self.locks[node]
            return True
        return False

    def read_admission_state(self, cluster: str) -> ClusterAdmissionState:
        return self.states.get(cluster, ClusterAdmissionState(cluster))

    def write_admission_state(self, state: ClusterAdmissionState) -> ClusterAdmissionState:
        if self.contention_once:
            self.contention_once = False
            raise LedgerContentionError("lost a race")
        if self.read_admission_state(state.cluster).version != state.version:
            raise LedgerContentionError("stale")
        written = replace(state, version=state.version + 1)
        self.states[state.cluster] = written
        return written

    def put_record(self, record: RemediationRecord) -> None:
        self.records.append(record)

    def node_records(self, cluster: str, node: str, since: datetime) -> list[RemediationRecord]:
        return [r for r in self.records if r.node == node and r.started_at >= since]

    def put_dropped_event(self, dropped: DroppedEvent) -> None:
        self.dropped.append(dropped)


def workflow_state(
    node: LiveNode,
    *,
    settings: RemediationSettings | None = None,
    execution: str = "exec-1",
    condition: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> WorkflowState:
    condition = condition or gpu_problem()
    payload = {
        "event": {
            "schemaVersion": "1",
            "cluster": CLUSTER,
            "node": {
                "name": node.name,
                "uid": node.uid,
                "providerID": node.provider_id,
                "labels": dict(node.labels),
            },
            "condition": {k: v for k, v in condition.items() if k != "lastHeartbeatTime"},
            "previous": {"status": "False", "reason": "GPUHealthy"},
            "observedAt": "2026-11-21T10:00:01.000Z",
            "resync": False,
        },
        "eventId": "e-1",
        "receivedAt": "2026-11-21T10:00:01.500Z",
        "settings": (settings or RemediationSettings()).to_json(),
        "execution": {
            "name": execution,
            "id": f"arn:aws:states:us-west-2:1:execution:sm:{execution}",
            "startedAt": "2026-11-21T10:00:02.000Z",
        },
        **(extra or {}),
    }
    return WorkflowState.parse(payload)


def kube(nodes: FakeNodes) -> KubeAccess:
    return KubeAccess(nodes=nodes, pods=NoPods())
