"""The seeded simulation's Warning Event stream meets what the counting must survive: crossings that
start remediations, the spam filter, aggregation, and the late Events of a replaced Node (D10)."""

from __future__ import annotations

import random
from datetime import timedelta

from nodeheal.policy.counted_signals import counted_signal
from nodeheal.sim.seeded.runner import run_schedule
from nodeheal.sim.seeded.template import SimTemplate
from nodeheal.sim.seeded.warning_events import (
    BURST_START_HOURS,
    NPD_GPU_MONITOR,
    WARNING_STREAM,
    draw_bursts,
    warning_line,
)
from nodeheal.sim.seeded.world import START

#: Seeds whose traces together show every case below (checked, not searched: a change of the
#: stream that loses one of them shows here).
SEEDS = range(0, 12)


def test_every_line_the_stream_writes_is_the_signal_it_stands_for() -> None:
    for signal in ("xid-92", "xid-63", "xid-94", "nvlink-nonfatal"):
        for variant in (0, 1, 9):
            assert counted_signal("Warning", *warning_line(signal, NPD_GPU_MONITOR, variant)) == signal
    assert counted_signal("Warning", *warning_line("xid-92", "eks-node-monitoring-agent", 0)) == "xid-92"


def test_the_stream_is_its_own_and_draws_the_same_bursts_for_a_seed() -> None:
    first = draw_bursts(random.Random(7 ^ WARNING_STREAM), START)
    again = draw_bursts(random.Random(7 ^ WARNING_STREAM), START)
    assert [(w.at, w.message) for w in first] == [(w.at, w.message) for w in again]
    assert first and all(w.at >= START for w in first)
    assert min(w.at for w in first) <= START + timedelta(hours=BURST_START_HOURS)


def test_schedules_count_cross_and_refuse_the_late_events_of_a_replaced_node(template: SimTemplate) -> None:
    trace: list[str] = []
    for seed in SEEDS:
        result = run_schedule(template, seed, trace=True)
        assert result.ok, f"seed {seed}: {result.violation.render() if result.violation else result.crash}"
        trace += result.trace
    text = "\n".join(trace)
    assert ": crossed " in text  # a window reached its rule's count and started a remediation
    assert "start " in text and "(node-event)" in text
    assert ": unattributed" in text  # an Event of an earlier Node of the name counted for none
    assert "warning patched" in text  # a repeat raised an Event's count
