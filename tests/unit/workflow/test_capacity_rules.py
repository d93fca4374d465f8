"""Replace with capacity in mind (nodeheal.workflow.capacity, D12): a Capacity Block that ends soon
defers the replacement, a scarce pool keeps rebooting, a reservation says where the replacement
lands; and whatever capacity allows, the planned action is the fault's."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeheal.actions import Action, Mode
from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings, ReplaceSettings
from nodeheal.errors import InvalidEventError
from nodeheal.policy.decide import Decision, NodeHistory, decide
from nodeheal.timestamps import format_timestamp
from nodeheal.workflow.capacity import (
    KARPENTER_BLOCK_DRAIN_LEAD,
    REASON_BLOCK_ENDING,
    REASON_SCARCE_POOL,
    CapacityContext,
    CapacityVerdict,
    LandingReservation,
    revise_for_capacity,
)
from tests.clock import NOW
from tests.unit.policy.helpers import npd

XID_79 = npd("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
XID_48 = npd(
    "NVRM: Xid (PCI:0000:c9:00): 48, pid=18812, name=train.py, An uncorrectable double bit error (DBE)"
)
XID_13 = npd("NVRM: Xid (PCI:0000:cb:00): 13, pid=1, name=python, Graphics SM Warp Exception")

SCARCE = "p5-scarce"
PLENTY = "g6e-plenty"
REPLACE = ReplaceSettings(min_block_remaining_minutes=60, launch_minutes=20, scarce_pools=(SCARCE,))
#: The drain's worst case the caller passes (under the default drain settings it is longer: the
#: rule only adds it, so any value shows the boundary).
DRAIN_SECONDS = 1_230
#: Rebooted three hours ago for a GPU fault: a reboot now escalates to replace.
REBOOTED = NodeHistory(attempts_in_window=1, last_reboot_at=NOW - timedelta(hours=3))

ON_DEMAND = CapacityContext(instance_type="p5.48xlarge", image_id="ami-0gpu")
SPOT = CapacityContext(lifecycle="spot", instance_type="g6e.48xlarge")
ODCR = CapacityContext(
    reservation_id="cr-0odcr",
    reservation_type="default",
    reservation_end=NOW + timedelta(minutes=5),
    instance_type="p5.48xlarge",
)


def block(end: datetime | None, instance_type: str = "p5.48xlarge") -> CapacityContext:
    return CapacityContext(
        lifecycle="capacity-block",
        reservation_id="cr-0block",
        reservation_type="capacity-block",
        reservation_end=end,
        instance_type=instance_type,
    )


def decision_for(
    condition: Condition = XID_79,
    *,
    pool: str | None = PLENTY,
    history: NodeHistory | None = None,
    mode: Mode = Mode.FULL,
) -> Decision:
    return decide(
        condition,
        labels={"karpenter.sh/nodepool": pool} if pool else {},
        history=history or NodeHistory(),
        policy=PolicySettings(),
        mode=mode,
        now=NOW,
    )


def revise(
    decision: Decision,
    context: CapacityContext,
    *,
    pool: str | None = PLENTY,
    replace: ReplaceSettings = REPLACE,
    drain_seconds: int = DRAIN_SECONDS,
) -> CapacityVerdict:
    return revise_for_capacity(
        decision, context, pool=pool, replace=replace, drain_worst_case_seconds=drain_seconds, now=NOW
    )


def last_useful_end(
    lead_minutes: int, replace: ReplaceSettings = REPLACE, drain_seconds: int = DRAIN_SECONDS
) -> datetime:
    """The earliest block end at which a replacement decided at NOW still gets its minimum life:
    drain, launch and the minimum, then Karpenter's drain and EC2's termination lead before the end."""
    return (
        NOW
        + timedelta(seconds=drain_seconds)
        + timedelta(minutes=replace.launch_minutes + replace.min_block_remaining_minutes)
        + KARPENTER_BLOCK_DRAIN_LEAD
        + timedelta(minutes=lead_minutes)
    )


# Rule 1: a Capacity Block that ends soon.
def test_exactly_the_minimum_remaining_is_enough_to_replace() -> None:
    end = last_useful_end(30)
    verdict = revise(decision_for(), block(end))
    assert (verdict.action, verdict.planned_action, verdict.deferred_for_capacity) == (
        Action.REPLACE,
        Action.REPLACE,
        False,
    )
    assert verdict.capacity_reason == ""
    assert verdict.block_end == end
    assert "leaving 60 min, at least replace.minBlockRemainingMinutes=60" in verdict.notes[0]


def test_one_minute_under_the_minimum_defers_the_replacement_to_a_person() -> None:
    end = last_useful_end(30) - timedelta(minutes=1)
    decision = decision_for()
    verdict = revise(decision, block(end))
    assert (verdict.action, verdict.planned_action) == (Action.CORDON, Action.REPLACE)
    assert verdict.deferred_for_capacity and verdict.capacity_reason == REASON_BLOCK_ENDING
    assert verdict.block_end == end
    (note,) = verdict.notes
    assert note.startswith("deferred for capacity: Capacity Block cr-0block ends at 2026-11-21T")
    assert f"before the block ends at {format_timestamp(end)}" in note
    assert "leaving 59 min, under replace.minBlockRemainingMinutes=60" in note
    # Nothing lands anywhere: nothing is replaced.
    assert verdict.landing_reservation is None
    revised = verdict.revise(decision)
    assert (revised.action, revised.planned_action, revised.xid) == (Action.CORDON, Action.REPLACE, 79)
    assert revised.reason.startswith(decision.reason + ". deferred for capacity")


def test_a_block_already_reclaiming_its_instances_defers_and_says_the_time_is_gone() -> None:
    verdict = revise(decision_for(), block(NOW + timedelta(minutes=35)))
    assert verdict.deferred_for_capacity
    assert "leaving -" in verdict.notes[0]


@pytest.mark.parametrize("instance_type", ["p6e-gb200.36xlarge", "trn2u.48xlarge"])
def test_ultraserver_types_lose_their_node_60_minutes_before_the_end(instance_type: str) -> None:
    # What is just enough for an instance block is half an hour short for an UltraServer.
    assert revise(decision_for(), block(last_useful_end(30), instance_type)).deferred_for_capacity
    almost = revise(decision_for(), block(last_useful_end(60) - timedelta(seconds=1), instance_type))
    assert almost.deferred_for_capacity and "is an UltraServer type" in almost.notes[0]
    enough = revise(decision_for(), block(last_useful_end(60), instance_type))
    assert (enough.action, enough.deferred_for_capacity) == (Action.REPLACE, False)


@pytest.mark.parametrize("instance_type", ["trn2.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"])
def test_instances_outside_ultraservers_keep_the_30_minute_lead(instance_type: str) -> None:
    assert revise(decision_for(), block(last_useful_end(30), instance_type)).action is Action.REPLACE


def test_a_block_without_an_end_date_is_replaced_and_says_it_could_not_check() -> None:
    verdict = revise(decision_for(), block(None))
    assert (verdict.action, verdict.deferred_for_capacity, verdict.block_end) == (Action.REPLACE, False, None)
    assert "has no known end date" in verdict.notes[0]
    assert verdict.landing_reservation == LandingReservation("cr-0block", "capacity-block")


def test_a_block_known_only_by_the_instance_lifecycle_is_still_a_block() -> None:
    # DescribeCapacityReservations not read (or refused): the instance's lifecycle says enough.
    context = CapacityContext(
        lifecycle="capacity-block", reservation_id="cr-0block", reservation_end=NOW + timedelta(minutes=90)
    )
    assert revise(decision_for(), context).deferred_for_capacity


def test_the_settings_move_the_boundary() -> None:
    quick = ReplaceSettings(min_block_remaining_minutes=0, launch_minutes=5)
    end = last_useful_end(30, quick, drain_seconds=0)
    assert revise(decision_for(), block(end), replace=quick, drain_seconds=0).action is Action.REPLACE
    late = block(end - timedelta(seconds=1))
    assert revise(decision_for(), late, replace=quick, drain_seconds=0).deferred_for_capacity
    # A longer drain eats into the same block's time.
    assert revise(decision_for(), block(end), replace=quick, drain_seconds=1).deferred_for_capacity


def test_the_verdict_flips_exactly_once_at_the_boundary_as_the_end_moves() -> None:
    """Every second from two hours before the boundary to two hours after it, for both leads."""
    for instance_type, lead in (("p5.48xlarge", 30), ("p6e-gb200.36xlarge", 60)):
        boundary = last_useful_end(lead)
        decision = decision_for()
        for offset in range(-7200, 7201):
            end = boundary + timedelta(seconds=offset)
            verdict = revise(decision, block(end, instance_type))
            assert verdict.deferred_for_capacity is (offset < 0), (instance_type, offset)
            assert verdict.action is (Action.CORDON if offset < 0 else Action.REPLACE)
            assert verdict.planned_action is Action.REPLACE and verdict.block_end == end


@given(
    drain_seconds=st.integers(min_value=0, max_value=86_400),
    launch=st.integers(min_value=0, max_value=1440),
    minimum=st.integers(min_value=0, max_value=10_080),
    offset=st.integers(min_value=-86_400, max_value=86_400),
    ultraserver=st.booleans(),
)
def test_deferred_exactly_when_the_block_ends_before_the_last_useful_end(
    drain_seconds: int, launch: int, minimum: int, offset: int, ultraserver: bool
) -> None:
    replace = ReplaceSettings(min_block_remaining_minutes=minimum, launch_minutes=launch)
    lead, instance_type = (60, "trn2u.48xlarge") if ultraserver else (30, "p5e.48xlarge")
    end = last_useful_end(lead, replace, drain_seconds) + timedelta(seconds=offset)
    verdict = revise(decision_for(), block(end, instance_type), replace=replace, drain_seconds=drain_seconds)
    assert verdict.deferred_for_capacity is (offset < 0)
    assert verdict.planned_action is Action.REPLACE


# Rule 1 leaves everything that does not replace as decided.
def test_an_odcr_ending_soon_is_no_capacity_block_and_records_where_the_replacement_lands() -> None:
    verdict = revise(decision_for(), ODCR)
    assert (verdict.action, verdict.deferred_for_capacity) == (Action.REPLACE, False)
    assert verdict.landing_reservation == LandingReservation("cr-0odcr", "default")
    assert verdict.notes == (
        "the replacement should land in On-Demand Capacity Reservation cr-0odcr, where this instance ran "
        "(Karpenter launches into it only when the EC2NodeClass's capacityReservationSelectorTerms select it)",
    )


def test_a_replacement_in_a_block_with_time_left_lands_in_the_block() -> None:
    verdict = revise(decision_for(), block(NOW + timedelta(days=3)))
    assert verdict.landing_reservation == LandingReservation("cr-0block", "capacity-block")
    assert "should land in Capacity Block cr-0block" in verdict.notes[-1]


def test_spot_and_plain_on_demand_are_left_as_decided() -> None:
    for context in (SPOT, ON_DEMAND):
        decision = decision_for()
        verdict = revise(decision, context)
        assert verdict == CapacityVerdict(Action.REPLACE, Action.REPLACE, escalated=False)
        assert verdict.revise(decision) == decision


@pytest.mark.parametrize(
    ("mode", "expected"), [(Mode.DRY_RUN, Action.NONE), (Mode.CORDON_ONLY, Action.CORDON)]
)
def test_a_block_ending_soon_does_not_touch_what_the_mode_already_held_back(
    mode: Mode, expected: Action
) -> None:
    verdict = revise(decision_for(mode=mode), block(NOW + timedelta(minutes=50)))
    assert (verdict.action, verdict.deferred_for_capacity, verdict.notes) == (expected, False, ())


def test_a_reboot_in_a_block_ending_soon_is_still_a_reboot() -> None:
    # Rebooting keeps the instance and its slot: the block's end does not matter to it.
    verdict = revise(decision_for(XID_48), block(NOW + timedelta(minutes=50)))
    assert (verdict.action, verdict.deferred_for_capacity) == (Action.REBOOT, False)


# Rule 2: scarce on-demand capacity.
def test_an_escalated_reboot_in_a_scarce_pool_keeps_rebooting_and_says_capacity_was_why() -> None:
    decision = decision_for(XID_48, pool=SCARCE, history=REBOOTED)
    assert (decision.action, decision.escalated) == (Action.REPLACE, True)
    verdict = revise(decision, ON_DEMAND, pool=SCARCE)
    assert (verdict.action, verdict.planned_action, verdict.escalated) == (
        Action.REBOOT,
        Action.REBOOT,
        False,
    )
    assert verdict.capacity_reason == REASON_SCARCE_POOL and not verdict.deferred_for_capacity
    assert verdict.landing_reservation is None
    revised = verdict.revise(decision)
    assert (revised.action, revised.escalated) == (Action.REBOOT, False)
    assert "escalated to replace" in revised.reason
    assert f"kept as reboot for capacity: node pool {SCARCE!r} is scarce" in revised.reason


def test_outside_a_scarce_pool_the_reboot_still_escalates() -> None:
    for pool in (PLENTY, None):
        decision = decision_for(XID_48, pool=pool, history=REBOOTED)
        verdict = revise(decision, ON_DEMAND, pool=pool)
        assert (verdict.action, verdict.escalated, verdict.capacity_reason) == (Action.REPLACE, True, "")


def test_a_reserved_instance_in_a_scarce_pool_still_escalates() -> None:
    # Its reservation gives the capacity back: the replacement lands in it.
    decision = decision_for(XID_48, pool=SCARCE, history=REBOOTED)
    verdict = revise(decision, ODCR, pool=SCARCE)
    assert (verdict.action, verdict.escalated) == (Action.REPLACE, True)
    assert verdict.landing_reservation == LandingReservation("cr-0odcr", "default")
    in_block = revise(decision, block(NOW + timedelta(days=2)), pool=SCARCE)
    assert (in_block.action, in_block.capacity_reason) == (Action.REPLACE, "")


def test_a_spot_instance_in_a_scarce_pool_still_escalates() -> None:
    decision = decision_for(XID_48, pool=SCARCE, history=REBOOTED)
    assert revise(decision, SPOT, pool=SCARCE).action is Action.REPLACE


def test_at_the_attempt_cap_a_scarce_pool_gets_an_alert_and_nothing_is_replaced() -> None:
    capped = NodeHistory(attempts_in_window=3, last_reboot_at=NOW - timedelta(hours=1))
    decision = decision_for(XID_48, pool=SCARCE, history=capped)
    verdict = revise(decision, ON_DEMAND, pool=SCARCE)
    assert (verdict.action, verdict.planned_action) == (Action.ALERT, Action.REBOOT)
    assert verdict.notes == () and verdict.capacity_reason == ""


def test_a_reboot_that_did_not_escalate_is_left_alone_in_a_scarce_pool() -> None:
    verdict = revise(decision_for(XID_48, pool=SCARCE), ON_DEMAND, pool=SCARCE)
    assert (verdict.action, verdict.notes) == (Action.REBOOT, ())


def test_a_replace_class_fault_in_a_scarce_pool_is_still_replaced() -> None:
    # The pool rule is about reboots that escalated; a dead bus is not fixed by rebooting.
    assert revise(decision_for(XID_79, pool=SCARCE), ON_DEMAND, pool=SCARCE).action is Action.REPLACE


# Invariants over every combination.
CONDITIONS = [XID_79, XID_48, XID_13]
HISTORIES = [NodeHistory(), REBOOTED, NodeHistory(attempts_in_window=3, last_reboot_at=NOW)]
CONTEXTS = [
    ON_DEMAND,
    SPOT,
    ODCR,
    block(None),
    block(NOW + timedelta(minutes=45)),
    block(NOW + timedelta(hours=3), "p6e-gb200.36xlarge"),
    block(NOW + timedelta(days=7)),
]


@pytest.mark.parametrize(
    ("condition", "history", "mode", "pool"),
    list(itertools.product(CONDITIONS, HISTORIES, list(Mode), [SCARCE, PLENTY, None])),
)
def test_capacity_never_lowers_the_plan_nor_raises_the_action(
    condition: Condition, history: NodeHistory, mode: Mode, pool: str | None
) -> None:
    decision = decision_for(condition, pool=pool, history=history, mode=mode)
    for context in CONTEXTS:
        verdict = revise(decision, context, pool=pool)
        revised = verdict.revise(decision)
        # Severity within an episode follows the plan (D2, D19): capacity never changes it.
        assert verdict.planned_action is revised.planned_action is decision.planned_action
        # Capacity only ever holds an action back, and says why when it does.
        assert verdict.action.cost <= decision.action.cost
        assert (verdict.action is not decision.action) == bool(verdict.capacity_reason)
        assert verdict.deferred_for_capacity == (verdict.capacity_reason == REASON_BLOCK_ENDING)
        # A reservation is recorded only for a replacement that happens.
        assert verdict.landing_reservation is None or verdict.action is Action.REPLACE
        assert (revised.xid, revised.signal, revised.confirm_seconds) == (
            decision.xid,
            decision.signal,
            decision.confirm_seconds,
        )
        assert CapacityVerdict.from_json(json.loads(json.dumps(verdict.to_json()))) == verdict


# The verdict travels through the state as JSON.
def test_a_deferred_verdict_round_trips_through_json() -> None:
    end = NOW + timedelta(minutes=75)
    verdict = revise(decision_for(), block(end))
    raw = verdict.to_json()
    assert raw["deferredForCapacity"] is True and raw["capacityReason"] == REASON_BLOCK_ENDING
    assert raw["blockEnd"] == format_timestamp(end) and raw["landingReservation"] is None
    assert CapacityVerdict.from_json(raw) == verdict


def _valid() -> dict[str, Any]:
    return revise(decision_for(), block(NOW + timedelta(days=2))).to_json()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"action": "terminate"}, "capacity.action must be one of none, alert, cordon, reboot, replace"),
        ({"plannedAction": None}, "capacity.plannedAction must be one of"),
        ({"escalated": "no"}, "capacity.escalated and capacity.deferredForCapacity must be booleans"),
        ({"notes": "one note"}, "capacity.notes must be a list of strings"),
        ({"capacityReason": "cheap"}, "capacity.capacityReason must be one of"),
        ({"deferredForCapacity": True}, "capacity.deferredForCapacity is true only with capacityReason"),
        ({"landingReservation": {"id": "cr-1", "type": "spot"}}, "capacity.landingReservation.type must be"),
        ({"landingReservation": {"id": "", "type": "default"}}, "capacity.landingReservation.id must be"),
        ({"landingReservation": "cr-1"}, "capacity.landingReservation must be an object or null"),
        ({"blockEnd": "2026-11-21T12:00:00"}, "capacity.blockEnd must carry a time zone"),
    ],
)
def test_a_malformed_verdict_is_refused_with_its_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidEventError, match=message):
        CapacityVerdict.from_json({**_valid(), **change})


def test_a_verdict_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(InvalidEventError, match="capacity must be an object, got list"):
        CapacityVerdict.from_json([])


# What the caller must get right.
def test_a_naive_block_end_or_clock_is_refused() -> None:
    with pytest.raises(ValueError, match="reservation_end must carry a time zone"):
        block(datetime(2026, 11, 21, 12, 0))
    with pytest.raises(ValueError, match="now must carry a time zone"):
        revise_for_capacity(
            decision_for(),
            ON_DEMAND,
            pool=None,
            replace=REPLACE,
            drain_worst_case_seconds=0,
            now=NOW.replace(tzinfo=None),
        )


def test_a_negative_drain_worst_case_is_refused() -> None:
    with pytest.raises(ValueError, match="drain_worst_case_seconds must be >= 0"):
        revise(decision_for(), ON_DEMAND, drain_seconds=-1)


def test_a_block_end_in_another_zone_is_compared_as_the_same_instant() -> None:
    pacific = timezone(timedelta(hours=-8))
    end = last_useful_end(30).astimezone(pacific)
    assert revise(decision_for(), block(end)).action is Action.REPLACE
    assert revise(decision_for(), block(end - timedelta(seconds=1))).deferred_for_capacity
    assert f"ends at {format_timestamp(end)}" in revise(decision_for(), block(end)).notes[0]
