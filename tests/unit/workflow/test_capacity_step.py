"""The read-capacity step and the impaired report, over in-memory ports: what EC2 says about the
instance's capacity revises the admission where the later states read it, and the terminate step
tells EC2 about the hardware before the instance goes without ever letting that keep the node."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from nodeheal.actions import Action, Mode
from nodeheal.config import RemediationSettings, ReplaceSettings
from nodeheal.errors import Ec2ThrottledError, InvalidEventError, OwnershipVerificationError
from nodeheal.instances import CapacityReservationView, InstanceView, TerminateOutcome, ownership_tags
from nodeheal.workflow import mutations, recording
from nodeheal.workflow.capacity import read_capacity
from nodeheal.workflow.ports import KubeAccess
from nodeheal.workflow.recording import capacity_summary, render_notification
from nodeheal.workflow.records import Outcome, RemediationRecord
from nodeheal.worst_case import drain_worst_case_seconds
from tests.unit.workflow.fakes import CLUSTER, NOW, FakeNodes, gpu_problem, live_node
from tests.unit.workflow.test_safety_defects import (
    OLD_INSTANCE,
    RecordingPods,
    admitted_state,
    cordoned,
    held_ledger,
)

BLOCK = "cr-0block"
ODCR = "cr-0odcr"


@dataclass
class CapacityEc2:
    """EC2 as the capacity read and the terminate step see it, with every call in order."""

    lifecycle: str = ""
    reservation_id: str = ""
    reservations: dict[str, CapacityReservationView] = field(default_factory=dict)
    state: str = "running"
    known: bool = True
    report_error: Exception | None = None
    calls: list[str] = field(default_factory=list)

    def describe(self, instance_id: str) -> InstanceView | None:
        self.calls.append(f"DescribeInstances {instance_id}")
        if not self.known:
            return None
        return InstanceView(
            instance_id,
            self.state,
            tags=ownership_tags(CLUSTER),
            lifecycle=self.lifecycle,
            capacity_reservation_id=self.reservation_id,
            image_id="ami-0gpu",
            instance_type="p5.48xlarge",
        )

    def capacity_reservation(self, reservation_id: str) -> CapacityReservationView | None:
        self.calls.append(f"DescribeCapacityReservations {reservation_id}")
        return self.reservations.get(reservation_id)

    def report_impaired(self, instance_id: str, start_time: datetime) -> None:
        self.calls.append(f"ReportInstanceStatus {instance_id} {start_time.isoformat()}")
        if self.report_error is not None:
            raise self.report_error

    def terminate(self, instance_id: str) -> TerminateOutcome:
        self.calls.append(f"TerminateInstances {instance_id}")
        return TerminateOutcome(instance_id, self.state, "shutting-down", already_gone=False)

    def reboot(self, instance_id: str) -> None:
        raise AssertionError("nothing may be rebooted")


def block(end: datetime | None) -> CapacityReservationView:
    return CapacityReservationView(BLOCK, "capacity-block", "active", "p5.48xlarge", "us-west-2b", 4, 0, end)


def capacity_state(settings: RemediationSettings | None = None) -> Any:
    return admitted_state(cordoned(live_node(condition=gpu_problem())), settings=settings)


def test_a_block_ending_soon_turns_the_replacement_into_a_cordon_where_later_states_read_it() -> None:
    state = capacity_state()
    ec2 = CapacityEc2("capacity-block", BLOCK, {BLOCK: block(NOW + timedelta(hours=1))})
    admission = read_capacity(state, ec2, NOW)
    # The admission comes back whole, with the decision revised in place ($.admission.decision).
    assert admission["verdict"] == "proceed" and admission["node"] == state.step("admission")["node"]
    assert (admission["decision"]["action"], admission["decision"]["plannedAction"]) == ("cordon", "replace")
    assert "deferred for capacity" in admission["decision"]["reason"]
    capacity = admission["capacity"]
    assert capacity["read"] is True
    assert capacity["context"]["reservationId"] == BLOCK
    assert capacity["context"]["reservationType"] == "capacity-block"
    assert capacity["verdict"]["deferredForCapacity"] is True
    assert capacity["reservation"] == {
        "state": "active",
        "availableInstanceCount": 0,
        "totalInstanceCount": 4,
    }
    # The drain the rule counts is the deployed settings' worst case.
    assert f"drain worst case {drain_worst_case_seconds(state.settings)} s" in admission["decision"]["reason"]
    assert ec2.calls == [f"DescribeInstances {OLD_INSTANCE}", f"DescribeCapacityReservations {BLOCK}"]


def test_a_block_with_days_left_is_replaced_and_the_replacement_belongs_in_it() -> None:
    ec2 = CapacityEc2("capacity-block", BLOCK, {BLOCK: block(NOW + timedelta(days=3))})
    admission = read_capacity(capacity_state(), ec2, NOW)
    assert admission["decision"]["action"] == "replace"
    assert admission["capacity"]["verdict"]["landingReservation"] == {"id": BLOCK, "type": "capacity-block"}


def test_an_odcr_records_where_the_replacement_lands_and_on_demand_reads_no_reservation() -> None:
    odcr = CapacityReservationView(ODCR, "default", "active", "p5.48xlarge", "us-west-2b", 8, 1)
    admission = read_capacity(capacity_state(), CapacityEc2("", ODCR, {ODCR: odcr}), NOW)
    assert admission["decision"]["action"] == "replace"
    assert admission["capacity"]["verdict"]["landingReservation"] == {"id": ODCR, "type": "default"}

    plain = CapacityEc2()
    admission = read_capacity(capacity_state(), plain, NOW)
    assert admission["decision"]["action"] == "replace"
    assert admission["capacity"]["context"]["lifecycle"] == ""
    assert plain.calls == [f"DescribeInstances {OLD_INSTANCE}"]  # no reservation to describe


def test_an_instance_ec2_no_longer_knows_leaves_the_decision_to_the_terminate_step() -> None:
    state = capacity_state()
    admission = read_capacity(state, CapacityEc2(known=False), NOW)
    assert admission["decision"] == state.step("admission")["decision"]
    assert admission["capacity"]["read"] is False
    assert OLD_INSTANCE in admission["capacity"]["note"]


def test_a_reservation_ec2_does_not_find_is_said_and_a_block_without_its_end_still_replaces() -> None:
    admission = read_capacity(capacity_state(), CapacityEc2("capacity-block", BLOCK, {}), NOW)
    assert admission["capacity"]["note"] == f"reservation {BLOCK} not found in EC2"
    # Known as a block by the instance's lifecycle alone: its end could not be checked.
    assert admission["decision"]["action"] == "replace"
    assert "no known end date" in admission["decision"]["reason"]


def test_only_an_admission_that_proceeds_is_read() -> None:
    state = capacity_state()
    stopped = dataclasses.replace(
        state, raw={**state.raw, "admission": {**state.raw["admission"], "verdict": "stop"}}
    )
    with pytest.raises(InvalidEventError, match="only after an admission that proceeds"):
        read_capacity(stopped, CapacityEc2(), NOW)


# -- the impaired report ---------------------------------------------------------------------------


def run_terminate(ec2: CapacityEc2, settings: RemediationSettings | None = None) -> dict[str, Any]:
    node = cordoned(live_node(condition=gpu_problem()))
    return mutations.terminate(
        admitted_state(node, settings=settings),
        KubeAccess(FakeNodes({"gpu-a": node}), RecordingPods({})),
        ec2,
        held_ledger(),
        NOW,
        mode=Mode.FULL,
    )


def test_the_hardware_is_reported_impaired_before_the_instance_is_terminated() -> None:
    ec2 = CapacityEc2()
    result = run_terminate(ec2)
    reports = [call for call in ec2.calls if call.startswith("ReportInstanceStatus")]
    assert len(reports) == 1
    assert ec2.calls.index(reports[0]) < ec2.calls.index(f"TerminateInstances {OLD_INSTANCE}")
    assert result["impairedReport"]["sent"] is True
    assert result["impairedReport"]["reasonCodes"] == ["performance-other"]


@pytest.mark.parametrize(
    "error",
    [Ec2ThrottledError("RequestLimitExceeded"), OwnershipVerificationError("UnauthorizedOperation")],
    ids=["throttled", "not-permitted"],
)
def test_a_refused_report_is_recorded_and_never_keeps_the_broken_node(error: Exception) -> None:
    ec2 = CapacityEc2(report_error=error)
    result = run_terminate(ec2)
    assert result["impairedReport"]["sent"] is False
    assert type(error).__name__ in result["impairedReport"]["note"]
    assert f"TerminateInstances {OLD_INSTANCE}" in ec2.calls


def test_an_instance_that_is_not_running_is_not_reported() -> None:
    ec2 = CapacityEc2(state="stopping")
    result = run_terminate(ec2)
    assert result["impairedReport"] == {"sent": False, "note": "not reported: the instance is stopping"}
    assert not [call for call in ec2.calls if call.startswith("ReportInstanceStatus")]


# -- the record and the notification ----------------------------------------------------------------


def test_the_record_keeps_the_capacity_and_the_notification_says_what_to_do_by_the_blocks_end() -> None:
    ec2 = CapacityEc2("capacity-block", BLOCK, {BLOCK: block(NOW + timedelta(hours=1))})
    admission = read_capacity(capacity_state(), ec2, NOW)
    summary = capacity_summary(admission["capacity"], None)
    assert summary["deferredForCapacity"] is True
    assert summary["reservationId"] == BLOCK and summary["lifecycle"] == "capacity-block"
    assert "impairedReported" not in summary  # no terminate step ran
    record = RemediationRecord(
        cluster=CLUSTER,
        node="gpu-a",
        execution="exec-1",
        started_at=NOW,
        finished_at=NOW,
        outcome=Outcome.CORDONED,
        action=Action(admission["decision"]["action"]),
        planned_action=Action(admission["decision"]["plannedAction"]),
        reason=admission["decision"]["reason"],
        summary="cordoned; left for a person",
        capacity=summary,
    )
    assert RemediationRecord.from_item(record.to_item()).capacity == summary
    message = render_notification(record, capacity_state(), region="us-west-2").message
    assert f"Capacity:  capacity-block in Capacity Block {BLOCK}; replacement deferred" in message
    assert f"Next:      The Capacity Block ends at {summary['blockEnd']}" in message


def test_capacity_not_read_leaves_the_record_without_it() -> None:
    assert capacity_summary(None, None) == {}
    assert capacity_summary({"read": False, "note": "gone"}, {"impairedReport": {"sent": False}}) == {}


def test_settings_without_a_scarce_pool_or_block_change_nothing_for_on_demand() -> None:
    settings = RemediationSettings(replace=ReplaceSettings(scarce_pools=("other",)))
    admission = read_capacity(capacity_state(settings), CapacityEc2(), NOW)
    assert admission["decision"]["action"] == "replace"
    assert admission["capacity"]["verdict"]["capacityReason"] == ""


# -- a reboot that turns into a replacement after the cordon -----------------------------------------


def escalated_state(block_end: datetime) -> tuple[Any, Any]:
    """A reboot admitted in a Capacity Block (the read judged a reboot, which gives nothing up) whose
    node did not recover: the workflow now wants to replace it."""
    node = cordoned(live_node(condition=gpu_problem()))
    admission = dict(admitted_state(node).raw["admission"])
    admission["decision"] = {**admission["decision"], "action": "reboot", "plannedAction": "reboot"}
    admission["capacity"] = read_capacity(
        admitted_state(node), CapacityEc2("capacity-block", BLOCK, {BLOCK: block(block_end)}), NOW
    )["capacity"]
    state = admitted_state(
        node, extra={"admission": admission, "recovery": {"status": "failed", "detail": "not back"}}
    )
    return state, node


def run_escalation(state_and_node: tuple[Any, Any], ec2: CapacityEc2, now: datetime) -> dict[str, Any]:
    state, node = state_and_node
    return mutations.terminate(
        state,
        KubeAccess(FakeNodes({"gpu-a": node}), RecordingPods({})),
        ec2,
        held_ledger(),
        now,
        mode=Mode.FULL,
    )


def test_an_escalation_checks_the_block_again_and_leaves_the_node_cordoned_when_it_ends_too_soon() -> None:
    end = NOW + timedelta(minutes=100)  # usable until +60 min; a replacement takes pods at +20 min
    state, node = escalated_state(end)
    ec2 = CapacityEc2("capacity-block", BLOCK, {BLOCK: block(end)})
    result = run_escalation((state, node), ec2, NOW)
    assert result["performed"] is False and result["deferredForCapacity"] is True
    assert "deferred for capacity" in result["note"] and "40 min left" in result["note"]
    assert not [call for call in ec2.calls if not call.startswith("DescribeCapacity")]  # nothing touched
    outcome, summary = recording._outcome(
        dataclasses.replace(state, raw={**state.raw, "instance": result}), Action.REBOOT
    )
    assert outcome is Outcome.CORDONED and "deferred for capacity" in summary


def test_an_escalation_with_the_block_far_off_replaces_as_before() -> None:
    end = NOW + timedelta(minutes=121)  # 81 min usable, 61 min after the launch: at least 60
    ec2 = CapacityEc2("capacity-block", BLOCK, {BLOCK: block(end)})
    result = run_escalation(escalated_state(end), ec2, NOW)
    assert result["performed"] is True
    assert f"TerminateInstances {OLD_INSTANCE}" in ec2.calls
