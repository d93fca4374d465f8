"""How long ``make test``'s 500 seeded schedules take (docs/architecture.md, D16: at most 60 s on two cores).

    .venv/bin/python benchmarks/simulation_speed.py [--schedules 500] [--first-seed 0]

Synthesizes the stack once (not counted, as the test session's fixture does once per worker),
then runs the schedules in one process, as ``tests/simulation/test_seeded_schedules.py`` does in
its five chunks, and prints the wall time, the CPU time and the rate. The CPU time is the figure
a loaded machine does not distort; the wall time is what a run on an idle one takes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodeheal.commands.demo import make_sources_importable

#: D16's (docs/architecture.md) bound for the 500 schedules of ``make test``.
TARGET_SECONDS = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=500)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.schedules < 1:
        parser.error("--schedules must be at least 1")

    make_sources_importable()
    from nodeheal.sim.seeded.runner import load_template, run_campaign

    template = load_template()
    wall, cpu = time.perf_counter(), time.process_time()
    campaign = run_campaign(template, range(args.first_seed, args.first_seed + args.schedules))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    figures = {
        "schedules": campaign.schedules,
        "violations": len(campaign.failures),
        "wallSeconds": round(wall, 1),
        "cpuSeconds": round(cpu, 1),
        "schedulesPerSecond": round(campaign.schedules / wall, 1),
        "targetSeconds": TARGET_SECONDS,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"{campaign.schedules} schedules from seed {args.first_seed}: {wall:.1f} s wall, "
            f"{cpu:.1f} s CPU ({figures['schedulesPerSecond']} schedules/s), "
            f"{len(campaign.failures)} violations; D16 target {TARGET_SECONDS:.0f} s"
        )
    return 1 if campaign.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
