"""What admit decided: the verdict the state machine branches on ("Admitted?") and the admission
it keeps at ``$.admission``. Apart from :mod:`nodeheal.workflow.admission`, which decides it, so
that the steps that read it (the Events it tells, the record) need not import the deciding."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal.conditions import Condition
from nodeheal.policy.decide import Decision
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.state import AdmittedNode

# Verdicts the state machine branches on ("Admitted?").
PROCEED = "proceed"
CONFIRM = "confirm"
#: Another execution holds this node's lock and this one may not preempt it: wait, then re-admit.
WAIT = "wait"
STOP = "stop"


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: str
    decision: Decision | None
    node: AdmittedNode | None
    condition: Condition | None
    at: datetime
    wait_seconds: int = 0
    lock_held: bool = False
    #: Why admit stopped, or what the budget said; shown in the record.
    note: str = ""
    #: The action was lowered to alert by a budget, the breaker, a pause or a lock held too long.
    refused: bool = False
    breaker_opened: bool = False
    #: When this execution first found the lock held by another (it waits at most the lock TTL).
    waiting_since: datetime | None = None
    #: The execution this one took the lock from (docs/architecture.md, D2), if it preempted one.
    preempted: str = ""
    #: The holder this execution preempted or contended (``{"execution", "conditionType"}``): if
    #: this execution's own fault is gone before it acts, it takes over that holder's fault (D2).
    displaced: Mapping[str, str] | None = None

    def to_json(self, event_message: str | None = None) -> dict[str, Any]:
        """The result stored at ``$.admission``. The live condition's message is left out when it
        is the event's, which ``$.event`` already holds (D17: no step copies a message again);
        a message that changed since the event is new and is kept (bounded, as read)."""
        condition = self.condition.to_api() if self.condition else None
        if condition is not None and condition["message"] == event_message:
            del condition["message"]
        return {
            "verdict": self.verdict,
            "decision": self.decision.to_json() if self.decision else None,
            "node": self.node.to_json() if self.node else None,
            "condition": condition,
            "waitSeconds": self.wait_seconds,
            "lockHeld": self.lock_held,
            "note": self.note,
            "refused": self.refused,
            "breakerOpened": self.breaker_opened,
            "waitingSince": format_timestamp(self.waiting_since, millis=True) if self.waiting_since else "",
            "preempted": self.preempted,
            "displaced": dict(self.displaced) if self.displaced else None,
            "at": format_timestamp(self.at, millis=True),
        }
