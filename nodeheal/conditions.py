"""What a Node condition means: which status is the bad one.

Kubernetes has two conventions for Node conditions and NodeHeal must read both the same way
everywhere (exporter resync, ingest, admit, recovery check):

* "positive" conditions, where ``True`` is healthy: the kubelet's ``Ready`` and the EKS node
  monitoring agent's ``AcceleratedHardwareReady``, ``KernelReady``, ``NetworkingReady``,
  ``StorageReady``, ``ContainerRuntimeReady``. ``False`` is bad; for ``Ready`` itself ``Unknown``
  (the node stopped posting status) is bad as well.
* "problem" conditions, where ``True`` is the problem: node-problem-detector's ``GPUProblem``,
  ``KernelDeadlock``, ``ReadonlyFilesystem``, ``FrequentKubeletRestart``... and the kubelet's
  ``MemoryPressure``/``DiskPressure``/``PIDPressure``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal.errors import InvalidEventError
from nodeheal.timestamps import format_timestamp, parse_timestamp

#: Conditions the kubelet sets from resource pressure. They are the scheduler's business (the
#: kubelet evicts pods itself), never a reason to replace hardware, so the exporter skips them.
KUBELET_PRESSURE_CONDITIONS = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure"})

#: Valid values of NodeCondition.status in the Kubernetes API.
CONDITION_STATUSES = frozenset({"True", "False", "Unknown"})


def is_positive_condition(condition_type: str) -> bool:
    """True when ``status=True`` means healthy (``Ready`` and the ``*Ready`` conditions)."""
    return condition_type == "Ready" or condition_type.endswith("Ready")


def is_bad_status(condition_type: str, status: str) -> bool:
    """Whether ``status`` is the unhealthy value for a condition of this type."""
    if condition_type == "Ready":
        return status in ("False", "Unknown")
    if is_positive_condition(condition_type):
        return status == "False"
    return status == "True"


@dataclass(frozen=True, slots=True)
class Condition:
    """One ``Node.status.conditions[]`` entry, the fields NodeHeal reads."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None

    @property
    def is_bad(self) -> bool:
        return is_bad_status(self.type, self.status)

    @classmethod
    def from_api(cls, raw: Any) -> Condition:
        """Build from the JSON form of a NodeCondition (camelCase keys, as the API serves it)."""
        if not isinstance(raw, dict):
            raise InvalidEventError(f"condition must be an object, got {type(raw).__name__}")
        condition_type = raw.get("type")
        status = raw.get("status")
        if not isinstance(condition_type, str) or not condition_type:
            raise InvalidEventError("condition.type must be a non-empty string")
        # The type check first: an unhashable status (a list, an object) cannot be looked up in a set.
        if not isinstance(status, str) or status not in CONDITION_STATUSES:
            raise InvalidEventError(f"condition.status must be one of True, False, Unknown; got {status!r}")
        reason = raw.get("reason") or ""
        message = raw.get("message") or ""
        if not isinstance(reason, str) or not isinstance(message, str):
            raise InvalidEventError("condition.reason and condition.message must be strings")
        transition = raw.get("lastTransitionTime")
        return cls(
            type=condition_type,
            status=status,
            reason=reason,
            message=message,
            last_transition_time=(
                parse_timestamp(transition, "condition.lastTransitionTime") if transition else None
            ),
        )

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
        }
        if self.last_transition_time is not None:
            body["lastTransitionTime"] = format_timestamp(self.last_transition_time)
        return body
