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

from nodeheal.steps import ADMIT, CORDON, DRAIN, REBOOT, TERMINATE

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
#: The class of faults behind which a fatal fault used to be dropped (docs/architecture.md, D19, the issue "no
#: dead GPU left behind"). Each is drawn from a stream of its own (:func:`draw_dropped_fault_plan`),
#: so the kinds above are drawn for a seed exactly as before these existed.
DROPPED_FAULTS = (
    # A lesser reason lands on a bad condition, written as its detector writes it (NPD: new reason,
    # message and transition time; the node monitoring agent: newest reason, joined message), just
    # before the next admit reads the node, before a drain round, or before the instance action.
    "lesser-reason-before-admit",
    "lesser-reason-mid-drain",
    "lesser-reason-before-instance-action",
    # The next execution that contends a busy holder ends before it takes the node over: its
    # condition clears, its node goes, it is aborted or it times out.
    "contender-ends",
    # A refuse-class pod (emptyDir, unmanaged) that a hold also covers (do-not-disrupt, an
    # allow-completion mode), beside ordinary pods, under a refuse setting.
    "refuse-beside-held",
    # A multi-line NPD message (its log buffer matched across lines) of lesser Xids whose fatal
    # line comes last, over the 4 KiB bound.
    "fatal-xid-last",
    # The execution times out while its Record outcome task runs: the finalizer runs meanwhile.
    "timeout-in-record",
)
#: Identity changes that only a real-world difference shows, each aimed at one step of one
#: execution (the mutation gate, ``make mutate``, needs each to tell a safety check from its
#: absence). Drawn from a stream of their own, like :data:`DROPPED_FAULTS`.
IDENTITY_FAULTS = (
    # The kubelet re-registers the Node (its object was deleted while it ran): same name and
    # instance, a new UID, NodeHeal's taint gone; NPD posts its conditions again as they were.
    # Just before a cordon or a drain round.
    "kubelet-re-registers",
    # A person takes the node back: uncordons it and removes NodeHeal's taint. Just before a
    # drain round, a reboot or a terminate.
    "person-takes-node-back",
    # The instance loses the cluster's ownership tag (kubernetes.io/cluster/<name>): someone
    # re-tagged it, or it was never this cluster's. Just before a reboot or a terminate.
    "instance-untagged",
    # A Karpenter node joins before its providerID is set (a kubelet registering without
    # --provider-id; the cloud controller sets it later) with its GPU already bad (dead on
    # arrival): the same Node object then names an instance it did not name when admitted. The
    # providerID is set just before the first step that acts on it, or a minute after joining.
    "provider-id-late",
)
FAULT_KINDS = CLUSTER_FAULTS + EVENT_FAULTS + PLATFORM_FAULTS + DROPPED_FAULTS + IDENTITY_FAULTS
#: How often each kind of :data:`DROPPED_FAULTS` is planned in a schedule.
DROPPED_FAULT_CHANCE = 0.15
#: How often each kind of :data:`IDENTITY_FAULTS` is planned in a schedule.
IDENTITY_FAULT_CHANCE = 0.15

#: Relative weights when drawing a plan: the load first, then what most often goes wrong.
_WEIGHTS = dict.fromkeys(CLUSTER_FAULTS + EVENT_FAULTS + PLATFORM_FAULTS, 1.0)
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
    kinds = [k for k in _WEIGHTS if _WEIGHTS[k] > 0]
    weights = [_WEIGHTS[k] for k in kinds]
    for _ in range(rng.randint(2, 8)):
        kind = rng.choices(kinds, weights)[0]
        plan.append(PlannedFault(kind, rng.randrange(0, horizon_points), rng.randrange(1 << 30)))
    return sorted(plan, key=lambda f: (f.at_point, f.kind, f.seed))


def draw_dropped_fault_plan(
    rng: random.Random,
    *,
    horizon_points: int = 400,
    chance: float = DROPPED_FAULT_CHANCE,
    kinds: tuple[str, ...] = DROPPED_FAULTS,
) -> list[PlannedFault]:
    """Each of ``kinds`` (:data:`DROPPED_FAULTS` unless told) with probability ``chance``, at a
    random point, from ``rng`` alone: a stream of its own, so :func:`draw_plan` draws for a seed
    what it always did."""
    plan: list[PlannedFault] = []
    for kind in kinds:
        if rng.random() < chance:
            plan.append(PlannedFault(kind, rng.randrange(0, horizon_points), rng.randrange(1 << 30)))
        else:
            rng.random(), rng.random()  # keep every kind's draws where they are, whatever came before
    return plan


# -- what the faults aim at and write ---------------------------------------------------------

#: The functions each identity fault fires before, on the execution's own node.
IDENTITY_BEFORE = {
    "kubelet-re-registers": (CORDON.name, DRAIN.name),
    "person-takes-node-back": (DRAIN.name, REBOOT.name, TERMINATE.name),
    "instance-untagged": (REBOOT.name, TERMINATE.name),
}
#: The function each lesser-reason fault fires before (the simulation's hook, before the handler runs).
LESSER_REASON_BEFORE = {
    "lesser-reason-before-admit": (ADMIT.name,),
    "lesser-reason-mid-drain": (DRAIN.name,),
    "lesser-reason-before-instance-action": (REBOOT.name, TERMINATE.name),
}
#: The pods that a refuse setting refuses while a hold covers them (refuse-beside-held): an app
#: label an allow-completion eviction mode names in such a schedule's settings.
HELD_CHECKPOINT_APP = "checkpointer"

#: The kernel line of each severity that NodeHeal's NPD config writes onto GPUProblem (its
#: message; the rule's reason is in nodeheal.sim.seeded.fault_effects). There is no ``none``: the Xids
#: NodeHeal decides none (13, for one) are temporary rules there, Node Events that never touch
#: GPUProblem; the simulation's ``none`` fault is the node monitoring agent's Xid 63. Xid 154 moving
#: to Drain P2P is a permanent rule (GPURecoveryActionPending) that NodeHeal decides ``alert``.
XID_MESSAGES = {
    "replace": "NVRM: Xid (PCI:0000:53:00): 79, pid=2411, name=python3, GPU has fallen off the bus.",
    "reboot": "NVRM: Xid (PCI:0000:97:00): 48, pid=2411, name=python3, "
    "An uncorrectable double bit error (DBE)",
    "alert": "NVRM: Xid (PCI:0000:53:00): 154, GPU recovery action changed "
    "from 0x0 (None) to 0x3 (Drain P2P)",
}
