"""The mutation gate (``make mutate``, run by ``make soak``): each safety mutant of
``tests/simulation/mutants.py`` must be caught by the seeded simulation alone within
:data:`BUDGET` schedules, each schedule drawn from its seed exactly as ``make test`` draws it.

A caught mutant prints its row of the table in ``docs/simulation-finds-the-safety-defects.md``:
the mutant, the first schedule that broke an invariant, the invariant, and how long the search
took.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from nodeheal.sim.seeded.runner import ScheduleResult, plan_for, run_schedule
from nodeheal.sim.seeded.template import SimTemplate
from tests.simulation.mutants import MUTANTS, Mutant

#: The most schedules a mutant may survive (issue: "within at most 2,000 schedules").
BUDGET = 2000


@dataclass(frozen=True)
class Caught:
    result: ScheduleResult
    schedules: int
    seconds: float

    def row(self, mutant: Mutant) -> str:
        assert self.result.violation is not None
        plan = " ".join(fault.describe() for fault in self.result.plan)
        return (
            f"| {mutant.number} | {mutant.check} | {self.result.seed} (`{plan}`) | "
            f"{self.result.violation.invariant} | {self.schedules} schedules, {self.seconds:.0f} s |"
        )


def hunt(template: SimTemplate, mutant: Mutant, budget: int = BUDGET) -> Caught | None:
    """The first schedule from seed 0 that breaks one of the mutant's invariants, within
    ``budget`` schedules (a schedule that breaks another is another layer's find: searched on)."""
    started = time.monotonic()
    for seed in range(budget):
        result = run_schedule(template, seed, plan_for(seed))
        if result.violation is not None and result.violation.invariant in mutant.invariants:
            return Caught(result, seed + 1, time.monotonic() - started)
    return None


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda mutant: f"mutant-{mutant.number}")
def test_the_simulation_alone_catches_each_safety_mutant(
    template: SimTemplate, monkeypatch: pytest.MonkeyPatch, mutant: Mutant
) -> None:
    for patch in mutant.patches:
        monkeypatch.setattr(patch.module, patch.name, patch.before_the_fix)
    caught = hunt(template, mutant)
    assert caught is not None, f"mutant {mutant.number} ({mutant.check}) survived {BUDGET} schedules"
    print(f"\n{caught.row(mutant)}")
