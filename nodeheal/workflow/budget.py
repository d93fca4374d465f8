"""Budgets and the circuit breaker: pure functions over one cluster's admission state.

The admission state of a cluster is one ledger item (see nodeheal.aws.ledger) written with an
optimistic-concurrency condition, so the check-then-admit below is atomic across concurrent
executions: two nodes faulting in the same second cannot both take the last slot.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from nodeheal.config import BudgetSettings
from nodeheal.timestamps import format_timestamp, parse_timestamp

HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class InFlight:
    execution: str
    pool: str
    started_at: datetime
    #: A slot whose execution crashed without recording frees itself at this time (the lock TTL).
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class NodeStamp:
    node: str
    at: datetime


@dataclass(frozen=True, slots=True)
class BreakerState:
    open: bool = False
    opened_at: datetime | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ClusterAdmissionState:
    cluster: str
    #: Optimistic-concurrency version of the ledger item; 0 when the item does not exist yet.
    version: int = 0
    in_flight: Mapping[str, InFlight] = field(default_factory=dict)
    recent_starts: tuple[NodeStamp, ...] = ()
    recent_refusals: tuple[NodeStamp, ...] = ()
    breaker: BreakerState = field(default_factory=BreakerState)
    #: Set by a person (``nodeheal pause``): admit nothing new until resumed.
    paused: bool = False
    paused_reason: str = ""

    def pruned(self, now: datetime, settings: BudgetSettings) -> ClusterAdmissionState:
        """Drop expired in-flight slots and stamps older than any window that reads them."""
        refusal_window = timedelta(minutes=settings.breaker_window_minutes)
        return replace(
            self,
            in_flight={n: s for n, s in self.in_flight.items() if s.expires_at > now},
            recent_starts=tuple(s for s in self.recent_starts if now - s.at < HOUR),
            recent_refusals=tuple(s for s in self.recent_refusals if now - s.at < refusal_window),
        )

    def to_item(self) -> dict[str, Any]:
        return {
            "inFlight": {
                node: {
                    "execution": slot.execution,
                    "pool": slot.pool,
                    "startedAt": format_timestamp(slot.started_at, millis=True),
                    "expiresAt": format_timestamp(slot.expires_at, millis=True),
                }
                for node, slot in self.in_flight.items()
            },
            "recentStarts": [_stamp_to_item(s) for s in self.recent_starts],
            "recentRefusals": [_stamp_to_item(s) for s in self.recent_refusals],
            "breaker": {
                "open": self.breaker.open,
                "openedAt": (
                    format_timestamp(self.breaker.opened_at, millis=True) if self.breaker.opened_at else ""
                ),
                "reason": self.breaker.reason,
            },
            "paused": self.paused,
            "pausedReason": self.paused_reason,
        }

    @classmethod
    def from_item(cls, cluster: str, version: int, item: Mapping[str, Any]) -> ClusterAdmissionState:
        breaker = item.get("breaker") or {}
        return cls(
            cluster=cluster,
            version=version,
            in_flight={
                str(node): InFlight(
                    execution=str(slot["execution"]),
                    pool=str(slot.get("pool", "")),
                    started_at=parse_timestamp(slot["startedAt"], "inFlight.startedAt"),
                    expires_at=parse_timestamp(slot["expiresAt"], "inFlight.expiresAt"),
                )
                for node, slot in (item.get("inFlight") or {}).items()
            },
            recent_starts=tuple(_stamp_from_item(s) for s in item.get("recentStarts") or []),
            recent_refusals=tuple(_stamp_from_item(s) for s in item.get("recentRefusals") or []),
            breaker=BreakerState(
                open=bool(breaker.get("open", False)),
                opened_at=(
                    parse_timestamp(breaker["openedAt"], "breaker.openedAt")
                    if breaker.get("openedAt")
                    else None
                ),
                reason=str(breaker.get("reason", "")),
            ),
            paused=bool(item.get("paused", False)),
            paused_reason=str(item.get("pausedReason", "")),
        )


def _stamp_to_item(stamp: NodeStamp) -> dict[str, str]:
    return {"node": stamp.node, "at": format_timestamp(stamp.at, millis=True)}


def _stamp_from_item(raw: Mapping[str, Any]) -> NodeStamp:
    return NodeStamp(node=str(raw["node"]), at=parse_timestamp(raw["at"], "stamp.at"))


@dataclass(frozen=True, slots=True)
class PoolHealth:
    """What the live cluster says about the node's pool at admission time."""

    pool: str
    size: int
    #: Other nodes of the pool already cordoned by NodeHeal (being remediated or left for a person).
    unhealthy_nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    admitted: bool
    reason: str
    state: ClusterAdmissionState
    breaker_opened: bool = False


