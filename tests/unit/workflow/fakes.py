"""In-memory fakes of the workflow ports, for step tests that need no server at all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from nodeheal.actions import Mode
from nodeheal.config import RemediationSettings
from nodeheal.kube_views import UNHEALTHY_TAINT_KEY, LiveNode, PodView, Taint
from nodeheal.sim.apiserver.objects import make_node
from nodeheal.sim.seeded.memory_ledger import MemoryLedger
from nodeheal.workflow.ports import KubeAccess
from nodeheal.workflow.state import WorkflowState

NOW = datetime(2026, 11, 21, 10, 5, tzinfo=UTC)
CLUSTER = "training-on-eks"
#: The EC2 instance behind the Node :func:`live_node` builds, unless a test names another.
INSTANCE = "i-0abc1234def567890"
XID_79 = "NVRM: Xid (PCI:0000:53:00): 79, pid=2411, name=python3, GPU has fallen off the bus."


def live_node(name: str = "gpu-a", *, condition: dict[str, Any] | None = None, **kwargs: Any) -> LiveNode:
    extra = [condition] if condition else None
    raw = make_node(name, instance_id=kwargs.pop("instance_id", INSTANCE), extra_conditions=extra, **kwargs)
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


#: The in-memory ledger lives in the package: the seeded simulation runs over it too (D7).
FakeLedger = MemoryLedger


#: The settings an execution of these tests carries unless a test gives its own: the tests exercise
#: remediations, so the mode is full, chosen here (a configuration without ``mode`` is dry-run).
FULL = RemediationSettings(mode=Mode.FULL)


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
        "settings": (settings or FULL).to_json(),
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
