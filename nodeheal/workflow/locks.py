"""The per-node lock as the workflow reasons about it: who holds it, and who may take it (D2).

At most one execution mutates a node at a time, and no bad condition is dropped because another
execution holds the lock: a newcomer preempts the holder when its decision is more severe, or when
the holder has not mutated the node yet and the newcomer would act sooner; otherwise it waits
behind the holder and is re-evaluated against the live node when the holder ends. The ledger makes
each of these one conditional write (nodeheal.aws.ledger); the rule itself lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nodeheal.actions import Action


@dataclass(frozen=True, slots=True)
class LockClaim:
    """What an execution tells the lock about itself, so a newcomer can decide to preempt (D2)."""

    #: The node's name, for people reading the item (the key is the instance).
    node: str
    condition_type: str
    #: The action the holder will take; its cost is the severity a newcomer compares against.
    action: Action
    #: When the holder will first mutate the node (end of its confirmation wait).
    acts_at: datetime


@dataclass(frozen=True, slots=True)
class LockView:
    execution: str
    expires_at: datetime
    node: str = ""
    condition_type: str = ""
    action: Action = Action.NONE
    acts_at: datetime | None = None
    #: The holder has claimed at least one mutation of the node (it is past confirming).
    mutated: bool = False
    #: A mutating step of the holder may still be running until then (claimed, not yet returned).
    busy_until: datetime | None = None
    #: A more severe execution waits to take the node over (it found the holder's step running):
    #: the holder stops before its next mutation and leaves the node to it (docs/architecture.md, D2).
    contender: str = ""
    contender_action: Action = Action.NONE
    #: The contender comes back by then (its next admit renews the mark or preempts the lock).
    #: A mark past it is stale: the contender ended without taking over (aborted, timed out,
    #: its own fault cleared before it could withdraw), and the holder goes on with its fault.
    contender_until: datetime | None = None
    #: The execution whose lock ran out when this one took the node, and its condition type: kept
    #: on the lock, so a re-run of admit still knows whose fault it may have to finish (D2).
    lapsed_from: str = ""
    lapsed_condition_type: str = ""

    def lapsed_view(self) -> LockView | None:
        """The lock that ran out when this one was taken, as far as the lock remembers it."""
        if not self.lapsed_from:
            return None
        return LockView(
            execution=self.lapsed_from, expires_at=self.expires_at, condition_type=self.lapsed_condition_type
        )

    def contended(self, now: datetime) -> bool:
        """A contender mark is on the lock and still fresh. A mark without an expiry (written
        before contenders carried one) counts as fresh: the holder waits, it never drops it."""
        if not self.contender:
            return False
        return self.contender_until is None or self.contender_until >= now


def may_preempt(claim: LockClaim, holder: LockView, now: datetime) -> tuple[bool, bool]:
    """(may preempt, only if the holder has still not mutated the node) for ``claim`` over ``holder``.

    Severity preempts only a fault that is confirmed (it acts now): one still inside its
    confirmation time may yet clear, and the holder it pushed aside would have been dropped for
    nothing. It waits behind the holder, confirming, and preempts once confirmed (D2).
    """
    if claim.action.cost > holder.action.cost and claim.acts_at <= now:
        return True, False
    acts_sooner = not holder.mutated and holder.acts_at is not None and claim.acts_at < holder.acts_at
    return acts_sooner, True
