"""The faults a seeded schedule injects, and the plan that says when.

A plan is drawn from the seed before the schedule runs: a list of :class:`PlannedFault`, each a
kind, the scheduling point at which it becomes due, and its own seed (which node, which message,
how slow). Because a fault carries everything it needs, any subset of a plan can be replayed:
that is what lets the shrinker (delta debugging) cut a failing schedule down to the faults that
matter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: Every fault kind, grouped as the issue lists them. The coverage counter reports each.
CLUSTER_FAULTS = (
    "gpu-fault",  # a healthy node's GPU fails (the load every schedule carries)
    "node-replaced-same-name",  # the instance goes, a new one joins under the same name (IP reuse)
    "condition-clears",
    "condition-flaps",
    "second-condition",  # another condition goes bad on a node that is already bad
    "message-more-severe",  # a bad condition's message changes to a worse fault, same status/reason
    "message-less-severe",  # ... to a lesser one (NPD keeps only the latest message)
    "instance-gone",  # spot reclaim / a person terminates the instance
    "karpenter-deletes-node",
    "kubelet-dead",  # terminating pods on the node never finish
)
EVENT_FAULTS = (
    "duplicate-event",
    "replayed-event",
    "forged-event",
    "foreign-event",
    "future-dated-event",
    "stale-event",
    "oversized-event",
    "exporter-resync",
)
PLATFORM_FAULTS = (
    "api-5xx",
    "api-slow",
    "api-timeout",
    "lambda-killed-after-side-effect",
    "lock-ttl-expiry",
    "ledger-contention",
    "ec2-throttled",
    "execution-timeout",
    "execution-abort",
    "finalizer-event-lost",
    "pause",
    "resume",
    "mode-flip",
    "breaker-reset",
)
FAULT_KINDS = CLUSTER_FAULTS + EVENT_FAULTS + PLATFORM_FAULTS

#: Relative weights when drawing a plan: the load first, then what most often goes wrong.
_WEIGHTS = dict.fromkeys(FAULT_KINDS, 1.0)
_WEIGHTS.update(
    {
        "gpu-fault": 0.0,  # drawn separately, every plan has some
        "api-5xx": 2.0,
        "api-slow": 1.5,
        "condition-clears": 1.5,
        "duplicate-event": 1.5,
        "message-more-severe": 1.5,
        "second-condition": 1.5,
        "node-replaced-same-name": 1.5,
    }
)


@dataclass(frozen=True, slots=True)
class PlannedFault:
    kind: str
    #: The scheduling point (a global counter of steps and adapter calls) from which it is due.
    at_point: int
    seed: int

    def describe(self) -> str:
        return f"{self.kind}@{self.at_point}#{self.seed}"

    @classmethod
    def parse(cls, text: str) -> PlannedFault:
        """The inverse of :meth:`describe` (``kind@point#seed``), for replaying a shrunk plan."""
        kind, _, rest = text.partition("@")
        point, _, seed = rest.partition("#")
        if kind not in FAULT_KINDS or not point.isdigit() or not seed.isdigit():
            raise ValueError(
                f"not a planned fault: {text!r} (expected kind@point#seed, kind one of {FAULT_KINDS})"
            )
        return cls(kind, int(point), int(seed))


def draw_plan(rng: random.Random, *, horizon_points: int = 400) -> list[PlannedFault]:
    """GPU faults (the load) and a handful of injected faults, at random points."""
    plan = [
        PlannedFault("gpu-fault", rng.randrange(0, horizon_points // 2), rng.randrange(1 << 30))
        for _ in range(rng.randint(1, 4))
    ]
    kinds = [k for k in FAULT_KINDS if _WEIGHTS[k] > 0]
    weights = [_WEIGHTS[k] for k in kinds]
    for _ in range(rng.randint(2, 8)):
        kind = rng.choices(kinds, weights)[0]
        plan.append(PlannedFault(kind, rng.randrange(0, horizon_points), rng.randrange(1 << 30)))
    return sorted(plan, key=lambda f: (f.at_point, f.kind, f.seed))
