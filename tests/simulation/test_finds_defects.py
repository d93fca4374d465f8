"""Proof that the simulation finds bugs: take out one fix it led to, search seeds, and expect the
invariant that fix protects to break again, as a shrunk trace. Run by ``make soak``.

Some fixes now have a second line of defence behind them (the ledger's episode memory, the reboot
step's re-read of the node), which would hide the first one's defect. Those lines are taken out
with the fix, and a schedule counts as the fix's defect only if putting the fix alone back makes
it pass: otherwise the search would credit the fix with a defect a removed layer let through.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from nodeheal.sim.seeded.faults import PlannedFault
from nodeheal.sim.seeded.runner import ScheduleResult, plan_for, run_schedule, shrink
from nodeheal.sim.seeded.template import SimTemplate
from nodeheal.workflow import admission, ingest, mutations
from tests.simulation.before_the_fixes import BEHIND, REVERTS, Patch

#: Seeds searched per defect (each is found within the first 100 today but the contender mark,
#: which needs two conditions bad at once and is found at seed 6).
SEARCH = 1000


def _old_drain_list(state: Any, kube: Any) -> Any:
    """The pods listed by the node's name after the guard's proof, and the node as read then: no
    second proof after the list (the caller now takes the node too, for its readiness)."""
    return kube.pods.list_on_node(state.node_name), kube.nodes.get(state.node_name)


def _old_budget_pool(labels: Any, pool_label: str) -> tuple[str, str]:
    pool = labels.get(pool_label, "")
    return (
        pool,
        f"{pool_label}={pool}" if pool else f"kubernetes.io/hostname={labels.get('kubernetes.io/hostname')}",
    )


#: The ledger's episode memory (nodeheal.workflow.episode): admission's and the reboot step's.
EPISODE_MEMORY = (
    Patch(admission, "remembered_worst", lambda sightings, node, now: None),
    Patch(mutations, "_remembered_replacement", lambda state, ledger, node, now: ""),
)
#: The reboot step's re-read of the live node for a fault that now calls for replacement.
REBOOT_ESCALATION = (Patch(mutations, "_worsened_to_replacement", lambda state, node, now: ""),)

#: Each fix: what takes it out, and the layers behind it that are taken out with it.
FIXES: dict[str, tuple[tuple[Patch, ...], tuple[Patch, ...]]] = {
    "drain relist": ((Patch(mutations, "_listed_on_admitted_node", _old_drain_list),), ()),
    "reboot escalation": (REBOOT_ESCALATION, EPISODE_MEMORY),
    "future-dated drop": ((Patch(ingest, "FUTURE_TOLERANCE", ingest.timedelta(days=3650)),), ()),
    "pool of every node": ((Patch(admission, "budget_pool", _old_budget_pool),), ()),
    "episode memory": (
        (Patch(admission, "episode_worst", lambda records, node, remembered=(): None),),
        EPISODE_MEMORY,
    ),
    "contender mark": (
        (Patch(admission, "_contend", lambda ledger, state, node, claim, holder, now: None),),
        EPISODE_MEMORY + REBOOT_ESCALATION,
    ),
    # The dropped-fault class (tests/simulation/before_the_fixes.py): found with the fault kinds
    # every seed draws, nothing planned by hand and no layer taken out behind them.
    **{fix: (patches, BEHIND.get(fix, ())) for fix, patches in REVERTS.items()},
}

#: Faults added to the seed's own plan where the defect needs a rare combination: a node replaced
#: under its name in the instant between the drain's proof and its pod list.
EMPHASIS = {"drain relist": ("node-replaced-same-name", 8)}


def _plan(fix: str, seed: int) -> list[PlannedFault]:
    plan = plan_for(seed)
    kind, count = EMPHASIS.get(fix, ("", 0))
    rng = random.Random(seed)
    return plan + [PlannedFault(kind, rng.randrange(400), rng.randrange(1 << 30)) for _ in range(count)]


def _apply(monkeypatch: pytest.MonkeyPatch, patches: tuple[Patch, ...]) -> None:
    for patch in patches:
        monkeypatch.setattr(patch.module, patch.name, patch.before_the_fix)


def _passes_with_the_fix_alone(
    monkeypatch: pytest.MonkeyPatch, fix: str, replay: Callable[[], ScheduleResult], invariant: str
) -> bool:
    """Whether the schedule keeps ``invariant`` once the fix alone is back (its layers still out)."""
    taken_out, _ = FIXES[fix]
    with monkeypatch.context() as restoring:
        for patch in taken_out:
            restoring.setattr(patch.module, patch.name, _SHIPPED[(patch.module.__name__, patch.name)])
        result = replay()
    return result.violation is None or result.violation.invariant != invariant


#: The fixed code, as NodeHeal ships it (read when this module is imported, before any test
#: replaces it).
_SHIPPED = {
    (patch.module.__name__, patch.name): getattr(patch.module, patch.name)
    for taken_out, behind in FIXES.values()
    for patch in taken_out + behind
}


@pytest.mark.soak
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("fix", "invariant"),
    [
        ("drain relist", "I1 only the admitted node"),
        ("reboot escalation", "I8 severity only rises"),
        ("future-dated drop", "I6 dropped events mutate nothing"),
        ("pool of every node", "I3 budgets"),
        ("episode memory", "I8 severity only rises"),
        ("contender mark", "I8 severity only rises"),
        ("episode across a new reason", "I8 severity only rises"),
        ("contender takes over or gives back", "I2 no bad condition dropped"),
        ("a contender that ends first", "I2 no bad condition dropped"),
        ("refuse before the holds", "I14 refuse evicts nothing"),
        ("the worst line survives the cut", "I8 severity only rises"),
        ("Record outcome stands over the finalizer", "I15 what is recorded is what happened"),
    ],
)
def test_the_simulation_finds_the_defect_again_without_its_fix(
    template: SimTemplate, monkeypatch: pytest.MonkeyPatch, fix: str, invariant: str
) -> None:
    taken_out, behind = FIXES[fix]
    _apply(monkeypatch, taken_out + behind)

    def the_fixs_defect(result: ScheduleResult) -> bool:
        if result.violation is None or result.violation.invariant != invariant:
            return False
        return _passes_with_the_fix_alone(
            monkeypatch, fix, lambda: run_schedule(template, result.seed, result.plan), invariant
        )

    found = next(
        (
            result
            for result in (run_schedule(template, seed, _plan(fix, seed)) for seed in range(SEARCH))
            if the_fixs_defect(result)
        ),
        None,
    )
    assert found is not None, f"{invariant} not broken in {SEARCH} schedules without the {fix} fix"
    shrunk = shrink(template, found, same_defect=the_fixs_defect)
    assert shrunk.violation is not None and shrunk.violation.invariant == invariant
    print(f"\n{fix}: seed {shrunk.seed}, plan {' '.join(f.describe() for f in shrunk.plan)}")
    assert len(shrunk.plan) <= len(found.plan)
    assert any("VIOLATION" in line for line in shrunk.trace)
    assert _passes_with_the_fix_alone(
        monkeypatch, fix, lambda: run_schedule(template, shrunk.seed, shrunk.plan), invariant
    ), f"the shrunk schedule of seed {shrunk.seed} breaks {invariant} with the {fix} fix back too"
