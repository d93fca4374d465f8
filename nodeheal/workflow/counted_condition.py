"""The live condition of an execution a counted signal started (``nodeheal.workflow.counting``).

No detector writes that condition, so the Node cannot say whether it still holds. The ledger can:
the window of the instance and signal, re-read at every Admit and before every mutation, must still
reach the rule's count within ``windowHours``, on the boot the node runs now (a new boot ends the
window, D19). The instance itself is proven as for every fault: the admitted Node's UID and
instance (D1), and the window is keyed by that instance, so a count never acts on another.
"""

from __future__ import annotations

from datetime import datetime

from nodeheal.conditions import Condition
from nodeheal.counted_signals import COUNTED_CONDITION_TYPE, DEFINITIONS
from nodeheal.kube_views import LiveNode
from nodeheal.timestamps import format_timestamp, parse_timestamp
from nodeheal.workflow.ports import LedgerPort
from nodeheal.workflow.signal_windows import still_over
from nodeheal.workflow.state import WorkflowState


def is_counted(state: WorkflowState) -> bool:
    """The execution acts on a counted signal's condition (not one it took over from a holder)."""
    return state.event.counted_signal is not None and state.condition_type == COUNTED_CONDITION_TYPE


def live_condition(
    state: WorkflowState, node: LiveNode, ledger: LedgerPort, now: datetime
) -> Condition | None:
    """The condition this execution remediates as it stands now: the Node's, or for a counted
    signal the one its window makes (None when the window no longer holds)."""
    if not is_counted(state):
        return node.condition(state.condition_type)
    counted = state.event.counted_signal or {}
    signal = str(counted.get("signal", ""))
    definition = DEFINITIONS.get(signal)
    instance_id = node.instance_id or ""
    if definition is None or not instance_id:
        return None
    if instance_id != str(counted.get("instanceId", "")):
        return None  # the window is another instance's (D1)
    rule = state.settings.policy.counted_rule(signal)
    window = ledger.read_signal_window(state.cluster, instance_id, signal)
    count = still_over(window, rule, boot_id=node.boot_id or "", now=now)
    if count is None:
        held = window.count_since(now.timestamp() - rule.window_hours * 3600) if window else 0
        return Condition(
            type=COUNTED_CONDITION_TYPE,
            status="False",
            reason=definition.reason,
            message=(
                f"{definition.title}: {held} within the last {rule.window_hours}h on this boot, "
                f"under the threshold of {rule.count}"
            ),
        )
    window_start = parse_timestamp(counted.get("windowStart"), "countedSignal.windowStart")
    return Condition(
        type=COUNTED_CONDITION_TYPE,
        status="True",
        reason=definition.reason,
        message=(
            f"{definition.title} seen {count} times within {rule.window_hours}h on instance {instance_id} "
            f"(threshold {rule.count}, window from {format_timestamp(window_start)})"
        ),
        last_transition_time=window_start,
    )
