"""Read-only views of the Kubernetes objects NodeHeal reasons about.

The adapters talk JSON to the API server (``_preload_content=False``) and hand these small views
to the domain: the domain stays independent of the client's generated models, and a field the
client does not model (or a partially populated object) cannot break a decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeheal.conditions import Condition
from nodeheal.events import instance_id_from_provider_id
from nodeheal.payload import bounded_condition
from nodeheal.timestamps import parse_timestamp

#: Taint NodeHeal puts on a node it cordons; its presence is how NodeHeal recognises its own work.
UNHEALTHY_TAINT_KEY = "nodeheal.io/unhealthy"
#: Annotations written on cordon, naming who did it and why (read by people and by uncordon).
ANNOTATION_EXECUTION = "nodeheal.io/execution"
ANNOTATION_REASON = "nodeheal.io/reason"
ANNOTATION_CORDONED_AT = "nodeheal.io/cordoned-at"
#: Set only when NodeHeal itself flipped spec.unschedulable, so uncordon never undoes a person's cordon.
ANNOTATION_CORDONED_BY_NODEHEAL = "nodeheal.io/cordoned-by-nodeheal"

DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
#: EKS managed node groups label their nodes with the group's name.
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True, slots=True)
class LiveNode:
    name: str
    uid: str
    resource_version: str
    provider_id: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    unschedulable: bool
    taints: tuple[Taint, ...]
    conditions: Mapping[str, Condition]
    boot_id: str
    gpu_capacity: int = 0

    @property
    def instance_id(self) -> str | None:
        return instance_id_from_provider_id(self.provider_id)

    @property
    def is_ready(self) -> bool:
        ready = self.conditions.get("Ready")
        return ready is not None and ready.status == "True"

    @property
    def cordoned_by_nodeheal(self) -> bool:
        return any(t.key == UNHEALTHY_TAINT_KEY for t in self.taints)

    def condition(self, condition_type: str) -> Condition | None:
        return self.conditions.get(condition_type)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> LiveNode:
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        conditions: dict[str, Condition] = {}
        for raw in status.get("conditions") or []:
            # Bounded as the exporter bounds it (D17): what admit reads live and keeps in the
            # state is never larger than what an event may carry.
            condition = bounded_condition(Condition.from_api(raw))
            conditions[condition.type] = condition
        gpus = (status.get("capacity") or {}).get("nvidia.com/gpu", "0")
        return cls(
            name=str(metadata.get("name", "")),
            uid=str(metadata.get("uid", "")),
            resource_version=str(metadata.get("resourceVersion", "")),
            provider_id=str(spec.get("providerID", "")),
            labels=dict(metadata.get("labels") or {}),
            annotations=dict(metadata.get("annotations") or {}),
            unschedulable=bool(spec.get("unschedulable", False)),
            taints=tuple(
                Taint(
                    key=str(t.get("key", "")),
                    effect=str(t.get("effect", "")),
                    value=str(t.get("value", "") or ""),
                )
                for t in spec.get("taints") or []
            ),
            conditions=conditions,
            boot_id=str((status.get("nodeInfo") or {}).get("bootID", "")),
            gpu_capacity=int(gpus) if str(gpus).isdigit() else 0,
        )


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    uid: str
    phase: str
    owner_kinds: tuple[str, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    deletion_requested: bool = False
    termination_grace_seconds: int = 30
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Whether an ownerReference has ``controller: true`` (what kubectl drain calls "managed"):
    #: a pod without one is not recreated anywhere once it is evicted.
    has_controller: bool = True
    #: Names of the pod's ``emptyDir`` volumes: data that is lost when the pod leaves the node.
    empty_dir_volumes: tuple[str, ...] = ()
    #: ``metadata.deletionTimestamp``: when the pod's grace period ends (None: not terminating).
    deletion_timestamp: datetime | None = None
    #: ``(apiVersion, kind)`` of the controller ownerReference, the first with ``controller: true``
    #: (kubectl's ``metav1.GetControllerOf``); None when no owner is the controller.
    controller_ref: tuple[str, str] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_daemonset_pod(self) -> bool:
        """As kubectl drain counts them (``pkg/drain/filters.go`` in kubernetes/kubectl,
        ``daemonSetFilter`` and ``isControllerRefDaemonSet``): the pod's controller ownerReference
        is kind ``DaemonSet`` with apiVersion ``apps/v1``, both compared exactly. An owner of that
        kind that is not the controller does not make it one: no DaemonSet recreates the pod."""
        return self.controller_ref == ("apps/v1", "DaemonSet")

    @property
    def is_mirror_pod(self) -> bool:
        return MIRROR_POD_ANNOTATION in self.annotations

    @property
    def is_finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def do_not_disrupt(self) -> bool:
        return self.annotations.get(DO_NOT_DISRUPT_ANNOTATION, "").lower() == "true"

    @property
    def needs_eviction(self) -> bool:
        """Pods a drain must move. DaemonSet pods would be recreated on the node (and tolerate the
        unschedulable taint), mirror pods belong to the kubelet, finished pods hold no GPU."""
        return not (self.is_daemonset_pod or self.is_mirror_pod or self.is_finished)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> PodView:
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        owners = metadata.get("ownerReferences") or []
        deletion = metadata.get("deletionTimestamp")
        return cls(
            namespace=str(metadata.get("namespace", "default")),
            name=str(metadata.get("name", "")),
            uid=str(metadata.get("uid", "")),
            phase=str((obj.get("status") or {}).get("phase", "")),
            owner_kinds=tuple(str(o.get("kind", "")) for o in owners),
            annotations=dict(metadata.get("annotations") or {}),
            deletion_requested=bool(metadata.get("deletionTimestamp")),
            termination_grace_seconds=int(spec.get("terminationGracePeriodSeconds", 30) or 0),
            labels=dict(metadata.get("labels") or {}),
            has_controller=any(bool(o.get("controller")) for o in owners),
            empty_dir_volumes=tuple(
                str(volume.get("name", ""))
                for volume in spec.get("volumes") or []
                if volume.get("emptyDir") is not None
            ),
            deletion_timestamp=parse_timestamp(deletion, "metadata.deletionTimestamp") if deletion else None,
            controller_ref=next(
                (
                    (str(o.get("apiVersion", "")), str(o.get("kind", "")))
                    for o in owners
                    if o.get("controller")
                ),
                None,
            ),
        )
