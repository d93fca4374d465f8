"""Proof that the simulation finds bugs: take out one fix it led to, search seeds, and expect the
invariant that fix protects to break again, as a shrunk trace. Run by ``make soak``."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from nodeheal.sim.seeded.faults import PlannedFault
from nodeheal.sim.seeded.runner import plan_for, run_schedule, shrink
from nodeheal.sim.seeded.template import SimTemplate

#: Seeds searched per defect (each is found within the first 100 today).
SEARCH = 1000


def _old_drain_list(state: Any, kube: Any) -> Any:
    return kube.pods.list_on_node(state.node_name)


def _old_budget_pool(labels: Any, pool_label: str) -> tuple[str, str]:
    pool = labels.get(pool_label, "")
    return (
        pool,
        f"{pool_label}={pool}" if pool else f"kubernetes.io/hostname={labels.get('kubernetes.io/hostname')}",
    )


#: Faults added to the seed's own plan where the defect needs a rare combination: a node replaced
#: under its name in the instant between the drain's proof and its pod list.
EMPHASIS = {"drain relist": ("node-replaced-same-name", 8)}


def _plan(fix: str, seed: int) -> list[PlannedFault]:
    plan = plan_for(seed)
    kind, count = EMPHASIS.get(fix, ("", 0))
    rng = random.Random(seed)
    return plan + [PlannedFault(kind, rng.randrange(400), rng.randrange(1 << 30)) for _ in range(count)]


def _take_out(monkeypatch: pytest.MonkeyPatch, fix: str) -> None:
    from nodeheal.workflow import actions, admission, ingest

    undo: dict[str, Callable[[], None]] = {
        "drain relist": lambda: monkeypatch.setattr(actions, "_listed_on_admitted_node", _old_drain_list),
        "reboot escalation": lambda: monkeypatch.setattr(
            actions, "_worsened_to_replacement", lambda state, node, now: ""
        ),
        "future-dated drop": lambda: monkeypatch.setattr(
            ingest, "FUTURE_TOLERANCE", ingest.timedelta(days=3650)
        ),
        "pool of every node": lambda: monkeypatch.setattr(admission, "budget_pool", _old_budget_pool),
        "episode memory": lambda: monkeypatch.setattr(admission, "episode_worst", lambda records, node: None),
        "contender mark": lambda: monkeypatch.setattr(
            admission, "_contend", lambda ledger, state, node, claim, holder: None
        ),
    }
    undo[fix]()
    if fix in _BACKED_BY_THE_LEDGER_MEMORY:
        # The ledger's episode memory (nodeheal.workflow.episode) is a second line behind each of
        # these: without it too, the defect the fix closed shows again.
        monkeypatch.setattr(admission, "remembered_worst", lambda sightings, node, now: None)
        monkeypatch.setattr(actions, "_remembered_replacement", lambda state, ledger, node, now: "")


#: Fixes whose defect the ledger's episode memory now also prevents.
_BACKED_BY_THE_LEDGER_MEMORY = frozenset({"reboot escalation", "episode memory", "contender mark"})


@pytest.mark.soak
@pytest.mark.parametrize(
    ("fix", "invariant"),
    [
        ("drain relist", "I1 only the admitted node"),
        ("reboot escalation", "I8 severity only rises"),
        ("future-dated drop", "I6 dropped events mutate nothing"),
        ("pool of every node", "I3 budgets"),
        ("episode memory", "I8 severity only rises"),
        ("contender mark", "I8 severity only rises"),
    ],
)
def test_the_simulation_finds_the_defect_again_without_its_fix(
    template: SimTemplate, monkeypatch: pytest.MonkeyPatch, fix: str, invariant: str
) -> None:
    _take_out(monkeypatch, fix)
    found = next(
        (
            result
            for result in (run_schedule(template, seed, _plan(fix, seed)) for seed in range(SEARCH))
            if result.violation is not None and result.violation.invariant == invariant
        ),
        None,
    )
    assert found is not None, f"{invariant} not broken in {SEARCH} schedules without the {fix} fix"
    shrunk = shrink(template, found)
    assert shrunk.violation is not None and shrunk.violation.invariant == invariant
    assert len(shrunk.plan) <= len(found.plan)
    assert any("VIOLATION" in line for line in shrunk.trace)
