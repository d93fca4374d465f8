"""The memory of an instance's episode: the worst fault NodeHeal has seen on it (DESIGN D2).

Severity only rises within an episode, and an episode outlives any one execution: a fault seen by
one execution must still decide for the next execution of the same instance, even when the first
has not written its record yet (its lock expired, or it was superseded and is still stopping) and
even when the detector has since overwritten the message with a lesser one (NPD keeps only the
latest). Records alone cannot carry that, because they are written at the end.

So every bad condition NodeHeal sees on an instance is remembered in the ledger as a *sighting*,
one item per condition type, keeping the worst of the condition's current bad period (its
``lastTransitionTime``): admission remembers what it decides on, and every mutating step
remembers a condition it reads that is worse than what its execution planned. Admission and the
reboot step read the memory back.

A sighting still counts only while it describes the live node: the same Node object and boot (a
reboot or a new Node ends the episode; a new instance has another key), the condition still bad
with the same transition time (a recovery ends its part), and confirmed (bad for its
classification's confirmation time: a fault still confirming may yet clear).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal.actions import Action
from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.kube.model import LiveNode
from nodeheal.policy.classify import classify
from nodeheal.policy.decide import Decision
from nodeheal.timeutil import format_timestamp, parse_timestamp


@dataclass(frozen=True, slots=True)
class Sighting:
    """One bad condition as NodeHeal saw and classified it on an instance."""

    condition_type: str
    #: The condition's lastTransitionTime: which bad period of the condition this is.
    since: datetime
    node_uid: str
    boot_id: str
    #: What the classification alone asked for (before budgets, caps, opt-out and mode).
    action: Action
    signal: str
    xid: int | None
    confirm_seconds: int
    #: The execution that saw it, for the explanation.
    execution: str
    seen_at: datetime

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "conditionType": self.condition_type,
            "since": format_timestamp(self.since, millis=True),
            "nodeUid": self.node_uid,
            "bootId": self.boot_id,
            "action": self.action.value,
            "cost": self.action.cost,
            "signal": self.signal,
            "confirmSeconds": self.confirm_seconds,
            "execution": self.execution,
            "seenAt": format_timestamp(self.seen_at, millis=True),
        }
        if self.xid is not None:
            item["xid"] = self.xid
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Sighting:
        xid = item.get("xid")
        return cls(
            condition_type=str(item["conditionType"]),
            since=parse_timestamp(str(item["since"]), "sighting.since"),
            node_uid=str(item.get("nodeUid", "")),
            boot_id=str(item.get("bootId", "")),
            action=Action(str(item["action"])),
            signal=str(item.get("signal", "")),
            xid=int(xid) if xid is not None else None,
            confirm_seconds=int(item.get("confirmSeconds", 0)),
            execution=str(item.get("execution", "")),
            seen_at=parse_timestamp(str(item["seenAt"]), "sighting.seenAt"),
        )

    def replaces(self, stored: Sighting) -> bool:
        """Whether this sighting is kept over ``stored`` (the same rule as the ledger's conditional
        write): a later bad period; in the same period on the same Node object and boot, a worse
        fault; on another object or boot, the later sighting (the earlier one no longer describes
        the live instance, or this one is a late write from before a reboot)."""
        if self.since != stored.since:
            return self.since > stored.since
        if (self.node_uid, self.boot_id) == (stored.node_uid, stored.boot_id):
            return self.action.cost > stored.action.cost
        return self.seen_at > stored.seen_at


def sighting_of(
    condition: Condition, node: LiveNode, policy: PolicySettings, *, execution: str, now: datetime
) -> Sighting | None:
    """The sighting of ``condition`` on ``node`` (None unless it is a bad, timed, non-Ready one)."""
    if condition.type == "Ready" or not condition.is_bad or condition.last_transition_time is None:
        return None
    classification = classify(
        condition, policy.for_pool(node.labels.get(policy.node_pool_label)), policy.unknown_action
    )
    return Sighting(
        condition_type=condition.type,
        since=condition.last_transition_time,
        node_uid=node.uid,
        boot_id=node.boot_id,
        action=classification.action,
        signal=classification.signal,
        xid=classification.xid,
        confirm_seconds=classification.confirm_seconds,
        execution=execution,
        seen_at=now,
    )


def sightings_on(node: LiveNode, policy: PolicySettings, *, execution: str, now: datetime) -> list[Sighting]:
    """A sighting of every bad condition on the live node."""
    found = (
        sighting_of(condition, node, policy, execution=execution, now=now)
        for _, condition in sorted(node.conditions.items())
    )
    return [sighting for sighting in found if sighting is not None]


def worse_than(sightings: Iterable[Sighting], action: Action) -> list[Sighting]:
    """The sightings that call for more than ``action``: the only ones a step past admission writes
    (one conditional write each), so the memory costs nothing while nothing worsens."""
    return [sighting for sighting in sightings if sighting.action.cost > action.cost]


def still_describes(sighting: Sighting, node: LiveNode, now: datetime) -> bool:
    """Whether the sighting belongs to the live node's current episode and is confirmed."""
    live = node.condition(sighting.condition_type)
    return (
        sighting.node_uid == node.uid
        and sighting.boot_id == node.boot_id
        and live is not None
        and live.is_bad
        and live.last_transition_time == sighting.since
        and (now - sighting.since).total_seconds() >= sighting.confirm_seconds
    )


def remembered_worst(sightings: Sequence[Sighting], node: LiveNode, now: datetime) -> Decision | None:
    """The most severe remembered fault that still describes the live node, as a decision that acts
    now (it was confirmed), or None."""
    current = [sighting for sighting in sightings if still_describes(sighting, node, now)]
    if not current:
        return None
    worst = max(current, key=lambda sighting: (sighting.action.cost, sighting.seen_at))
    return Decision(
        action=worst.action,
        planned_action=worst.action,
        reason=(
            f"{worst.condition_type} read {worst.signal} ({worst.action.value}) when execution "
            f"{worst.execution} saw it at {format_timestamp(worst.seen_at)}"
        ),
        xid=worst.xid,
        signal=worst.signal,
        confirm_seconds=0,
    )
