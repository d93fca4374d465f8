"""``nodeheal simulate --seed N``'s trace says why each execution did what it did: every admission
leaves a line with the decision and the rule that made it, so a ``Ready`` execution that replaced
its node shows the rule that chose replace."""

from __future__ import annotations

import re

from nodeheal.sim.seeded.runner import run_schedule
from nodeheal.sim.seeded.template import SimTemplate

#: Seeds searched for a Ready execution that terminated its instance (most of the first few have one).
SEEDS = range(12)


def _admissions(trace: list[str], execution: str) -> list[str]:
    return [line for line in trace if f"  admit {execution}: " in line]


def test_every_admission_leaves_its_decision_in_the_trace(template: SimTemplate) -> None:
    replaced_by_ready = False
    for seed in SEEDS:
        trace = run_schedule(template, seed, trace=True).trace
        admitted = [m.group(1) for line in trace if (m := re.search(r" (\S+) \| Admit ok$", line))]
        for execution in set(admitted):
            lines = _admissions(trace, execution)
            assert len(lines) >= admitted.count(execution), (seed, execution)
        for line in trace:
            if "-Ready-" in line and "| Terminate instance ok" in line:
                execution = line.split(" | ", 1)[0].split()[-1]
                decisions = _admissions(trace, execution)
                # The rule that chose replace: replace itself, or reboot escalated to replace by
                # rebootEscalationHours (the instance was rebooted for a GPU fault before).
                assert any(
                    re.search(r": proceed, replace \(rule: (replace|reboot); .+\)", d) for d in decisions
                ), (
                    seed,
                    decisions,
                )
                replaced_by_ready = True
        if replaced_by_ready:
            break
    assert replaced_by_ready, f"no Ready execution replaced its node in seeds {SEEDS}"
