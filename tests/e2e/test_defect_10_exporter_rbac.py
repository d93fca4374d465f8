"""Defect 10: the exporter, too, runs under its own roles (deploy/exporter, D8 in docs/architecture.md).

With leader election and Node Events shipping on (the deployed shape), every request the exporter makes is authorized against its ClusterRoles and its
leader-election Role, and every permission those grant is used.
"""

from __future__ import annotations

from nodeheal.rbac import EXPORTER_NAMESPACE, EXPORTER_ROLES
from nodeheal.sim.local_pipeline.scenarios.scenario_index import SCENARIOS
from nodeheal.sim.local_pipeline.wiring import LocalPipeline, wait_until
from nodeheal.sim.stack.process_templates import synthesized


def test_defect_10_exporter_needs_every_grant_of_its_roles_and_nothing_more() -> None:
    scenario = SCENARIOS["xid79"]
    overrides = {
        "leader_election": True,
        "lease_namespace": EXPORTER_NAMESPACE,
        "retry_period_seconds": 0.05,
        "ship_node_events": True,
    }
    with LocalPipeline(
        synthesized(scenario.context), layout=scenario.layout, exporter_overrides=overrides
    ) as pipeline:
        exporter = pipeline.exporter
        assert exporter is not None and exporter.elector is not None
        wait_until(lambda: exporter.elector is not None and exporter.elector.is_leader, what="leadership")
        run = scenario.run(pipeline)
        assert run.problems == []
        pipeline.restart_exporter()  # the leader releases its Lease; the new process takes it
        authorizer = pipeline.authorizer

    assert [str(request) for request in authorizer.denied] == []
    exporter_roles = {role.name for role in EXPORTER_ROLES}
    unused = [f"{role}: {permission}" for role, permission in authorizer.unused() if role in exporter_roles]
    assert unused == [], "granted to the exporter but never used"
