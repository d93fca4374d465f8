from __future__ import annotations

from datetime import datetime, timedelta

from nodeheal.config import BudgetSettings
from nodeheal.workflow import budget
from nodeheal.workflow.budget import ClusterAdmissionState, PoolHealth
from tests.clock import NOW

TTL = timedelta(hours=2)


def pool(size: int = 20, unhealthy: frozenset[str] = frozenset(), name: str = "gpu") -> PoolHealth:
    return PoolHealth(pool=name, size=size, unhealthy_nodes=unhealthy)


def admit(
    state: ClusterAdmissionState,
    node: str,
    settings: BudgetSettings,
    *,
    at: datetime = NOW,
    health: PoolHealth | None = None,
) -> budget.BudgetVerdict:
    return budget.admit(
        state,
        node=node,
        execution=f"exec-{node}",
        pool=health or pool(),
        settings=settings,
        lock_ttl=TTL,
        now=at,
    )


def test_admits_within_budget_and_records_the_slot() -> None:
    verdict = admit(ClusterAdmissionState("c"), "n1", BudgetSettings())
    assert verdict.admitted
    assert verdict.state.in_flight["n1"].execution == "exec-n1"
    assert [s.node for s in verdict.state.recent_starts] == ["n1"]


def test_max_in_flight_refuses_the_next_node() -> None:
    settings = BudgetSettings(max_in_flight=2, breaker_trip_refusals=10)
    state = ClusterAdmissionState("c")
    for node in ("n1", "n2"):
        state = admit(state, node, settings).state
    verdict = admit(state, "n3", settings)
    assert not verdict.admitted
    assert "maxInFlight 2" in verdict.reason
    assert "n3" not in verdict.state.in_flight


def test_max_per_hour_is_a_sliding_window() -> None:
    settings = BudgetSettings(max_in_flight=10, max_per_hour=2, breaker_trip_refusals=10)
    state = ClusterAdmissionState("c")
    for node in ("n1", "n2"):
        state = admit(state, node, settings).state
        state = budget.release(state, node=node, execution=f"exec-{node}") or state
    assert not admit(state, "n3", settings, at=NOW + timedelta(minutes=59)).admitted
    assert admit(state, "n3", settings, at=NOW + timedelta(minutes=61)).admitted


def test_pool_share_with_a_floor_for_small_pools() -> None:
    settings = BudgetSettings(
        max_in_flight=10,
        max_per_hour=10,
        max_unhealthy_pool_share=0.1,
        min_pool_allowance=1,
        breaker_trip_refusals=10,
    )
    # A pool of 3: 10% is 0 nodes, but the floor lets one heal.
    small = pool(size=3)
    assert admit(ClusterAdmissionState("c"), "n1", settings, health=small).admitted
    already_bad = pool(size=3, unhealthy=frozenset({"n2"}))
    verdict = admit(ClusterAdmissionState("c"), "n1", settings, health=already_bad)
    assert not verdict.admitted and "allowance is 1" in verdict.reason
    # A pool of 40: 10% is 4.
    big = pool(size=40, unhealthy=frozenset({"a", "b", "c"}))
    assert admit(ClusterAdmissionState("c"), "n1", settings, health=big).admitted
    assert not admit(
        ClusterAdmissionState("c"),
        "n1",
        settings,
        health=pool(size=40, unhealthy=frozenset({"a", "b", "c", "d"})),
    ).admitted


def test_in_flight_slots_of_the_same_pool_count_towards_its_share() -> None:
    settings = BudgetSettings(
        max_in_flight=10,
        max_per_hour=10,
        max_unhealthy_pool_share=0.0,
        min_pool_allowance=1,
        breaker_trip_refusals=10,
    )
    state = admit(ClusterAdmissionState("c"), "n1", settings).state
    assert not admit(state, "n2", settings).admitted
    other_pool = pool(name="cpu")
    assert admit(state, "n2", settings, health=other_pool).admitted


def test_retried_admission_of_the_same_execution_is_idempotent() -> None:
    settings = BudgetSettings(max_in_flight=1)
    state = admit(ClusterAdmissionState("c"), "n1", settings).state
    again = admit(state, "n1", settings)
    assert again.admitted and len(again.state.recent_starts) == 1


