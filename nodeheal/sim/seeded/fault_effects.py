"""What each planned fault does to the simulated world (nodeheal.sim.seeded.faults lists them)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from nodeheal.actions import Action, Mode
from nodeheal.events import NodeConditionEvent
from nodeheal.sim.seeded.faults import (
    EVENT_FAULTS,
    HELD_CHECKPOINT_APP,
    XID_MESSAGES,
    PlannedFault,
)
from nodeheal.sim.seeded.schedule import Simulation
from nodeheal.workflow import budget

#: The conditions the simulated detectors write, with their bad status. GPUProblem and
#: KernelDeadlock are NPD's log monitor's, AcceleratedHardwareReady the node monitoring agent's
#: (nodeheal.sim.detectors.CONDITIONS); every write goes through ``World.report_condition``.
GPU_CONDITIONS = (
    ("GPUProblem", "True"),
    ("AcceleratedHardwareReady", "False"),
    ("KernelDeadlock", "True"),
)
#: Faults that act on one of the in-flight calls (armed now, consumed by the next matching call).
ARMED = frozenset(
    {
        "api-5xx",
        "api-slow",
        "api-timeout",
        "lambda-killed-after-side-effect",
        "ledger-contention",
        "ec2-throttled",
        "finalizer-event-lost",
        # The dropped-fault class: each fires at the next call it targets (nodeheal.sim.seeded.faults).
        "lesser-reason-before-admit",
        "lesser-reason-mid-drain",
        "lesser-reason-before-instance-action",
        "contender-ends",
        "timeout-in-record",
        # Identity changes: each fires before the step it aims at (IDENTITY_BEFORE).
        "kubelet-re-registers",
        "person-takes-node-back",
        "instance-untagged",
    }
)
#: GPUProblem as NodeHeal's NPD config writes it (deploy/node-problem-detector/gpu-monitor.json):
#: the reason of the permanent rule the kernel line of each severity (faults.XID_MESSAGES)
#: matches. No permanent rule of that config is decided ``none``: every Xid the default policy
#: decides none is a temporary rule there, a Node Event that never touches GPUProblem.
_NPD_REASONS = {
    "replace": "GPUFellOffBus",
    "reboot": "GPUDoubleBitECCError",
    "alert": "GPURecoveryActionPending",
}
#: The Xid of each severity on AcceleratedHardwareReady. The node monitoring agent sets the
#: condition only for the Xids it rates fatal (monitors/nvidia/dcgm/dcgm_policies.go,
#: WellKnownXidCodes, which hold 79, 48 and 63), with reason ``NvidiaXID<n>Error`` and the message
#: of handleXidFinding. Xid 63 is its ``none``: NVIDIA's catalog says informational
#: (INFORMATIONAL_TREND), and NodeHeal's default policy decides none.
_NMA_XIDS = {"replace": 79, "reboot": 48, "none": 63}
NMA_XID_MESSAGE = "detected XID-{xid} on the instance, review kernel logs for additional information."
#: The lesser faults each GPU condition's detector can write (message-less-severe).
_LESSER = {"GPUProblem": ("reboot", "alert"), "AcceleratedHardwareReady": ("reboot", "none")}
#: The log line NPD's DockerHung rule matches (NPD config/kernel-monitor.json): its message.
DOCKER_HUNG = "task docker:{pid} blocked for more than 120 seconds."


def _fault(condition_type: str, severity: str, rng: random.Random) -> tuple[str, str]:
    """(reason, message) the detector that owns ``condition_type`` reports for a fault of
    ``severity``. NPD's log monitor names the rule's reason and carries the kernel line; the node
    monitoring agent names the Xid in its reason and writes its own sentence."""
    if condition_type == "AcceleratedHardwareReady":
        xid = _NMA_XIDS[severity]
        return f"NvidiaXID{xid}Error", NMA_XID_MESSAGE.format(xid=xid)
    if condition_type == "KernelDeadlock":
        return "DockerHung", DOCKER_HUNG.format(pid=rng.randrange(1000, 9999))
    return _NPD_REASONS[severity], _message(severity, rng)


def _message(severity: str, rng: random.Random) -> str:
    base = XID_MESSAGES[severity]
    return base.replace("pid=2411", f"pid={rng.randrange(1000, 9999)}")


def _bad_conditions(sim: Simulation) -> list[tuple[str, str]]:
    found = []
    for name in sorted(sim.world.nodes):
        for condition_type, _ in GPU_CONDITIONS:
            if sim.world.is_bad(name, condition_type):
                found.append((name, condition_type))
        if sim.world.is_bad(name, "Ready"):
            found.append((name, "Ready"))
    return found


def _pick(rng: random.Random, items: list[Any]) -> Any:
    return items[rng.randrange(len(items))] if items else None


def write_lesser_reason(sim: Simulation, name: str, condition_type: str, rng: random.Random) -> bool:
    """A lesser fault on a bad GPU condition, as its detector writes it (message-less-severe and
    the lesser-reason faults): NPD's log monitor, for another reason, rewrites reason, message and
    transition time (for the same reason it keeps the old message); the node monitoring agent
    keeps the transition time, takes the newest reason and joins the messages with "; "."""
    world = sim.world
    if condition_type not in _LESSER or not world.is_bad(name, condition_type):
        return False
    current = world.condition(name, condition_type) or {}
    severity = rng.choice(_LESSER[condition_type])
    return world.report_condition(
        name, condition_type, str(current["status"]), *_fault(condition_type, severity, rng)
    )


#: Lesser Xids of the multi-line message whose fatal line comes last (fatal-xid-last): about 130
#: bytes each, as the driver logs them; forty of them exceed the 4 KiB bound on their own.
_LESSER_XID_LINE = (
    "NVRM: Xid (PCI:0000:53:00): 13, pid={pid}, name=python3, Graphics SM Warp Exception on "
    "(GPC 0, TPC 1, SM 0): Out Of Range Address"
)


def fatal_xid_last_message(rng: random.Random) -> str:
    """NPD's message when a rule's pattern matched across its log buffer (``log_buffer.go`` joins
    the buffered lines with newlines): many lesser Xid lines, the fatal Xid 79 last."""
    lines = [_LESSER_XID_LINE.format(pid=rng.randrange(1000, 9999)) for _ in range(rng.randint(35, 45))]
    return "\n".join([*lines, XID_MESSAGES["replace"]])


def inject(sim: Simulation, fault: PlannedFault) -> None:
    rng = random.Random(fault.seed)
    kind = fault.kind
    sim.invariants.coverage[kind] += 1
    world = sim.world
    # A node whose providerID is not set yet names no instance: no fault that needs one picks it.
    nodes = sorted(name for name in world.nodes if name not in world.unnamed_instances)
    if kind in ARMED:
        sim.armed[kind] = sim.armed.get(kind, 0) + 1
        return
    if kind == "gpu-fault":
        name = _pick(rng, nodes)
        if name is None:
            return
        condition_type, status = GPU_CONDITIONS[rng.randrange(len(GPU_CONDITIONS))]
        # KernelDeadlock has one fault (DockerHung); a GPU condition draws how bad its fault is.
        severity = (
            "replace"
            if condition_type == "KernelDeadlock"
            else rng.choice(["replace", "replace", "reboot", "none"])
        )
        if severity == "none":
            # A fault the default policy decides none, written as a real detector writes one. The
            # shipped NPD config turns Xid 13 (and every Xid decided none) into a Node Event only,
            # never GPUProblem; the node monitoring agent sets AcceleratedHardwareReady=False for
            # Xid 63 (NvidiaXID63Error), which NodeHeal decides none.
            condition_type, status = "AcceleratedHardwareReady", "False"
        reason, message = _fault(condition_type, severity, rng)
        world.report_condition(name, condition_type, status, reason, message)
        return
    bad = _bad_conditions(sim)
    if kind in ("condition-clears", "condition-flaps"):
        target = _pick(rng, bad)
        if target is None:
            return
        name, condition_type = target
        previous = world.condition(name, condition_type) or {}
        if condition_type == "Ready":
            world.set_condition(name, "Ready", "True", "KubeletReady", "kubelet is posting ready status")
        else:
            # NPD's log monitor and the node monitoring agent turn a condition healthy only when
            # they start again (initialConditions, initializeManagedConditions).
            world.restart_detector(name, condition_type)
        if kind == "condition-flaps":
            delay = rng.uniform(1, 120)
            write = world.set_condition if condition_type == "Ready" else world.report_condition

            def again() -> None:
                write(
                    name,
                    condition_type,
                    str(previous.get("status")),
                    str(previous.get("reason")),
                    str(previous.get("message")),
                )

            world.at(delay, f"{condition_type} on {name.split('.')[0]} goes bad again", again)
        return
    if kind == "second-condition":
        target = _pick(rng, bad)
        if target is None:
            return
        name, condition_type = target
        others = [c for c in GPU_CONDITIONS if c[0] != condition_type and not world.is_bad(name, c[0])]
        other = _pick(rng, others)
        if other is not None:
            severity = rng.choice(["replace", "reboot"])
            world.report_condition(name, other[0], other[1], *_fault(other[0], severity, rng))
        return
    if kind in ("message-more-severe", "message-less-severe"):
        gpu = [(n, t) for n, t in bad if t in ("GPUProblem", "AcceleratedHardwareReady")]
        target = _pick(rng, gpu)
        if target is None:
            return
        name, condition_type = target
        if kind == "message-less-severe":
            write_lesser_reason(sim, name, condition_type, rng)
            return
        current = world.condition(name, condition_type) or {}
        # As the detector writes it (write_lesser_reason says how).
        world.report_condition(
            name, condition_type, str(current["status"]), *_fault(condition_type, "replace", rng)
        )
        return
    if kind == "fatal-xid-last":
        name = _pick(rng, nodes)
        if name is not None:
            world.report_condition(name, "GPUProblem", "True", "GPUXidErrors", fatal_xid_last_message(rng))
        return
    if kind == "refuse-beside-held":
        _refuse_beside_held(sim, rng)
        return
    if kind == "provider-id-late":
        like = _pick(rng, [n for n in nodes if world.pool_of(world.nodes[n])[0] == "karpenter"])
        if like is None:
            return
        name = world.join_without_provider_id(world.nodes[like])
        condition_type, status = GPU_CONDITIONS[rng.randrange(2)]
        world.report_condition(name, condition_type, status, *_fault(condition_type, "replace", rng))
        sim.invariants.fired[kind] += 1

        def initialize() -> None:
            world.set_provider_id(name)

        world.at(60, f"the cloud controller sets the providerID of {name}", initialize)
        return
    if kind == "node-replaced-same-name":
        name = _pick(rng, nodes)
        if name is None:
            return
        old = world.nodes[name]
        world.instances[world.instance_of(name)].state = "terminated"
        world.delete_node_object(name)
        world.join_node(name, old)
        return
    if kind == "instance-gone":
        name = _pick(rng, nodes)
        if name is not None:
            reclaimed = world.instances[world.instance_of(name)]
            if reclaimed.state == "running":
                reclaimed.state = "shutting-down"
                world.instance_stopped(reclaimed.instance_id)
        return
    if kind == "karpenter-deletes-node":
        name = _pick(rng, nodes)
        if name is not None:
            world.instances[world.instance_of(name)].state = "terminated"
            world.delete_node_object(name)
        return
    if kind == "kubelet-dead":
        name = _pick(rng, nodes)
        if name is not None:
            world.dead_kubelets.add(name)
            world.set_condition(
                name, "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
            )
        return
    if kind in EVENT_FAULTS and kind != "exporter-resync":
        _event_fault(sim, kind, rng)
        return
    if kind == "exporter-resync":
        for event in sim.tracker.resync_from_memory():
            sim._publish(event, "resync")
        return
    if kind == "lock-ttl-expiry":
        # Time passes beyond the lock TTL with nothing running (an outage of the region's Step
        # Functions and Lambda): every lock taken before it has expired when work resumes.
        outage = timedelta(seconds=sim.settings.lock_ttl_seconds + 1)
        sim.invariants.outages.append((sim.clock, outage))
        sim.clock += outage
        return
    if kind in ("execution-timeout", "execution-abort"):
        running = sorted(
            (
                e
                for e in sim.executions.values()
                if not e.run.done and not any(inv.execution == e.run.name for inv in sim.stack)
            ),
            key=lambda e: e.run.name,
        )
        target = _pick(rng, running)
        if target is not None:
            if kind == "execution-timeout":
                target.run.stop("TIMED_OUT", sim.clock, "States.Timeout", "simulated workflow timeout")
            else:
                target.run.stop("ABORTED", sim.clock, "", "aborted by a person")
            sim._end(target)
        return
    if kind in ("pause", "resume", "breaker-reset"):
        levers: dict[str, Callable[[budget.ClusterAdmissionState], budget.ClusterAdmissionState | None]] = {
            "pause": lambda state: budget.paused(state, "simulated maintenance"),
            "resume": budget.resumed,
            "breaker-reset": budget.closed_breaker,
        }
        if sim.ledger.operator_change(world.cluster, levers[kind]):
            sim.invariants.operator_changed(kind)
        return
    if kind == "mode-flip":
        sim.deployed_mode = rng.choice([Mode.DRY_RUN.value, Mode.CORDON_ONLY.value, Mode.FULL.value])
        sim.log(f"redeployed in {sim.deployed_mode} mode")
        return
    raise ValueError(f"unknown fault kind {kind!r}")


def _event_fault(sim: Simulation, kind: str, rng: random.Random) -> None:
    genuine = [d for d in sim.sent_events if d.kind in ("genuine", "resync")]
    original = _pick(rng, genuine)
    if original is None:
        return
    detail = dict(original.envelope["detail"])
    event = NodeConditionEvent.from_detail(detail)
    if kind == "duplicate-event":
        sim._publish(event, "duplicate")
    elif kind == "replayed-event":
        # An archive replay: the same event, delivered again much later.
        sim._publish(event, "replayed", delay=rng.uniform(60, 3600))
    elif kind == "forged-event":
        other = "nodeheal.exporter.another-cluster"
        sim._publish(
            replace(event, condition=replace(event.condition, reason="Forged")), "forged", source=other
        )
    elif kind == "foreign-event":
        sim._publish(replace(event, cluster="someone-elses-cluster"), "foreign")
    elif kind == "future-dated-event":
        later = sim.clock + timedelta(hours=rng.uniform(1, 48))
        sim._publish(
            replace(event, observed_at=later, condition=replace(event.condition, last_transition_time=later)),
            "future-dated",
        )
    elif kind == "stale-event":
        sim._publish(event, "stale", delay=rng.uniform(1000, 5000))
    elif kind == "oversized-event":
        huge = event.condition.message + " " + "x" * rng.randrange(5_000, 200_000)
        sim._publish(replace(event, condition=replace(event.condition, message=huge)), "oversized")


def _refuse_beside_held(sim: Simulation, rng: random.Random) -> None:
    """A pod that a refuse setting refuses and a hold covers, on a node with ordinary pods: a
    do-not-disrupt pod or an allow-completion one, with an emptyDir under ``emptyDir: refuse`` or
    unmanaged under ``unmanagedPods: refuse`` (the schedule's settings say which, see
    ``Simulation._settings``). A bad node is preferred: its drain is the one that must refuse."""
    world = sim.world
    drain = sim.settings.drain
    classes = [
        c
        for c, setting in (("emptyDir", drain.empty_dir), ("unmanaged", drain.unmanaged_pods))
        if setting == "refuse"
    ]
    if not classes:
        return
    bad = sorted({name for name, _ in _bad_conditions(sim)})
    name = _pick(rng, bad) or _pick(rng, sorted(world.nodes))
    if name is None:
        return
    refused = rng.choice(classes)
    pod = world.add_pod(
        name,
        HELD_CHECKPOINT_APP,
        owner=None if refused == "unmanaged" else "ReplicaSet",
        empty_dir=refused == "emptyDir",
    )
    if rng.random() < 0.5:
        pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] = "true"
    sim.log(f"  {pod['metadata']['name']} on {name.split('.')[0]}: {refused}, held")


def provoke_a_contender(sim: Simulation, name: str, rng: random.Random) -> None:
    """contender-ends needs a contender: a node whose lock holder is about to mutate it for a lesser
    fault gets a replace-class fault on another of its GPU conditions, so the execution that fault
    starts finds the holder's step running and waits to take the node over (D2). The armed fault
    ends that execution before it does (``Simulation._after_admit``)."""
    world = sim.world
    held = {
        lock.node: lock
        for _, lock in sim.ledger.observed_locks(world.cluster)
        if lock.action.cost < Action.REPLACE.cost
    }
    if name not in world.nodes or name not in held:
        return
    healthy = [c for c in GPU_CONDITIONS if c[0] != "KernelDeadlock" and not world.is_bad(name, c[0])]
    other = _pick(rng, healthy)
    if other is not None:
        world.report_condition(name, other[0], other[1], *_fault(other[0], "replace", rng))
