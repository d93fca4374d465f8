"""Run the seeded simulation against NodeHeal at b3e75db (see simulation-finds-the-safety-defects.md).

    PYTHONPATH=$PWD .venv/bin/python docs/simulation-old-code-replay.py campaign 0 2000 [excluded,kinds]
    PYTHONPATH=$PWD .venv/bin/python docs/simulation-old-code-replay.py replay
    TEST_CONTEXT=1 PYTHONPATH=$PWD .venv/bin/python docs/simulation-old-code-replay.py replay

``campaign`` runs the seeds' own plans (minus the excluded fault kinds) and shrinks the first
failure of each distinct violation; ``replay`` runs the shrunk plans below with their traces. Both
also run on a current checkout with its own simulation (no shim), where ``replay`` should report
no violation. ``TEST_CONTEXT=1`` synthesizes b3e75db's own test context instead (``FAST_CONTEXT``
as it was, lock TTL 600 s and workflow timeout 15 min, which that commit's validation accepts),
with the simulation's settings applied as usual; ``replay`` then runs the defect-6 cases only.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections import Counter

from nodeheal.sim.pipeline import FAST_CONTEXT, deep_merge
from nodeheal.sim.seeded.faults import PlannedFault
from nodeheal.sim.seeded.invariants import InvariantViolated
from nodeheal.sim.seeded.runner import (
    SIMULATION_SETTINGS,
    ScheduleResult,
    load_template,
    plan_for,
    run_schedule,
)
from nodeheal.sim.seeded.schedule import Simulation, prepare_handlers
from nodeheal.sim.seeded.template import SimTemplate

#: (defect, seed, shrunk plan): the table's plans, then the other violations' ("-").
CASES = [
    ("1", 898, "gpu-fault@7#415770087 node-replaced-same-name@18#169356215"),
    ("2", 885, "gpu-fault@150#161749993 condition-flaps@158#474522861 api-5xx@159#88749327"),
    ("2", 2, "gpu-fault@10#15 kubelet-dead@12#15 condition-clears@40#31"),
    (
        "2",
        1,
        "gpu-fault@0#2 gpu-fault@1#25 kubelet-dead@3#1 kubelet-dead@4#7 kubelet-dead@5#5 kubelet-dead@6#19 "
        "condition-clears@140#5",
    ),
    (
        "2",
        1998,
        "exporter-resync@43#720773138 gpu-fault@95#445396271 gpu-fault@109#1056683850 "
        "gpu-fault@185#721834377 node-replaced-same-name@201#1056539235 karpenter-deletes-node@300#92469395 "
        "condition-clears@346#37982238",
    ),
    ("3", 1064, "gpu-fault@115#1002910933 gpu-fault@162#48108620 condition-clears@215#39477416"),
    ("3", 683, "gpu-fault@67#480326278 gpu-fault@83#238074612 condition-clears@101#331977672"),
    (
        "4",
        680,
        "gpu-fault@66#1032988905 gpu-fault@89#731666701 gpu-fault@152#719639255 "
        "oversized-event@156#913225885",
    ),
    ("4", 2, "gpu-fault@10#15 oversized-event@10#31"),
    ("5", 2, "gpu-fault@32#909193255 execution-abort@41#166691421"),
    ("5", 13, "gpu-fault@158#677599886 execution-timeout@361#1015899355"),
    ("7", 59, "gpu-fault@60#362602035 api-timeout@72#375457936"),
    ("8", 253, "gpu-fault@115#19499345 pause@143#138203503"),
    ("8", 149, "gpu-fault@117#95074032 mode-flip@168#907864600"),
    ("9", 3, "gpu-fault@102#46626451 forged-event@104#1024766509"),
    ("9", 1897, "gpu-fault@73#356086419 forged-event@215#146068753"),
    ("11", 0, "gpu-fault@10#1 node-replaced-same-name@20#1 gpu-fault@30#1"),
    ("11", 3, "gpu-fault@10#1 node-replaced-same-name@11#1 gpu-fault@12#1"),
    ("-", 1, "gpu-fault@59#182383874 future-dated-event@221#800292825"),
    ("-", 8, "gpu-fault@85#188659255 message-less-severe@271#309270458"),
    ("-", 62, "gpu-fault@84#810064229 gpu-fault@127#130276770"),
    ("-", 106, "gpu-fault@26#796946505 gpu-fault@61#299419845"),
    ("-", 341, "gpu-fault@86#287910149 message-more-severe@119#1033988838"),
    ("-", 7, "api-timeout@113#178196666 gpu-fault@191#170518978"),
    ("-", 159, "gpu-fault@185#592325514 lock-ttl-expiry@205#366703527 lock-ttl-expiry@212#227682301"),
]

#: With TEST_CONTEXT=1: an execution outlives the accepted 15-minute workflow timeout on its own.
TEST_CONTEXT_CASES = [
    ("6", 330, "gpu-fault@50#617029040 gpu-fault@57#296612117 condition-flaps@197#1769763"),
    (
        "6",
        291,
        "message-more-severe@34#701802043 gpu-fault@199#676293783 duplicate-event@325#954303762 "
        "condition-flaps@378#914442322",
    ),
]


def _template() -> SimTemplate:
    return load_template(FAST_CONTEXT if os.environ.get("TEST_CONTEXT") else None)


def _shape(text: str) -> str:
    for pattern, word in (
        (r"training-on-eks-\S+", "EXEC"),
        (r"ip-10-\S+", "NODE"),
        (r"i-[0-9a-f]+", "INST"),
        (r"uid-\d+", "UID"),
        (r"training/\S+", "POD"),
        (r"\d+", "N"),
    ):
        text = re.sub(pattern, word, text)
    return text


def _failure(result: ScheduleResult) -> str:
    violation = result.violation
    if violation is not None:
        return f"{violation.invariant}: {_shape(violation.detail)}"
    return "crash" if result.crash else ""


def _shrink(template: SimTemplate, failed: ScheduleResult) -> ScheduleResult:
    """runner.shrink's ddmin, keeping the same failure (invariant and shape of its detail), so a
    rare violation of an invariant is not shrunk into a frequent one of the same invariant."""
    target = _failure(failed)
    faults, best, granularity = list(failed.plan), failed, 2
    while len(faults) >= 2:
        chunk = max(1, len(faults) // granularity)
        subsets = [faults[i : i + chunk] for i in range(0, len(faults), chunk)]
        for index in range(len(subsets)):
            complement = [f for j, s in enumerate(subsets) if j != index for f in s]
            result = run_schedule(template, failed.seed, complement)
            if _failure(result) == target:
                faults, best, granularity = complement, result, max(granularity - 1, 2)
                break
        else:
            if granularity >= len(faults):
                break
            granularity = min(len(faults), granularity * 2)
    return best


def campaign(low: int, high: int, excluded: set[str]) -> None:
    template = _template()
    shapes: Counter[str] = Counter()
    first: dict[str, ScheduleResult] = {}
    for seed in range(low, high):
        result = run_schedule(template, seed, [f for f in plan_for(seed) if f.kind not in excluded])
        if result.ok:
            continue
        shape = _failure(result)
        shapes[shape] += 1
        first.setdefault(shape, result)
    print(f"{sum(shapes.values())} of {high - low} schedules violated an invariant")
    for shape, count in shapes.most_common():
        shrunk = _shrink(template, first[shape])
        plan = " ".join(f.describe() for f in shrunk.plan)
        print(f"{count:5d}  {shape}\n       seed {shrunk.seed}: {plan}")


def replay() -> None:
    template = _template()
    prepare_handlers(template)
    for defect, seed, plan in TEST_CONTEXT_CASES if os.environ.get("TEST_CONTEXT") else CASES:
        sim = Simulation(
            template,
            seed,
            [PlannedFault.parse(f) for f in plan.split()],
            trace=True,
            settings_overrides=lambda rng, raw: raw.update(deep_merge(raw, SIMULATION_SETTINGS)),
        )
        violation = "no violation"
        try:
            sim.run()
        except InvariantViolated as violated:
            violation = violated.violation.render()
        print(f"=== defect {defect}, seed {seed}: {plan}\n{violation}")
        print("\n".join(line.render(sim.trace[0].at) for line in sim.trace))
        for record in sim.ledger.records:
            print(f"  record {record.execution}: {record.outcome} - {record.summary}")


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    if sys.argv[1] == "campaign":
        campaign(int(sys.argv[2]), int(sys.argv[3]), set(filter(None, (sys.argv[4:] or [""])[0].split(","))))
    else:
        replay()
