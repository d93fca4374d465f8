"""Run seeded schedules: one (to replay a seed), many (the test and the soak), and shrink failures."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nodeheal.sim.seeded import fault_effects
from nodeheal.sim.seeded.faults import (
    DROPPED_FAULT_CHANCE,
    FAULT_KINDS,
    IDENTITY_FAULT_CHANCE,
    IDENTITY_FAULTS,
    PlannedFault,
    draw_dropped_fault_plan,
    draw_plan,
)
from nodeheal.sim.seeded.handler_env import prepare_handlers
from nodeheal.sim.seeded.invariants import Invariants, InvariantViolated, Violation
from nodeheal.sim.seeded.schedule import SimOptions, Simulation
from nodeheal.sim.seeded.template import SimTemplate
from nodeheal.sim.stack.context import FAST_CONTEXT, deep_merge

#: The settings the schedules run with, over the test deployment's (nodeheal.sim.stack.context's
#: FAST_CONTEXT, synthesized once per test process and shared with the workflow tests): the waits
#: of the state machine read these from the execution's settings, so a drain, a reboot and a wait
#: behind a lock take a realistic number of rounds instead of spinning.
SIMULATION_SETTINGS: dict[str, Any] = {
    "drain": {"timeoutSeconds": 120, "pollSeconds": 10},
    "reboot": {"pollSeconds": 30, "recoveryTimeoutSeconds": 300},
    "lockWaitPollSeconds": 30,
}


@dataclass
class ScheduleResult:
    seed: int
    plan: list[PlannedFault]
    violation: Violation | None
    steps: int
    executions: int
    coverage: Counter[str]
    trace: list[str] = field(default_factory=list)
    #: Armed faults that found the call they aim at (nodeheal.sim.seeded.invariants.Invariants.fired).
    fired: Counter[str] = field(default_factory=Counter)
    #: An exception the simulation itself raised (a bug of the harness, or of NodeHeal outside a step).
    crash: str = ""

    @property
    def ok(self) -> bool:
        return self.violation is None and not self.crash


def load_template(context: dict[str, Any] | None = None) -> SimTemplate:
    from nodeheal.sim.stack.process_templates import TEMPLATES

    return SimTemplate.read(TEMPLATES.get(context or FAST_CONTEXT))


def plan_for(seed: int, *, dropped_fault_chance: float = DROPPED_FAULT_CHANCE) -> list[PlannedFault]:
    """The seed's plan: the faults it always drew, and the dropped-fault class from a stream of
    its own. ``dropped_fault_chance`` is the emphasis a search may give that class (every seed)."""
    plan = (
        draw_plan(random.Random(seed * 7919 + 1))
        + draw_dropped_fault_plan(random.Random(seed * 104729 + 3), chance=dropped_fault_chance)
        + draw_dropped_fault_plan(
            random.Random(seed * 15485863 + 5), chance=IDENTITY_FAULT_CHANCE, kinds=IDENTITY_FAULTS
        )
    )
    return sorted(plan, key=lambda f: (f.at_point, f.kind, f.seed))


def run_schedule(
    template: SimTemplate,
    seed: int,
    plan: list[PlannedFault] | None = None,
    *,
    trace: bool = False,
    ledger: str = "memory",
    options: SimOptions | None = None,
) -> ScheduleResult:
    """One schedule. ``ledger="dynamodb"`` runs it over the DynamoDB ledger in moto (the soak's
    moto-backed sample) instead of the in-memory one; ``options`` changes the cluster's shape."""
    if ledger == "dynamodb":
        from nodeheal.sim.seeded.dynamo import dynamo_ledger_factory, moto_table

        with moto_table(template.table) as client:
            return _run(
                template,
                seed,
                plan,
                trace=trace,
                ledger_factory=dynamo_ledger_factory(client),
                options=options,
            )
    if ledger != "memory":
        raise ValueError(f"ledger must be memory or dynamodb, got {ledger!r}")
    return _run(template, seed, plan, trace=trace, ledger_factory=None, options=options)


