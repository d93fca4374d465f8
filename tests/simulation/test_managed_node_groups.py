"""Seeded schedules on a cluster of managed node groups only: every invariant holds there too.

On such a cluster no node carries a Karpenter label, the budget pool is the node group, and a
terminated instance (NodeHeal's terminate, a person's, EKS node repair's, or a spot reclaim) is
replaced by the group's Auto Scaling group under a new name while the old Node object is deleted
on its own (nodeheal.sim.seeded.world). The mixed cluster of the 500 schedules has two such nodes in
six; here every node is one, so the group's path is taken in most schedules.
"""

from __future__ import annotations

from nodeheal.sim.seeded.runner import ScheduleResult, run_schedule, shrink
from nodeheal.sim.seeded.schedule import SimOptions
from nodeheal.sim.seeded.template import SimTemplate

MANAGED_NODE_GROUPS_ONLY = SimOptions(pool_kinds=("nodegroup",))
SEEDS = range(60)


def explain(failure: ScheduleResult, template: SimTemplate) -> str:
    shrunk = shrink(template, failure, options=MANAGED_NODE_GROUPS_ONLY)
    headline = shrunk.violation.render() if shrunk.violation else shrunk.crash
    faults = ",".join(fault.describe() for fault in shrunk.plan)
    return f"seed {failure.seed} (managed node groups only): {headline}\nfaults: {faults}\n" + "\n".join(
        shrunk.trace[-80:]
    )


def test_every_invariant_holds_when_every_node_is_in_a_managed_node_group(template: SimTemplate) -> None:
    replaced_by_the_group = 0
    after_a_nodeheal_terminate = 0
    for seed in SEEDS:
        result = run_schedule(template, seed, trace=True, options=MANAGED_NODE_GROUPS_ONLY)
        assert result.ok, explain(result, template)
        assert result.executions > 0
        trace = "\n".join(result.trace)
        assert "karpenter removes" not in trace
        if "cluster: auto scaling group gpu-mng launches ip-10-0-" in trace:
            replaced_by_the_group += 1
            after_a_nodeheal_terminate += "| Terminate instance" in trace
    # The group's path is exercised, and in good part behind NodeHeal's own terminate.
    assert replaced_by_the_group >= len(SEEDS) // 2, replaced_by_the_group
    assert after_a_nodeheal_terminate >= len(SEEDS) // 2, after_a_nodeheal_terminate
