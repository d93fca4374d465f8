"""Scope: is the LIVE node one NodeHeal acts on at all?

The EventBridge rule filters on what the event says (its ``node.labels`` and ``condition``), and an
event is a hint, never the truth: an exporter with a stale label cache, a hand-published event or
an archive replayed through a broader rule can claim a scope the node does not have. Admit calls
:func:`out_of_scope` on the node it has just re-read, before any lock or budget, so the rule's scope
(``cdk.json`` ``rule``, carried as ``settings.scope``) holds for the node itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeheal.conditions import Condition
from nodeheal.config import ScopeSettings
from nodeheal.counted_signals import COUNTED_CONDITION_TYPE


def out_of_scope(scope: ScopeSettings, labels: Mapping[str, str], condition: Condition) -> str:
    """Why the live node or its live condition is outside ``scope``; empty when it is inside.

    Conditions: the live condition's type must be listed and its live status be one of that type's
    statuses. Labels: every configured label must be present with one of its accepted values (the
    same AND-of-labels, OR-of-values the EventBridge pattern applies).
    """
    # A counted signal's condition is no detector's: the counting rule and policy.countedSignals
    # are its scope. The labels hold for it as for every fault.
    if condition.type != COUNTED_CONDITION_TYPE:
        statuses = {status for c in scope.conditions if c.type == condition.type for status in c.statuses}
        if not statuses:
            return f"condition {condition.type} is not one of the rule's conditions"
        if condition.status not in statuses:
            return (
                f"live {condition.type}={condition.status} is not one of the rule's statuses "
                f"({', '.join(sorted(statuses))})"
            )
    for key, accepted in sorted(scope.node_labels.items()):
        value = labels.get(key)
        if value in accepted:
            continue
        wanted = f"{key}={accepted[0]}" if len(accepted) == 1 else f"{key} in ({', '.join(accepted)})"
        if value is None:
            return f"node lacks label {wanted}"
        return f"node label {key}={value}, the rule wants {wanted}"
    return ""
