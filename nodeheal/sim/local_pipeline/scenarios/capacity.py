"""Replacing with capacity in mind (docs/architecture.md, D12): a Capacity Block about to end, a
replacement inside an On-Demand Capacity Reservation, and a reboot-class fault in a pool whose
on-demand capacity is scarce. The local harness serves each instance's capacity from its own model
(:class:`nodeheal.sim.capacity.CapacityModel`): moto has no capacity reservations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodeheal.actions import Action
from nodeheal.sim.capacity import CAPACITY_BLOCK, ODCR, SimulatedReservation
from nodeheal.sim.cluster.simulated_cluster import XID_48, XID_79
from nodeheal.sim.local_pipeline.scenarios.play import Scenario, ScenarioRun
from nodeheal.workflow.records import Outcome

BLOCK_ID = "cr-0b10c4e11d5000001"
ODCR_ID = "cr-0dc40000000000001"
#: The Capacity Block ends this long after the fault: EC2 starts terminating its instances 30
#: minutes before the end and Karpenter drains them 10 minutes before that, so a replacement would
#: have 5 minutes at most, under replace.minBlockRemainingMinutes (60) before any drain or launch.
BLOCK_ENDS_AFTER = timedelta(minutes=45)
#: The pool the scarce-pool scenario marks scarce (``replace.scarcePools``).
SCARCE_POOL = "gpu"


def _place(run: ScenarioRun, reservation: SimulatedReservation, *, lifecycle: str) -> str:
    node = run.subject = run.pipeline.cluster.gpu_nodes[0]
    instance = run.facts["instance"] = run.pipeline.cluster.instance_of(node)
    capacity = run.pipeline.aws.capacity
    capacity.add_reservation(reservation)
    capacity.place(instance, lifecycle=lifecycle, reservation_id=reservation.reservation_id)
    return node


def _block_ending_play(run: ScenarioRun) -> None:
    end = (datetime.now(UTC) + BLOCK_ENDS_AFTER).replace(microsecond=0)
    run.facts["blockEnd"] = end
    block = SimulatedReservation(
        BLOCK_ID, CAPACITY_BLOCK, "p5.48xlarge", "us-west-2b", 4, 0, end_date=end, state="active"
    )
    node = _place(run, block, lifecycle=CAPACITY_BLOCK)
    run.inject(node, XID_79)
    run.await_records(1, node)


def _block_ending_check(run: ScenarioRun) -> None:
    node, instance = run.subject, run.facts["instance"]
    run.expected = (
        "expected: the replacement deferred for capacity - the node cordoned, the instance still "
        "running, a person told when the block ends"
    )
    record = run.only_record(node)
    run.expect_outcome(record, Outcome.CORDONED)
    if record is not None:
        run.expect(
            record.planned_action is Action.REPLACE and record.action is Action.CORDON,
            f"decision {record.action.value} (planned {record.planned_action.value}), expected cordon "
            "with replace planned",
        )
        run.expect("deferred for capacity" in record.reason, f"the reason does not say why: {record.reason}")
        run.expect(
            record.capacity.get("deferredForCapacity") is True
            and record.capacity.get("reservationId") == BLOCK_ID,
            f"the record's capacity is {dict(record.capacity)}",
        )
    run.expect_cordoned(node)
    run.expect_instance(instance, gone=False)
    messages = run.expect_notifications(["action-required"])
    end = run.facts["blockEnd"].strftime("%Y-%m-%dT%H:%M:%SZ")
    run.expect(
        any(end in str(m.get("message", "")) for m in messages),
        f"no notification names the block's end {end}",
    )
    run.expect(not run.pipeline.aws.capacity.reports, "an instance that stays was reported impaired")
    run.expect_executions(1)


def _odcr_play(run: ScenarioRun) -> None:
    odcr = SimulatedReservation(ODCR_ID, ODCR, "p5.48xlarge", "us-west-2b", 8, 1)
    node = _place(run, odcr, lifecycle="")
    run.inject(node, XID_79)
    run.await_records(1, node)
    run.await_event("workload-running")


def _odcr_check(run: ScenarioRun) -> None:
    node, instance = run.subject, run.facts["instance"]
    run.expected = (
        "expected: replaced, the record naming the reservation the replacement belongs in, and EC2 "
        "told the hardware was impaired before the instance went"
    )
    record = run.only_record(node)
    run.expect_outcome(record, Outcome.REPLACED)
    if record is not None:
        run.expect(
            record.capacity.get("landingReservation") == {"id": ODCR_ID, "type": ODCR},
            f"the record's capacity is {dict(record.capacity)}",
        )
        run.expect(record.capacity.get("impairedReported") is True, "the record says no impaired report")
    run.expect_replaced(node, instance)
    reports = run.pipeline.aws.capacity.reports
    run.expect(
        [(r.instance_id, r.status, r.reason_codes, r.description) for r in reports]
        == [(instance, "impaired", ("performance-other",), None)],
        f"ReportInstanceStatus calls: {reports}",
    )
    messages = run.expect_notifications(["info"])
    run.expect(
        any(ODCR_ID in str(m.get("message", "")) for m in messages),
        "the notification does not name the reservation",
    )
    run.expect_executions(1)


def _scarce_play(run: ScenarioRun) -> None:
    cluster = run.pipeline.cluster
    node = run.subject = cluster.gpu_nodes[0]
    run.facts["instance"] = cluster.instance_of(node)
    for attempt in range(1, 4):
        run.inject(node, XID_48)
        run.await_records(attempt, node)
        if attempt < 3:
            run.await_event("workload-running", count=attempt)
        run.pipeline.wait_settled(timeout=run.seconds(60))


def _scarce_check(run: ScenarioRun) -> None:
    node = run.subject
    run.expected = (
        "expected: rebooted, rebooted again instead of the 24-hour escalation to replace (the pool is "
        "scarce), then at maxAttemptsPerNode an alert; nothing replaced"
    )
    records = run.pipeline.records(node)
    outcomes = [r.outcome for r in records]
    run.expect(
        outcomes == [Outcome.REBOOTED, Outcome.REBOOTED, Outcome.ALERTED],
        f"outcomes {[o.value for o in outcomes]}, expected rebooted, rebooted, alerted",
    )
    if len(records) == 3:
        second = records[1]
        run.expect(
            second.capacity.get("capacityReason") == "scarce-pool" and not second.escalated,
            f"the second reboot does not say capacity kept it: {dict(second.capacity)} {second.reason}",
        )
        run.expect("kept as reboot for capacity" in second.reason, f"second reason: {second.reason}")
    run.expect_untouched(node, run.facts["instance"])
    run.expect(run.terminate_calls() == 0, f"{run.terminate_calls()} instance(s) terminated")
    run.expect_executions(3)


CAPACITY_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "capacity-block-ending",
        "Xid 79 in a Capacity Block that ends in 45 min -> replace deferred for capacity: cordoned, "
        "the instance kept, a person told when the block ends",
        _block_ending_play,
        _block_ending_check,
    ),
    Scenario(
        "capacity-odcr",
        "Xid 79 in an On-Demand Capacity Reservation -> reported impaired, replaced, the record names "
        "the reservation the replacement belongs in",
        _odcr_play,
        _odcr_check,
    ),
    Scenario(
        "capacity-scarce-pool",
        "Xid 48 three times in a scarce on-demand pool -> rebooted, rebooted again (no escalation to "
        "replace), then an alert at maxAttemptsPerNode (2 here)",
        _scarce_play,
        _scarce_check,
        context={"replace": {"scarcePools": [SCARCE_POOL]}, "policy": {"maxAttemptsPerNode": 2}},
    ),
)