def _run(
    template: SimTemplate,
    seed: int,
    plan: list[PlannedFault] | None,
    *,
    trace: bool,
    ledger_factory: Any,
    options: SimOptions | None = None,
) -> ScheduleResult:
    prepare_handlers(template)
    plan = plan_for(seed) if plan is None else list(plan)
    sim = Simulation(
        template,
        seed,
        plan,
        options=options,
        trace=trace,
        ledger_factory=ledger_factory,
        settings_overrides=lambda rng, raw: raw.update(deep_merge(raw, SIMULATION_SETTINGS)),
        injector=fault_effects,
        observer=Invariants,
    )
    violation: Violation | None = None
    crash = ""
    try:
        sim.run()
    except InvariantViolated as violated:
        violation = violated.violation
    except Exception as error:
        import traceback

        crash = "".join(traceback.format_exception(error))
    return ScheduleResult(
        seed=seed,
        plan=plan,
        violation=violation,
        steps=sim.steps,
        executions=len(sim.executions),
        coverage=sim.invariants.coverage,
        fired=sim.invariants.fired,
        trace=[line.render(sim.trace[0].at) for line in sim.trace] if sim.trace else [],
        crash=crash,
    )


def shrink(
    template: SimTemplate,
    failed: ScheduleResult,
    *,
    ledger: str = "memory",
    same_defect: Callable[[ScheduleResult], bool] | None = None,
    options: SimOptions | None = None,
) -> ScheduleResult:
    """Delta debugging (ddmin) over the failed schedule's faults: the smallest subset that still
    violates the same invariant, replayed with the same seed (and the same ``options``).

    ``same_defect`` narrows "still fails" further: a smaller plan may break the same invariant
    for another reason (shrinking slips from one bug to the next), and a caller that knows what
    the bug is says which failures still show it.
    """
    target = failed.violation.invariant if failed.violation else "crash"

    def fails(plan: list[PlannedFault]) -> ScheduleResult | None:
        result = run_schedule(template, failed.seed, plan, ledger=ledger, options=options)
        if result.violation is not None and result.violation.invariant == target:
            if same_defect is not None and not same_defect(result):
                return None
            return result
        if target == "crash" and result.crash:
            return result
        return None

    faults = list(failed.plan)
    best = failed
    granularity = 2
    while len(faults) >= 2:
        chunk = max(1, len(faults) // granularity)
        subsets = [faults[i : i + chunk] for i in range(0, len(faults), chunk)]
        reduced = False
        for index in range(len(subsets)):
            complement = [f for j, s in enumerate(subsets) if j != index for f in s]
            result = fails(complement)
            if result is not None:
                faults, best = complement, result
                granularity = max(granularity - 1, 2)
                reduced = True
                break
        if not reduced:
            if granularity >= len(faults):
                break
            granularity = min(len(faults), granularity * 2)
    final = run_schedule(template, failed.seed, faults, trace=True, ledger=ledger, options=options)
    return final if not final.ok else best


@dataclass
class Campaign:
    schedules: int = 0
    failures: list[ScheduleResult] = field(default_factory=list)
    coverage: Counter[str] = field(default_factory=lambda: Counter(dict.fromkeys(FAULT_KINDS, 0)))
    fired: Counter[str] = field(default_factory=Counter)
    steps: int = 0
    executions: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.schedules / self.seconds if self.seconds else 0.0


def run_campaign(
    template: SimTemplate,
    seeds: Iterable[int],
    *,
    stop_after: int = 1,
    on_result: Callable[[ScheduleResult], None] | None = None,
    ledger: str = "memory",
) -> Campaign:
    campaign = Campaign()
    started = time.perf_counter()
    for seed in seeds:
        result = run_schedule(template, seed, ledger=ledger)
        campaign.schedules += 1
        campaign.steps += result.steps
        campaign.executions += result.executions
        campaign.coverage.update(result.coverage)
        campaign.fired.update(result.fired)
        if on_result is not None:
            on_result(result)
        if not result.ok:
            campaign.failures.append(result)
            if len(campaign.failures) >= stop_after:
                break
    campaign.seconds = time.perf_counter() - started
    return campaign
