"""In-memory fakes of the workflow ports, for step tests that need no server at all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeheal.config import RemediationSettings
from nodeheal.errors import LedgerContentionError, LockNotHeldError, SupersededError
from nodeheal.kube.model import UNHEALTHY_TAINT_KEY, LiveNode, PodView, Taint
from nodeheal.sim.objects import make_node
from nodeheal.workflow.budget import ClusterAdmissionState
from nodeheal.workflow.locks import LockClaim, LockView
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
    held_by: LockView | None = None


@dataclass
class FakeLedger:
    """The ledger's contract in memory: locks keyed by identity (instance), with the same
    conditional semantics as nodeheal.aws.ledger.Ledger (tests/unit/workflow/test_ledger.py)."""

    locks: dict[str, LockView] = field(default_factory=dict)
    states: dict[str, ClusterAdmissionState] = field(default_factory=dict)
    records: list[RemediationRecord] = field(default_factory=list)
    dropped: list[DroppedEvent] = field(default_factory=list)
    ended: dict[str, str] = field(default_factory=dict)
    now: datetime = NOW
    contention_once: bool = False

    def _live(self, subject: str) -> LockView | None:
        held = self.locks.get(subject)
        return held if held is not None and held.expires_at > self.now else None

    def _view(self, execution: str, ttl: timedelta, claim: LockClaim | None, **extra: Any) -> LockView:
        if claim is None:
            return LockView(execution=execution, expires_at=self.now + ttl, **extra)
        return LockView(
            execution=execution,
            expires_at=self.now + ttl,
            node=claim.node,
            condition_type=claim.condition_type,
            action=claim.action,
            acts_at=claim.acts_at,
            **extra,
        )

    def acquire_lock(
        self, cluster: str, subject: str, execution: str, ttl: timedelta, claim: LockClaim | None = None
    ) -> Lock:
        held = self._live(subject)
        if held is not None and held.execution != execution:
            return Lock(False, held.execution, held)
        keep = {"mutated": held.mutated, "busy_until": held.busy_until} if held else {}
        self.locks[subject] = self._view(execution, ttl, claim, **keep)
        return Lock(True, execution)

    def preempt_lock(
        self,
        cluster: str,
        subject: str,
        execution: str,
        ttl: timedelta,
        claim: LockClaim,
        *,
        holder: LockView,
        require_unmutated: bool,
    ) -> bool:
        current = self.locks.get(subject)
        if (
            current is None
            or current.execution != holder.execution
            or current.expires_at != holder.expires_at
        ):
            return False
        if current.busy_until is not None and current.busy_until >= self.now:
            return False
        if require_unmutated and current.mutated:
            return False
        self.locks[subject] = self._view(execution, ttl, claim)
        return True

    def claim_mutation(
        self, cluster: str, subject: str, execution: str, *, step: str, busy_for: timedelta
    ) -> None:
        held = self._live(subject)
        if held is None:
            raise LockNotHeldError(f"{execution} no longer holds the lock of {subject}")
        if held.execution != execution:
            raise SupersededError(f"{held.execution} took over {subject}")
        self.locks[subject] = replace(held, mutated=True, busy_until=self.now + busy_for)

    def lock_holder(self, cluster: str, subject: str) -> str | None:
        held = self._live(subject)
        return held.execution if held else None

    def release_lock(self, cluster: str, subject: str, execution: str) -> bool:
        held = self.locks.get(subject)
        if held is not None and held.execution == execution:
            del self.locks[subject]
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
        self.records = [r for r in self.records if r.execution != record.execution]
        self.records.append(record)

    def instance_records(self, cluster: str, subject: str, since: datetime) -> list[RemediationRecord]:
        return [r for r in self.records if r.subject == subject and r.started_at >= since]

    def execution_ended(self, cluster: str, execution: str) -> bool:
        return execution in self.ended

    def mark_execution_ended(self, cluster: str, execution: str, outcome: str, by: str) -> None:
        self.ended.setdefault(execution, outcome)

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
