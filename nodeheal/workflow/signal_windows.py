"""Sliding windows of counted signals, per instance: what an Event adds, and when a window crosses.

One window per instance and signal (docs/architecture.md, D1: the instance, never the node name).
It keeps, per reporting source, the times of the most recent occurrences, at most the rule's
``count`` of them (that is all a crossing or Admit's re-check ever needs), the highest ``count``
seen of each recent Event, and where the last crossing ended. So an item stays small however
noisy the node: at most :data:`MAX_SOURCES` x ``count`` times and :data:`MAX_EVENTS_REMEMBERED`
Event counters.

What counts as an occurrence follows client-go's legacy event recorder, which NPD and the node
monitoring agent use (``tools/record/events_cache.go``), so ``series`` is never set:

* a repeat of one message is a PATCH of the same Event with ``count`` + 1, so an increase of an
  Event's ``count`` is that many occurrences. The ones between two updates happened after the
  earlier ``lastTimestamp``, and they are placed there, at the earliest they can have been: a
  window never holds an occurrence it may not hold;
* from the 10th distinct message with the same source, object, type and reason within 10
  minutes, the recorder merges them into one Event whose message is the newest one after
  ``(combined from similar events): ``. Its ``count`` then rises for any of the merged messages,
  not only the newest, so an update of an aggregated Event counts once, for the signal of the
  newest message;
* an Event seen first with ``count`` above 1 (the exporter started after it, or its first update
  was filtered) counts all of it only when its ``firstTimestamp`` is inside the window, and once
  otherwise: only its last occurrence is known to be recent.

Two detectors reporting one fault (NPD's log monitor and the node monitoring agent both read the
kernel's Xid line) must count once (D11). Each source's occurrences are kept apart and a window
counts the largest of them: both see every occurrence, so the largest is the truth and the sum
would be twice it. Conditions never count: an NPD condition that is already True does not
transition again, and the agent joins the messages of a condition that stays bad.

A window belongs to one boot of the instance (D19): an Event carrying another boot ID than the
window's starts the window again, and occurrences older than the first one seen on the new boot
are not counted into it (they may be from before the reboot, reported late).

A window crosses when its occurrences after the previous crossing reach the rule's count within
``windowHours``. The crossing names the oldest of those occurrences as the window's start: the
execution's name is built from it, so a repeated delivery of the Event that crossed, or an
invocation that died between the write and the start, starts the same execution again, and Step
Functions refuses the duplicate. After a crossing the next one needs ``count`` new occurrences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeheal.counted_signals import CountedRule, unaggregated
from nodeheal.timestamps import format_timestamp

#: Sources of one signal kept per window (NPD's monitor, the node monitoring agent, and room).
MAX_SOURCES = 4
#: Event counters kept per window: the most recently updated Events of the signal.
MAX_EVENTS_REMEMBERED = 32


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def _moment(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


@dataclass(frozen=True, slots=True)
class EventUpdate:
    """What one shipped Event update says about its occurrences."""

    uid: str
    source: str
    count: int
    message: str
    first_timestamp: datetime | None
    last_timestamp: datetime


@dataclass(frozen=True, slots=True)
class Crossing:
    """A window that reached its count: what the execution it starts carries."""

    signal: str
    instance_id: str
    boot_id: str
    window_start: datetime
    crossed_at: datetime
    count: int
    rule: CountedRule

    def to_json(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "instanceId": self.instance_id,
            "bootId": self.boot_id,
            "windowStart": format_timestamp(self.window_start, millis=True),
            "crossedAt": format_timestamp(self.crossed_at, millis=True),
            "count": self.count,
            "threshold": self.rule.count,
            "windowHours": self.rule.window_hours,
            "action": self.rule.action.value,
        }


@dataclass(frozen=True, slots=True)
class SignalWindow:
    """The ledger's window item for one instance and signal (``nodeheal.aws.ledger``)."""

    cluster: str
    instance_id: str
    signal: str
    boot_id: str = ""
    #: Occurrences before this time are not counted into this boot's window (see the module doc).
    boot_floor: float = 0.0
    #: source -> occurrence times (epoch seconds), oldest first, at most the rule's count.
    occurrences: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: Event uid -> (highest count seen, lastTimestamp of that count).
    events: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    #: The newest occurrence of the last crossing: the next crossing counts only later ones.
    crossed_through: float = 0.0
    #: Optimistic-concurrency version of the stored item (0: not stored yet).
    version: int = 0

    def count_since(self, since: float) -> int:
        """Occurrences at or after ``since``, counted once across sources (the largest source's)."""
        return max((sum(1 for t in times if t >= since) for times in self.occurrences.values()), default=0)

    def newest(self) -> float:
        return max((times[-1] for times in self.occurrences.values() if times), default=0.0)

    def expires_at(self, rule: CountedRule) -> datetime:
        """When nothing in the window can count any more: its newest occurrence plus the window."""
        newest = self.newest() or self.boot_floor
        return _moment(newest) + timedelta(hours=rule.window_hours)