def admit(
    state: ClusterAdmissionState,
    *,
    node: str,
    execution: str,
    pool: PoolHealth | Callable[[], PoolHealth],
    settings: BudgetSettings,
    lock_ttl: timedelta,
    now: datetime,
) -> BudgetVerdict:
    """Admit ``node`` into a remediation slot or refuse it, returning the state to write back.

    Idempotent for a retried admit of the same execution: its existing slot is kept, not doubled.
    ``pool`` may be a function reading the pool's health; it is called only when the verdict
    depends on it, i.e. after the pause, the breaker, maxInFlight and maxPerHour all let the node
    through. In a storm almost every admission is refused on those alone, and reading the pool
    means listing every node of it from the API server.
    """
    state = state.pruned(now, settings)
    existing = state.in_flight.get(node)
    if existing is not None and existing.execution == execution:
        return BudgetVerdict(True, "already admitted (retried step)", state)
    if state.paused:
        reason = "NodeHeal is paused" + (f" ({state.paused_reason})" if state.paused_reason else "")
        return BudgetVerdict(False, f"{reason}; resume with `nodeheal resume`", state)
    if state.breaker.open:
        return BudgetVerdict(
            False,
            f"circuit breaker is open since {_when(state.breaker.opened_at)} ({state.breaker.reason}); "
            "a person must reset it with `nodeheal breaker reset`",
            state,
        )
    read_pool = _read_once(pool)
    refusal = _budget_refusal(state, node=node, pool=read_pool, settings=settings)
    if refusal is None:
        admitted = replace(
            state,
            in_flight={
                **state.in_flight,
                node: InFlight(
                    execution=execution, pool=read_pool().pool, started_at=now, expires_at=now + lock_ttl
                ),
            },
            recent_starts=(*state.recent_starts, NodeStamp(node, now)),
        )
        return BudgetVerdict(True, "within budget", admitted)
    refused = replace(state, recent_refusals=(*state.recent_refusals, NodeStamp(node, now)))
    refusals = len({stamp.node for stamp in refused.recent_refusals})
    if refusals >= settings.breaker_trip_refusals:
        reason = (
            f"{refusals} nodes refused by the budget within {settings.breaker_window_minutes} min: "
            "this looks like a fleet-wide event, not a bad GPU"
        )
        refused = replace(refused, breaker=BreakerState(open=True, opened_at=now, reason=reason))
        return BudgetVerdict(
            False, f"{refusal}; circuit breaker opened: {reason}", refused, breaker_opened=True
        )
    return BudgetVerdict(False, refusal, refused)


def release(state: ClusterAdmissionState, *, node: str, execution: str) -> ClusterAdmissionState | None:
    """The state without this execution's slot, or None when there is nothing to release."""
    slot = state.in_flight.get(node)
    if slot is None or slot.execution != execution:
        return None
    return replace(state, in_flight={n: s for n, s in state.in_flight.items() if n != node})


def closed_breaker(state: ClusterAdmissionState) -> ClusterAdmissionState | None:
    """A person's ``nodeheal breaker reset``: the state with the breaker closed (None if it was)."""
    if not state.breaker.open:
        return None
    # The refusals that tripped it go too, or the next refusal would trip it again at once.
    return replace(state, breaker=BreakerState(), recent_refusals=())


def paused(state: ClusterAdmissionState, reason: str) -> ClusterAdmissionState | None:
    """A person's ``nodeheal pause``: the paused state (None if already paused for this reason)."""
    if state.paused and state.paused_reason == reason:
        return None
    return replace(state, paused=True, paused_reason=reason)


def resumed(state: ClusterAdmissionState) -> ClusterAdmissionState | None:
    """A person's ``nodeheal resume`` (None if it was not paused)."""
    if not state.paused:
        return None
    return replace(state, paused=False, paused_reason="")


def pool_allowance(pool: PoolHealth, settings: BudgetSettings) -> int:
    """Nodes of the pool that may be unhealthy at once: the share, but never below the floor."""
    return max(settings.min_pool_allowance, math.floor(pool.size * settings.max_unhealthy_pool_share))


def _read_once(pool: PoolHealth | Callable[[], PoolHealth]) -> Callable[[], PoolHealth]:
    if isinstance(pool, PoolHealth):
        return lambda: pool
    read: list[PoolHealth] = []

    def once() -> PoolHealth:
        if not read:
            read.append(pool())
        return read[0]

    return once


def _budget_refusal(
    state: ClusterAdmissionState, *, node: str, pool: Callable[[], PoolHealth], settings: BudgetSettings
) -> str | None:
    in_flight = {n for n in state.in_flight if n != node}
    if len(in_flight) >= settings.max_in_flight:
        return (
            f"budget: {len(in_flight)} remediations already in flight (maxInFlight {settings.max_in_flight})"
        )
    starts = len([s for s in state.recent_starts if s.node != node])
    if starts >= settings.max_per_hour:
        return f"budget: {starts} remediations started in the last hour (maxPerHour {settings.max_per_hour})"
    health = pool()
    pool_unhealthy = (
        set(health.unhealthy_nodes) | {n for n, slot in state.in_flight.items() if slot.pool == health.pool}
    ) - {node}
    allowance = pool_allowance(health, settings)
    if len(pool_unhealthy) + 1 > allowance:
        return (
            f"budget: pool {health.pool or '(none)'} has {len(pool_unhealthy)} of {health.size} nodes "
            f"unhealthy; allowance is {allowance} "
            f"(maxUnhealthyPoolShare {settings.max_unhealthy_pool_share:g}, "
            f"minPoolAllowance {settings.min_pool_allowance})"
        )
    return None


def _when(value: datetime | None) -> str:
    return format_timestamp(value) if value else "an unknown time"
