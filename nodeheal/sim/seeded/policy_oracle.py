"""The oracles the invariants judge the workflow against, computed apart from it: what the
deployed policy decides for one condition alone (no history), after how long a confirmation, and
D3's key of a transition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeheal.actions import Mode
from nodeheal.conditions import Condition, is_bad_status
from nodeheal.config import RemediationSettings
from nodeheal.events import NodeConditionEvent
from nodeheal.policy.decide import NodeHistory, decide
from nodeheal.sim.seeded.world import START

_CLASSIFIED: dict[tuple[Any, ...], tuple[str, int]] = {}


def classify(condition: dict[str, Any], settings: RemediationSettings, labels: Mapping[str, str]) -> str:
    """The action the policy takes for this condition alone (no history): the oracle of I8."""
    return _classified(condition, settings, labels)[0]


def confirm_seconds(
    condition: dict[str, Any], settings: RemediationSettings, labels: Mapping[str, str]
) -> int:
    return _classified(condition, settings, labels)[1]


def _classified(
    condition: dict[str, Any], settings: RemediationSettings, labels: Mapping[str, str]
) -> tuple[str, int]:
    pool = labels.get(settings.policy.node_pool_label, "")
    key = (
        condition["type"],
        condition["status"],
        condition.get("reason"),
        condition.get("message"),
        pool,
        labels.get(settings.policy.opt_out_label),
        id(settings),
    )
    found = _CLASSIFIED.get(key)
    if found is None:
        found = _decide(condition, settings, labels)
        if len(_CLASSIFIED) > 50_000:
            _CLASSIFIED.clear()
        _CLASSIFIED[key] = found
    return found


def _decide(
    condition: dict[str, Any], settings: RemediationSettings, labels: Mapping[str, str]
) -> tuple[str, int]:
    parsed = Condition.from_api(condition)
    if not is_bad_status(parsed.type, parsed.status):
        return "none", 0
    decision = decide(
        parsed, labels=labels, history=NodeHistory(0, None), policy=settings.policy, mode=Mode.FULL, now=START
    )
    return decision.action.value, decision.confirm_seconds


def transition_key(detail: Mapping[str, Any]) -> tuple[str, ...]:
    """D3's key of a transition: (cluster, node name, node UID, condition type, status, reason,
    transition time). Written out here rather than taken from ingest: I5 checks ingest against it."""
    event = NodeConditionEvent.from_detail(detail)
    transition = event.condition.last_transition_time or event.observed_at
    return (
        event.cluster,
        event.node.name,
        event.node.uid,
        event.condition.type,
        event.condition.status,
        event.condition.reason,
        transition.strftime("%Y%m%dT%H%M%SZ"),
    )
