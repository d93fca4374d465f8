"""A small storm through the whole local pipeline: bulk faults, and waiting until all are decided."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from benchmarks.pipeline_timing import storm_budget
from nodeheal.sim.cluster.layout import ClusterLayout
from nodeheal.sim.cluster.simulated_cluster import XID_79
from nodeheal.sim.local_pipeline.wiring import LocalPipeline
from nodeheal.sim.stack.process_templates import synthesized
from nodeheal.workflow.records import Outcome

# a run of the full local pipeline: `make test` runs it, `make check` does not
pytestmark = pytest.mark.slow
NODES = 8


@pytest.fixture(scope="module")
def stormed() -> Iterator[LocalPipeline]:
    layout = ClusterLayout(gpu_nodes=NODES, training_workers=0, notebook_gpus=0)
    with LocalPipeline(synthesized(), layout=layout) as pipeline:
        pipeline.cluster.inject_many(list(pipeline.cluster.gpu_nodes), XID_79)
        yield pipeline


def test_every_faulted_node_is_decided_and_the_budget_holds(stormed: LocalPipeline) -> None:
    victims = stormed.cluster.gpu_nodes[:NODES]
    records, dropped = stormed.wait_until_decided(victims, timeout=120)
    assert dropped == []
    assert sorted(r.node for r in records) == sorted(victims)
    outcomes = Counter(r.outcome for r in records)
    # Simultaneous faults: the smallest of maxInFlight, maxPerHour and the pool's allowance (1 of
    # 8 nodes at the default 20% share) is remediated, and the breaker refuses the rest.
    budget = storm_budget(stormed.remediation_settings.budgets, pool_size=NODES)
    assert budget == 1
    # Compared whole, so a failure names every outcome and why, not only a count that fell short.
    assert outcomes == {Outcome.REPLACED: budget, Outcome.REFUSED: NODES - budget}, [
        (r.node, r.outcome, r.reason) for r in records
    ]
    assert len(stormed.wait_for_records(NODES, timeout=5)) == NODES
    assert len(stormed.wait_for_records(1, node=victims[0], timeout=5)) == 1


def test_waiting_for_a_node_that_never_faulted_times_out(stormed: LocalPipeline) -> None:
    stormed.wait_until_decided(stormed.cluster.gpu_nodes[:NODES], timeout=120)
    healthy = stormed.cluster.system_node
    with pytest.raises(TimeoutError, match="a decision for 1 node"):
        stormed.wait_until_decided([healthy], timeout=0.5)
    with pytest.raises(TimeoutError, match="2 ledger record"):
        stormed.wait_for_records(2, node=stormed.cluster.gpu_nodes[0], timeout=0.5)
