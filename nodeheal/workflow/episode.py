"""The memory of an instance's episode: the worst fault NodeHeal saw on it (docs/architecture.md, D2, D19).

What an episode is (D19). It belongs to an instance (its Node object and boot), not to one
condition. It starts when any of the instance's conditions goes bad and ends only when

* the instance boots again (``status.nodeInfo.bootID`` changes) or is replaced (another Node
  object or instance: another key, or another ``nodeUid``), or
* NodeHeal *sees* every condition that was bad healthy: a live read of the node in which no
  condition but ``Ready`` is bad (:func:`episode_over_on`).

A change of reason or message does not end it, and neither does a new ``lastTransitionTime``:
node-problem-detector rewrites ``lastTransitionTime`` together with the reason whenever a log line
with another reason matches, while the status stays True (``pkg/systemlogmonitor/log_monitor.go``,
``generateStatus``); the EKS node monitoring agent keeps the time but overwrites the reason with the
newest and joins the messages with "; " (``pkg/manager/node_exporter.go``). So a lesser reason that
overwrites Xid 79 is the same dead GPU, and NodeHeal cannot tell from a live read whether a
condition recovered in between: the worse decision holds, within the same boot of the same
instance. Only a read that shows the whole node healthy ends it; a read showing one condition
healthy while another is bad does not, because the bad one may have been bad all along.

Severity only rises within an episode, and an episode outlives any one execution: a fault seen by
one execution must still decide for the next execution of the same instance, even when the first
has not written its record yet (its lock expired, or it was superseded and is still stopping).
Records alone cannot carry that, because they are written at the end.

So every bad condition NodeHeal sees on an instance is remembered in the ledger as a *sighting*,
one item per condition type keeping the worst fault of that condition in the episode: admission
remembers what it decides on (and what the event reported), every mutating step remembers a
condition it reads that is worse than what its execution planned. Admission and the reboot step
read the memory back. When admission reads the node healthy it marks every sighting of the
episode ``clearedAt`` (:meth:`Sighting.cleared`); the next bad sighting starts a new episode.

The write rule, in one conditional write per item (:meth:`Sighting.replaces`, the same as the
ledger's condition expression):

==========================================  ====================================================
stored item                                 the new sighting is kept when
==========================================  ====================================================
none                                        always
another Node object or boot                 it was seen later (a late write from before a
                                            reboot does not come back)
same object and boot, episode ended         it was seen after the episode ended
(``clearedAt`` set)
same object and boot, episode running       it is worse (severity only rises), or as severe
                                            and confirmed where the stored one was not (seen
                                            first inside its confirmation time, then past it)
==========================================  ====================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal.actions import Action
from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.kube_views import LiveNode
from nodeheal.policy.classify import classify
from nodeheal.policy.decide import Decision
from nodeheal.timestamps import format_timestamp, parse_timestamp


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
    #: When it was (last) seen bad; the worst fault's own details above.
    seen_at: datetime
    #: When NodeHeal read the whole node healthy after ``seen_at``: the episode ended (D19).
    cleared_at: datetime | None = None

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
            "confirmed": self.confirmed_when_seen,
        }
        if self.xid is not None:
            item["xid"] = self.xid
        if self.cleared_at is not None:
            item["clearedAt"] = format_timestamp(self.cleared_at, millis=True)
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Sighting:
        xid = item.get("xid")
        cleared = item.get("clearedAt")
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
            cleared_at=parse_timestamp(str(cleared), "sighting.clearedAt") if cleared else None,
        )

    @property
    def confirmed_when_seen(self) -> bool:
        """It had been bad its whole confirmation time when it was seen (or needs none)."""
        return (
            self.confirm_seconds <= 0 or (self.seen_at - self.since).total_seconds() >= self.confirm_seconds
        )

    def replaces(self, stored: Sighting) -> bool:
        """Whether this sighting is kept over ``stored``: the table in the module docstring, the
        same rule as the ledger's conditional write."""
        if (self.node_uid, self.boot_id) != (stored.node_uid, stored.boot_id):
            return self.seen_at > stored.seen_at
        if stored.cleared_at is not None:
            return self.seen_at > stored.cleared_at
        if self.action.cost == stored.action.cost:
            # The fault NodeHeal first saw inside its confirmation time, seen again past it: were
            # the first sighting kept, the fault would read as a flap once its condition clears.
            return self.confirmed_when_seen and not stored.confirmed_when_seen
        return self.action.cost > stored.action.cost

    def same_episode_object(self, node: LiveNode) -> bool:
        """Whether it was seen on the live node's Node object and boot."""
        return self.node_uid == node.uid and self.boot_id == node.boot_id


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
    """Whether the sighting belongs to the live node's current episode (same Node object and boot,
    the episode not seen over since) and is confirmed. Its own condition need not be bad now, nor
    carry the same reason or transition time: the episode is the instance's, and only a read of the
    whole node healthy ends it (D19)."""
    return (
        sighting.same_episode_object(node) and sighting.cleared_at is None and _confirmed(sighting, node, now)
    )


def _confirmed(sighting: Sighting, node: LiveNode, now: datetime) -> bool:
    """A fault with a confirmation time counts once it was bad that long: NodeHeal saw it bad past
    its confirmation time, or its condition is bad now and has been since long enough (a fault
    that cleared inside its confirmation time was a flap, which confirmation exists to ignore)."""
    if sighting.confirmed_when_seen:
        return True
    live = node.condition(sighting.condition_type)
    return (
        live is not None
        and live.is_bad
        and (now - sighting.since).total_seconds() >= sighting.confirm_seconds
    )


def episode_over_on(node: LiveNode) -> bool:
    """Whether this live read sees every condition of the node healthy, which ends its episode
    (D19). ``Ready`` must be True: a node whose kubelet stopped posting status shows stale
    conditions, which are not *seen* healthy; ``Ready`` itself is the kubelet's, never a fault
    NodeHeal remembers."""
    return node.is_ready and not any(
        condition.is_bad for condition_type, condition in node.conditions.items() if condition_type != "Ready"
    )


def to_clear(sightings: Iterable[Sighting], node: LiveNode) -> list[Sighting]:
    """The sightings a healthy read of ``node`` ends: those of its object and boot not yet cleared."""
    return [s for s in sightings if s.same_episode_object(node) and s.cleared_at is None]


def episode_ended_at(sightings: Iterable[Sighting], node: LiveNode) -> datetime | None:
    """When NodeHeal last saw the live node's object and boot wholly healthy (None: never)."""
    return max(
        (s.cleared_at for s in sightings if s.same_episode_object(node) and s.cleared_at is not None),
        default=None,
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
