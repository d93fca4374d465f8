"""``nodeheal simulate``: run seeded schedules of the remediation workflow against the invariants.

Nothing is deployed: the stack is synthesized and its state machine definition runs in this
process. ``--seed N`` replays one schedule exactly and prints its trace (each admission's decision
and the rule that made it included); ``--schedules N`` runs many and prints the rate and the
fault coverage. A violation prints the seed, the invariant, and the schedule shrunk to the fewest
faults that still break it (``--plan`` replays such a list).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from nodeheal.commands.extras import require_extra
from nodeheal.commands.output import print_json

EXIT_VIOLATION = 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run seeded, fault-injecting schedules of the workflow and check the safety invariants",
        description=(
            "Synthesize NodeHeal's CDK stack and run its state machine definition in this process, "
            "with the real Lambda handlers, over a simulated cluster on a virtual clock (nothing is "
            "deployed and no AWS account is used), injecting faults at every step, and check "
            "NodeHeal's safety invariants after each. Exits 1 on a violation, with the seed and a "
            "shrunk trace."
        ),
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--seed",
        type=_non_negative,
        help="replay this one schedule and print its trace: every state, and each admission's "
        "decision with the rule that made it",
    )
    what.add_argument(
        "--schedules", type=_positive, default=100, help="how many schedules to run (default 100)"
    )
    parser.add_argument(
        "--first-seed", type=_non_negative, default=0, help="seed of the first schedule (default 0)"
    )
    parser.add_argument(
        "--plan",
        help="with --seed: replay exactly these faults (kind@point#seed, comma-separated) instead of "
        "the seed's own plan",
    )
    parser.add_argument(
        "--ledger",
        choices=("memory", "dynamodb"),
        default="memory",
        help="the in-memory ledger (default), or the DynamoDB ledger over moto: slower, and it runs "
        "the deployed table's conditional writes",
    )
    parser.add_argument("--no-shrink", action="store_true", help="print a failing schedule as it ran")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def _non_negative(raw: str) -> int:
    if not raw.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {raw!r}")
    return int(raw)


def _positive(raw: str) -> int:
    value = _non_negative(raw)
    if value == 0:
        raise argparse.ArgumentTypeError("expected at least 1")
    return value


def run(args: argparse.Namespace) -> int:
    with warnings.catch_warnings():
        # Powertools warns when a handler emitted no metric, which most steps do not.
        warnings.filterwarnings("ignore", category=UserWarning)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    require_extra("demo", "simulate")
    from nodeheal.commands.demo import make_sources_importable
    from nodeheal.sim.seeded.faults import PlannedFault
    from nodeheal.sim.seeded.runner import load_template, run_campaign, run_schedule, shrink

    plan = None
    if args.plan is not None:
        if args.seed is None:
            print("nodeheal simulate: --plan needs --seed", file=sys.stderr)
            return 2
        try:
            plan = [PlannedFault.parse(item.strip()) for item in args.plan.split(",") if item.strip()]
        except ValueError as invalid:
            print(f"nodeheal simulate: {invalid}", file=sys.stderr)
            return 2
    make_sources_importable()
    template = load_template()
    if args.seed is not None:
        result = run_schedule(template, args.seed, plan, trace=True, ledger=args.ledger)
        if not result.ok and not args.no_shrink and plan is None:
            result = shrink(template, result, ledger=args.ledger)
        if args.json:
            print_json(_result_json(result))
        else:
            print("\n".join(result.trace))
            _print_result(result)
        return 0 if result.ok else EXIT_VIOLATION

    def progress(result: Any) -> None:
        if not result.ok and not args.json:
            print(f"seed {result.seed}: {_headline(result)}", file=sys.stderr)

    campaign = run_campaign(
        template,
        range(args.first_seed, args.first_seed + args.schedules),
        stop_after=3,
        on_result=progress,
        ledger=args.ledger,
    )
    failures = [f if args.no_shrink else shrink(template, f, ledger=args.ledger) for f in campaign.failures]
    if args.json:
        print_json(
            {
                "schedules": campaign.schedules,
                "seconds": round(campaign.seconds, 2),
                "schedulesPerSecond": round(campaign.rate, 1),
                "steps": campaign.steps,
                "executions": campaign.executions,
                "coverage": dict(sorted(campaign.coverage.items())),
                "failures": [_result_json(f) for f in failures],
            }
        )
    else:
        print(
            f"{campaign.schedules} schedules, {campaign.executions} executions, {campaign.steps} steps "
            f"in {campaign.seconds:.1f}s ({campaign.rate:.1f} schedules/s)"
        )
        print("faults drawn:")
        for kind, count in sorted(campaign.coverage.items()):
            print(f"  {kind:34s} {count:7d}")
        for failure in failures:
            print()
            print("\n".join(failure.trace[-60:]))
            _print_result(failure)
        if not failures:
            print("0 violations")
    return EXIT_VIOLATION if failures else 0


def _headline(result: Any) -> str:
    if result.violation is not None:
        return str(result.violation.render())
    return f"the simulation crashed: {result.crash.strip().splitlines()[-1] if result.crash else '?'}"


def _print_result(result: Any) -> None:
    if result.ok:
        print(f"seed {result.seed}: {result.executions} executions, {result.steps} steps, 0 violations")
        return
    print(f"seed {result.seed}: VIOLATION {_headline(result)}")
    if result.crash:
        print(result.crash)
    plan = ",".join(f.describe() for f in result.plan)
    print(f"faults: {plan}")
    print(
        f"replay: make simulate SEED={result.seed} PLAN='{plan}'  "
        f"(or: nodeheal simulate --seed {result.seed} --plan '{plan}')"
    )


def _result_json(result: Any) -> dict[str, Any]:
    return {
        "seed": result.seed,
        "ok": result.ok,
        "violation": result.violation.render() if result.violation else None,
        "crash": result.crash or None,
        "plan": [f.describe() for f in result.plan],
        "steps": result.steps,
        "executions": result.executions,
        "trace": result.trace,
    }
