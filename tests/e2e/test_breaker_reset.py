"""After a storm opened the breaker, ``nodeheal breaker reset`` gets the refused nodes remediated.

The whole local pipeline: the refused executions have ended and the exporter's resyncs are
duplicates, so only the reset's re-evaluations (``-r<N>``, D13 in docs/architecture.md) can act on those
nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeheal.cli import main
from nodeheal.sim.cluster.layout import ClusterLayout
from nodeheal.sim.cluster.simulated_cluster import XID_79
from nodeheal.sim.local_pipeline.wiring import LocalPipeline, wait_until
from nodeheal.sim.stack.process_templates import synthesized
from nodeheal.workflow.records import Outcome

pytestmark = pytest.mark.slow

NODES = 8


@pytest.fixture
def stormed() -> Iterator[LocalPipeline]:
    layout = ClusterLayout(gpu_nodes=NODES, training_workers=0, notebook_gpus=0)
    with LocalPipeline(synthesized(), layout=layout) as pipeline:
        victims = list(pipeline.cluster.gpu_nodes)
        pipeline.cluster.inject_many(victims, XID_79)
        pipeline.wait_until_decided(victims, timeout=120)
        yield pipeline


def test_reset_re_evaluates_the_refused_nodes_and_one_is_replaced(
    stormed: LocalPipeline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = stormed
    cluster = pipeline.cluster_name
    assert pipeline.ledger.read_admission_state(cluster).breaker.open
    refused = sorted(r.node for r in pipeline.records() if r.outcome is Outcome.REFUSED)
    assert len(refused) == NODES - 1
    executions_before = len(pipeline.executions())

    config = pipeline.write_admin_kubeconfig(tmp_path / "kubeconfig")
    argv = [
        "breaker",
        "reset",
        "--cluster",
        cluster,
        "--yes",
        "--region",
        pipeline.aws.region,
        "--table",
        pipeline.aws.table_name,
        "--state-machine",
        pipeline.aws.state_machine_arn,
        "--kubeconfig",
        str(config),
    ]
    capsys.readouterr()
    # moto is not thread-safe: the command takes its turn between the handlers' invocations.
    with pipeline.aws.between_invocations():
        assert main(argv) == 0
    out = capsys.readouterr().out
    started = [line.split()[1] for line in out.splitlines() if line.startswith("  started ")]
    # Every refused node is listed; the budgets have room for some now, the rest wait for later.
    for node in refused:
        assert node in out
    assert started and all(name.rsplit("-", 1)[1].startswith("r") for name in started)
    assert not pipeline.ledger.read_admission_state(cluster).breaker.open

    wait_until(
        lambda: any(r.execution in started and r.outcome is Outcome.REPLACED for r in pipeline.records()),
        timeout=120,
        interval=0.2,
        what="a re-evaluated node replaced",
    )
    assert len(pipeline.executions()) == executions_before + len(started)
