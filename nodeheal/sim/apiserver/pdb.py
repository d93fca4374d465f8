"""PodDisruptionBudget status as the disruption controller computes it.

The simulator computes the status live instead of through a lagging controller, so a test sees
the budget an eviction is checked against. Expected counts follow `getExpectedPodCount`: an
integer `minAvailable` counts the selected pods; a percentage or `maxUnavailable` sums the scale
of the pods' controllers (unmanaged pods are ignored, a pod whose controller has no scale fails
the sync and forces `disruptionsAllowed` to 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeheal.sim.apiserver.objects import rfc3339
from nodeheal.sim.apiserver.selectors import selector_from_label_selector

JSON = dict[str, Any]

# Controllers whose scale the disruption controller can find without a /scale subresource.
SCALABLE_KINDS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController", "Deployment"})

#: disruption.go DeletionTimeout: how long a pod the eviction subresource let go (an entry of
#: status.disruptedPods) is counted as not healthy while it has not started terminating.
#: https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/controller/disruption/disruption.go
DELETION_TIMEOUT_SECONDS = 120.0


def unsynced_status() -> JSON:
    """The status of a PDB the disruption controller has not synced yet: the registry resets it on
    create, and these four fields are not omitempty (k8s.io/api policy/v1 types.go)."""
    return {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


@dataclass(frozen=True)
class BudgetStatus:
    current_healthy: int
    desired_healthy: int
    expected_pods: int
    disruptions_allowed: int
    sync_error: str | None = None


def is_pod_ready(pod: JSON) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def is_pod_healthy(pod: JSON) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and is_pod_ready(pod)


def controller_of(pod: JSON) -> JSON | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def scaled_value(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"(\d+)%", value)
    if not m:
        if value.isdigit():
            return int(value)
        raise ValueError(f"invalid value for IntOrString: invalid value {value!r}")
    return math.ceil(int(m.group(1)) * total / 100)


def selects(pdb: JSON, pod: JSON) -> bool:
    """Whether the budget covers the pod, with metav1.LabelSelectorAsSelector's policy/v1 meaning
    (as both the eviction subresource and the disruption controller apply it): no selector matches
    nothing, an empty one every pod of the PDB's namespace."""
    spec_selector = (pdb.get("spec") or {}).get("selector")
    if spec_selector is None or pod["metadata"].get("namespace") != pdb["metadata"].get("namespace"):
        return False
    return selector_from_label_selector(spec_selector).matches(pod["metadata"].get("labels"))


def selected_pods(pdb: JSON, pods: Iterable[JSON]) -> list[JSON]:
    return [p for p in pods if selects(pdb, p)]


def _expected_scale(pods: list[JSON], scales: Mapping[tuple[str, str, str], int]) -> int:
    controller_scale: dict[str, int] = {}
    for pod in pods:
        ref = controller_of(pod)
        if ref is None:
            continue
        uid = str(ref.get("uid", ""))
        if uid in controller_scale:
            continue
        key = (str(pod["metadata"].get("namespace", "")), str(ref.get("kind", "")), str(ref.get("name", "")))
        if key in scales:
            controller_scale[uid] = scales[key]
        elif ref.get("kind") in SCALABLE_KINDS:
            # Without a registered scale the controller is assumed to want exactly the pods it has.
            controller_scale[uid] = sum(
                1 for p in pods if (controller_of(p) or {}).get("uid") == ref.get("uid")
            )
        else:
            raise LookupError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
    return sum(controller_scale.values())


def compute_status(
    pdb: JSON,
    pods: Iterable[JSON],
    scales: Mapping[tuple[str, str, str], int],
    disrupted_uids: Collection[str] = (),
) -> BudgetStatus:
    """The status as trySync computes it; pods in ``disrupted_uids`` (evictions the budget let go
    of, not yet terminating) do not count as healthy (disruption.go countHealthyPods)."""
    selected = selected_pods(pdb, pods)
    spec = pdb.get("spec") or {}
    current = sum(1 for p in selected if is_pod_healthy(p) and p["metadata"].get("uid") not in disrupted_uids)
    try:
        if spec.get("maxUnavailable") is not None:
            expected = _expected_scale(selected, scales)
            desired = max(expected - scaled_value(spec["maxUnavailable"], expected), 0)
        elif isinstance(spec.get("minAvailable"), int):
            desired = int(spec["minAvailable"])
            expected = len(selected)
        elif spec.get("minAvailable") is not None:
            expected = _expected_scale(selected, scales)
            desired = scaled_value(spec["minAvailable"], expected)
        else:
            expected, desired = len(selected), 0
    except (LookupError, ValueError) as exc:
        return BudgetStatus(current, 0, 0, 0, str(exc.args[0]))
    allowed = current - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    return BudgetStatus(current, desired, expected, allowed)


def with_status(
    pdb: JSON, status: BudgetStatus, now: str, disrupted_pods: Mapping[str, str] | None = None
) -> JSON:
    """The stored PDB with the computed status filled in, conditions as pdbhelper sets them;
    ``disrupted_pods`` (pod name to the time its eviction was allowed) is omitted when empty."""
    generation = int(pdb["metadata"].get("generation", 1))
    if status.sync_error is not None:
        condition = {"status": "False", "reason": "SyncFailed", "message": status.sync_error}
    elif status.disruptions_allowed > 0:
        condition = {"status": "True", "reason": "SufficientPods", "message": ""}
    else:
        condition = {"status": "False", "reason": "InsufficientPods", "message": ""}
    previous = next(
        (
            c
            for c in (pdb.get("status") or {}).get("conditions") or []
            if c.get("type") == "DisruptionAllowed"
        ),
        None,
    )
    transition = (
        previous["lastTransitionTime"] if previous and previous.get("status") == condition["status"] else now
    )
    pdb["status"] = {
        "observedGeneration": generation,
        **({"disruptedPods": dict(disrupted_pods)} if disrupted_pods else {}),
        "disruptionsAllowed": status.disruptions_allowed,
        "currentHealthy": status.current_healthy,
        "desiredHealthy": status.desired_healthy,
        "expectedPods": status.expected_pods,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                **condition,
                "observedGeneration": generation,
                "lastTransitionTime": transition,
            }
        ],
    }
    return pdb


def update_allowed_condition(status: JSON) -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition with meta.SetStatusCondition's rules: the
    DisruptionAllowed condition follows disruptionsAllowed, keeps its place in the list, and moves
    its transition time only when its status changes."""
    allowed = int(status.get("disruptionsAllowed", 0)) > 0
    wanted = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed else "False",
        "observedGeneration": int(status.get("observedGeneration", 0)),
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
    }
    conditions = status.setdefault("conditions", [])
    for index, condition in enumerate(conditions):
        if condition.get("type") == "DisruptionAllowed":
            moved = condition.get("status") != wanted["status"]
            transition = rfc3339() if moved else condition.get("lastTransitionTime", rfc3339())
            conditions[index] = {**wanted, "lastTransitionTime": transition}
            return
    conditions.append({**wanted, "lastTransitionTime": rfc3339()})