def occurrences_of(
    update: EventUpdate, window: SignalWindow, rule: CountedRule, now: datetime
) -> tuple[float, ...]:
    """The occurrence times ``update`` adds to ``window`` (empty for a repeat delivery, a replay
    or an update that raised no count)."""
    last = _epoch(min(update.last_timestamp, now))
    _, aggregated = unaggregated(update.message)
    seen = window.events.get(update.uid)
    if seen is not None:
        added = update.count - seen[0]
        if added <= 0:
            return ()
        if aggregated:
            return (last,)
        return (seen[1],) * (added - 1) + (last,)
    if update.count <= 1 or aggregated:
        return (last,)
    window_start = _epoch(now - timedelta(hours=rule.window_hours))
    first = _epoch(update.first_timestamp) if update.first_timestamp is not None else 0.0
    if first < window_start:
        return (last,)
    return (first,) * (update.count - 1) + (last,)


def observe(
    window: SignalWindow,
    update: EventUpdate,
    *,
    boot_id: str,
    rule: CountedRule,
    now: datetime,
) -> SignalWindow:
    """``window`` with ``update`` counted in: a new boot starts it again, the occurrences are added
    per source and cut to the rule's count, and the Event's count is remembered."""
    if boot_id and window.boot_id and boot_id != window.boot_id:
        window = SignalWindow(
            cluster=window.cluster,
            instance_id=window.instance_id,
            signal=window.signal,
            boot_id=boot_id,
            boot_floor=_epoch(min(update.last_timestamp, now)),
            version=window.version,
        )
    elif boot_id and not window.boot_id:
        window = replace(window, boot_id=boot_id)
    added = tuple(t for t in occurrences_of(update, window, rule, now) if t >= window.boot_floor)
    events = dict(window.events)
    previous = events.pop(update.uid, None)
    if previous is None or update.count > previous[0]:
        events[update.uid] = (update.count, _epoch(min(update.last_timestamp, now)))
    else:
        events[update.uid] = previous
    while len(events) > MAX_EVENTS_REMEMBERED:
        events.pop(next(iter(events)))
    occurrences = dict(window.occurrences)
    if added:
        source = update.source or "unknown"
        kept = sorted(occurrences.pop(source, ()) + added)[-max(rule.count, 1) :]
        occurrences[source] = tuple(kept)
        while len(occurrences) > MAX_SOURCES:
            stalest = min(occurrences, key=lambda s: occurrences[s][-1] if occurrences[s] else 0.0)
            occurrences.pop(stalest)
    return replace(window, occurrences=occurrences, events=events)


def crossing(window: SignalWindow, rule: CountedRule, now: datetime) -> Crossing | None:
    """The crossing ``window`` makes now, or None: ``rule.count`` occurrences after the previous
    crossing and within the last ``windowHours``, counted in the source that saw the most."""
    lower = _epoch(now - timedelta(hours=rule.window_hours))
    best: Sequence[float] = ()
    for times in window.occurrences.values():
        counted = [t for t in times if t > window.crossed_through and t >= lower]
        if len(counted) > len(best):
            best = counted
    if len(best) < rule.count:
        return None
    crossing_set = sorted(best)[-rule.count :]
    return Crossing(
        signal=window.signal,
        instance_id=window.instance_id,
        boot_id=window.boot_id,
        window_start=_moment(crossing_set[0]),
        crossed_at=_moment(crossing_set[-1]),
        count=len(best),
        rule=rule,
    )


def crossed(window: SignalWindow, at: Crossing) -> SignalWindow:
    """``window`` after ``at`` started its execution: later crossings need new occurrences."""
    return replace(window, crossed_through=max(window.crossed_through, _epoch(at.crossed_at)))


def still_over(window: SignalWindow | None, rule: CountedRule, *, boot_id: str, now: datetime) -> int | None:
    """Admit's and the guard's re-check of a counted execution: the occurrences within the last
    ``windowHours`` on the live boot when they still reach the rule's count, else None."""
    if window is None:
        return None
    if boot_id and window.boot_id and boot_id != window.boot_id:
        return None  # the instance booted again: that ends the window (D19)
    count = window.count_since(_epoch(now - timedelta(hours=rule.window_hours)))
    return count if count >= rule.count else None


def window_to_item(window: SignalWindow) -> dict[str, Any]:
    """The window's attributes as the ledger stores them (JSON types only)."""
    return {
        "cluster": window.cluster,
        "instanceId": window.instance_id,
        "signal": window.signal,
        "bootId": window.boot_id,
        "bootFloor": window.boot_floor,
        "occurrences": {source: list(times) for source, times in window.occurrences.items()},
        "events": {uid: [count, at] for uid, (count, at) in window.events.items()},
        "crossedThrough": window.crossed_through,
        "version": window.version,
    }


def window_from_item(item: Mapping[str, Any]) -> SignalWindow:
    occurrences_raw = item.get("occurrences") or {}
    events_raw = item.get("events") or {}
    return SignalWindow(
        cluster=str(item.get("cluster", "")),
        instance_id=str(item.get("instanceId", "")),
        signal=str(item.get("signal", "")),
        boot_id=str(item.get("bootId", "")),
        boot_floor=float(item.get("bootFloor", 0) or 0),
        occurrences={
            str(source): tuple(sorted(float(t) for t in times)) for source, times in occurrences_raw.items()
        },
        events={str(uid): (int(value[0]), float(value[1])) for uid, value in events_raw.items()},
        crossed_through=float(item.get("crossedThrough", 0) or 0),
        version=int(item.get("version", 0) or 0),
    )
