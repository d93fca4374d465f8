"""The capacity scenarios through the whole local pipeline (docs/architecture.md, D12): the read
of the instance's capacity before the cordon, what it decided in the ledger and the notification,
and what EC2 was and was not told."""

from __future__ import annotations

import pytest

from nodeheal.sim.local_pipeline.scenarios.play import task_outputs
from nodeheal.workflow.records import Outcome

pytestmark = pytest.mark.slow


def test_a_capacity_block_about_to_end_keeps_its_broken_node_cordoned_and_tells_a_person(play) -> None:
    run = play("capacity-block-ending")
    assert run.problems == []
    record = run.only_record(run.subject)
    assert record is not None and record.outcome is Outcome.CORDONED
    # The capacity read ran between Admit and Cordon, and no instance action followed it.
    (execution,) = run.pipeline.executions()
    (read,) = task_outputs(run, execution["name"], "Read capacity")
    # The state leaving it: the admission, its decision revised, the capacity kept beside it.
    assert read["admission"]["capacity"]["verdict"]["deferredForCapacity"] is True
    assert read["admission"]["decision"]["action"] == "cordon"
    assert run.terminate_calls() == 0


def test_a_replacement_inside_an_odcr_is_reported_impaired_first_and_names_its_reservation(play) -> None:
    run = play("capacity-odcr")
    assert run.problems == []
    record = run.only_record(run.subject)
    assert record is not None and record.capacity["landingReservation"]["id"] == "cr-0dc40000000000001"
    (report,) = run.pipeline.aws.capacity.reports
    assert report.instance_id == run.facts["instance"]
    assert report.start_time is not None


def test_a_scarce_pool_keeps_rebooting_then_alerts_and_replaces_nothing(play) -> None:
    run = play("capacity-scarce-pool")
    assert run.problems == []
    outcomes = [record.outcome for record in run.pipeline.records(run.subject)]
    assert outcomes == [Outcome.REBOOTED, Outcome.REBOOTED, Outcome.ALERTED]
    assert not run.pipeline.aws.capacity.reports
