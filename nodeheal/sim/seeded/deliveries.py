"""An event on its way from the simulated bus to a function: what the scheduler delivers, and
which deliveries go to the counting function rather than ingest. Its own module so the Warning
Event stream (``warning_events``) and the scheduler (``schedule``) share it without importing each
other."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: The kinds of a Node Event on its way to the counting function (docs/architecture.md, D22).
NODE_EVENT_DELIVERIES = frozenset({"node-event", "node-event-duplicate"})


@dataclass
class Delivery:
    """An event on its way from the bus to ingest, or a Node Event to the counting function."""

    at: datetime
    envelope: dict[str, Any]
    #: genuine | duplicate | replayed | forged | foreign | future-dated | stale | oversized | resync,
    #: or a Node Event on its way to the counting function (:data:`NODE_EVENT_DELIVERIES`)
    kind: str
    original: str = ""  # for duplicates and replays: the execution name of the original, if known
