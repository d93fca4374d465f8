"""The shrunk schedules that found each fix of the dropped-fault class (before_the_fixes.FOUND)
still break their invariant on the code before the fix, and hold on the code as shipped: a replay
of two schedules each, so a change that blinds the simulation to one of them fails ``make test``,
not only the soak's search."""

from __future__ import annotations

import pytest

from nodeheal.sim.seeded.faults import PlannedFault
from nodeheal.sim.seeded.runner import run_schedule
from nodeheal.sim.seeded.schedule import SimOptions
from nodeheal.sim.seeded.template import SimTemplate
from tests.simulation.before_the_fixes import BEHIND, FOUND, REVERTS


@pytest.mark.parametrize("fix", sorted(FOUND))
def test_the_kept_trace_breaks_the_code_before_the_fix_and_not_the_code_after(
    template: SimTemplate, monkeypatch: pytest.MonkeyPatch, fix: str
) -> None:
    seed, plan_text, invariant = FOUND[fix]
    plan = [PlannedFault.parse(fault) for fault in plan_text.split()]
    # The traces were kept before the seeded schedules drew Warning Events, whose steps change a
    # seed's interleaving: they replay as they were found.
    options = SimOptions(warning_events=False)
    assert run_schedule(template, seed, plan, options=options).ok, (
        f"{fix}: the shipped code breaks the kept trace"
    )
    with monkeypatch.context() as before:
        for patch in REVERTS[fix] + BEHIND.get(fix, ()):
            before.setattr(patch.module, patch.name, patch.before_the_fix)
        result = run_schedule(template, seed, plan, trace=True, options=options)
    assert result.violation is not None, f"{fix}: the kept trace no longer finds the defect"
    assert result.violation.invariant == invariant, result.violation.render()
