"""Reading a counted signal out of a Warning Event (the signals and their rules:
``nodeheal.counted_signals``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from nodeheal.actions import Action
from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.counted_signals import definition_by_reason, unaggregated
from nodeheal.policy.classify import Classification
from nodeheal.policy.signals import NVLINK5_XIDS, NvlinkSeverity, xids_in_message

#: Xid 94, a contained ECC error (95 is the uncontained one, a condition).
CONTAINED_XID = 94
ROW_REMAP_PENDING_XID = 63
HIGH_SBE_RATE_XID = 92

#: The node monitoring agent's message of a DCGM health incident that is a warning.
_DCGM_HEALTH_WARNING = re.compile(r"^DCGMHealthCode(?P<code>\d+):")

#: Reasons of NPD's stock temporary problems that count, by signal (NPD v1.35.1
#: ``config/kernel-monitor.json`` and ``config/systemd-monitor.json``).
_NPD_TEMPORARY_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "OOMKilling": "oom-kill",
        "TaskHung": "task-hung",
        "KubeletStart": "service-restart",
        "ContainerdStart": "service-restart",
        "DockerStart": "service-restart",
    }
)


def counted_signal(event_type: str, reason: str, message: str) -> str | None:
    """The counted signal an Event reports (its key in :data:`DEFINITIONS`), or None.

    Only Warning Events count. An aggregated Event's message is its newest occurrence's, so the
    Xid read from it is the newest one's."""
    if event_type != "Warning":
        return None
    by_reason = _NPD_TEMPORARY_REASONS.get(reason)
    if by_reason is not None:
        return by_reason
    text, _ = unaggregated(message)
    if _DCGM_HEALTH_WARNING.match(text):
        return "dcgm-health-warning"
    for signal in xids_in_message(text):
        if signal.xid == ROW_REMAP_PENDING_XID:
            return "xid-63"
        if signal.xid == HIGH_SBE_RATE_XID:
            return "xid-92"
        if signal.xid == CONTAINED_XID and signal.reset_required is not True:
            return "xid-94"
        if signal.xid in NVLINK5_XIDS and signal.nvlink_severity is NvlinkSeverity.NONFATAL:
            return "nvlink-nonfatal"
    return None


def classify_counted(condition: Condition, policy: PolicySettings) -> Classification:
    """The decision table's answer for a counted signal's condition: the signal's rule
    (``policy.countedSignals`` or its default). Its message names the Xid that was counted, which
    alone calls for nothing, so it is not read for Xids the way a detector's message is."""
    definition = definition_by_reason(condition.reason)
    if not condition.is_bad or definition is None:
        return Classification(
            action=Action.NONE,
            reason=f"the counted signal's window no longer holds ({condition.message or condition.reason})",
            xid=None,
            signal=f"counted:{definition.key if definition else condition.reason}",
        )
    rule = policy.counted_rule(definition.key)
    return Classification(
        action=rule.action,
        reason=(
            f"{condition.message}. policy.countedSignals.{definition.key}: {rule.count} within "
            f"{rule.window_hours}h calls for {rule.action.value} ({definition.source})"
        ),
        xid=None,
        signal=f"counted:{definition.key}",
    )