def test_refusals_trip_the_breaker_which_stays_open() -> None:
    settings = BudgetSettings(max_in_flight=1, breaker_trip_refusals=2, breaker_window_minutes=30)
    state = admit(ClusterAdmissionState("c"), "n1", settings).state
    first = admit(state, "n2", settings)
    assert not first.admitted and not first.breaker_opened
    second = admit(first.state, "n3", settings)
    assert second.breaker_opened and second.state.breaker.open
    released = budget.release(second.state, node="n1", execution="exec-n1")
    assert released is not None
    # Budget is free again, but the breaker needs a person.
    later = admit(released, "n4", settings, at=NOW + timedelta(hours=5))
    assert not later.admitted and "circuit breaker is open" in later.reason


def test_expired_slots_free_themselves() -> None:
    settings = BudgetSettings(max_in_flight=1, breaker_trip_refusals=10)
    state = admit(ClusterAdmissionState("c"), "n1", settings).state
    assert admit(state, "n2", settings, at=NOW + TTL + timedelta(seconds=1)).admitted


def test_pause_refuses_everything() -> None:
    state = ClusterAdmissionState("c", paused=True, paused_reason="maintenance window")
    verdict = admit(state, "n1", BudgetSettings())
    assert not verdict.admitted and "maintenance window" in verdict.reason


def test_release_only_frees_this_executions_slot() -> None:
    state = admit(ClusterAdmissionState("c"), "n1", BudgetSettings()).state
    assert budget.release(state, node="n1", execution="someone-else") is None
    released = budget.release(state, node="n1", execution="exec-n1")
    assert released is not None and "n1" not in released.in_flight


def test_state_round_trips_through_the_ledger_item() -> None:
    settings = BudgetSettings(max_in_flight=1, breaker_trip_refusals=1)
    state = admit(admit(ClusterAdmissionState("c"), "n1", settings).state, "n2", settings).state
    assert state.breaker.open
    again = ClusterAdmissionState.from_item("c", 7, state.to_item())
    assert again.in_flight == state.in_flight
    assert again.recent_refusals == state.recent_refusals
    assert again.breaker == state.breaker and again.version == 7


class PoolReader:
    """The pool's health as a read that is counted (admission lists the pool's nodes for it)."""

    def __init__(self, health: PoolHealth) -> None:
        self.health = health
        self.reads = 0

    def __call__(self) -> PoolHealth:
        self.reads += 1
        return self.health


def admit_reading(
    state: ClusterAdmissionState, node: str, settings: BudgetSettings, reader: PoolReader
) -> budget.BudgetVerdict:
    return budget.admit(
        state, node=node, execution=f"exec-{node}", pool=reader, settings=settings, lock_ttl=TTL, now=NOW
    )


def test_the_pool_is_read_once_and_only_when_the_verdict_depends_on_it() -> None:
    settings = BudgetSettings(max_in_flight=1, breaker_trip_refusals=2)
    reader = PoolReader(pool(size=20))
    first = admit_reading(ClusterAdmissionState("c"), "n1", settings, reader)
    assert first.admitted and first.state.in_flight["n1"].pool == "gpu"
    assert reader.reads == 1
    # A storm: refused on maxInFlight, then on the open breaker, without listing the pool again.
    refused = admit_reading(first.state, "n2", settings, reader)
    tripped = admit_reading(refused.state, "n3", settings, reader)
    after = admit_reading(tripped.state, "n4", settings, reader)
    assert not refused.admitted and tripped.breaker_opened and not after.admitted
    assert admit_reading(first.state, "n1", settings, reader).admitted  # a retried step
    paused = ClusterAdmissionState("c", paused=True)
    assert not admit_reading(paused, "n5", settings, reader).admitted
    assert reader.reads == 1


def test_a_pool_read_refuses_as_a_pool_given_outright() -> None:
    settings = BudgetSettings(max_unhealthy_pool_share=0.0, min_pool_allowance=1)
    full = pool(size=10, unhealthy=frozenset({"n9"}))
    read = admit_reading(ClusterAdmissionState("c"), "n1", settings, PoolReader(full))
    given = admit(ClusterAdmissionState("c"), "n1", settings, health=full)
    assert not read.admitted and read.reason == given.reason
    assert "allowance is 1" in read.reason
