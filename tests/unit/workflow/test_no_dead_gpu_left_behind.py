"""The paths where a fatal fault was dropped (issue: no dead GPU left behind), each as it was
reproduced, over the real admit and the in-memory ledger.

The detectors are written as their source writes them (docs/architecture.md, D19): node-problem-detector
rewrites reason, message AND lastTransitionTime when a permanent rule with another reason matches
(``pkg/systemlogmonitor/log_monitor.go``, ``generateStatus``), while the status stays True.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from nodeheal.actions import Action, Mode
from nodeheal.conditions import Condition
from nodeheal.errors import SupersededError
from nodeheal.kube_views import LiveNode
from nodeheal.workflow.admission import PROCEED, STOP, WAIT, admit
from nodeheal.workflow.guard import MUTATION_BUSY
from nodeheal.workflow.locks import LockClaim
from nodeheal.workflow.state import WorkflowState
from tests.unit.workflow.fakes import (
    CLUSTER,
    INSTANCE,
    NOW,
    XID_79,
    FakeLedger,
    FakeNodes,
    kube,
    live_node,
    workflow_state,
)

XID_154_REBOOT = "NVRM: Xid (PCI:0000:53:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
XID_48 = "NVRM: Xid (PCI:0000:53:00): 48, pid=2411, name=python3, An uncorrectable double bit error"
XID_13 = "NVRM: Xid (PCI:0000:53:00): 13, pid=2411, name=python3, Graphics SM Warp Exception"


def npd(reason: str, message: str, at: str) -> dict[str, Any]:
    """GPUProblem as NodeHeal's NPD config writes it (deploy/node-problem-detector/gpu-monitor.json)."""
    return {
        "type": "GPUProblem",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "lastHeartbeatTime": at,
    }


def nma(status: str, reason: str, message: str, at: str) -> dict[str, Any]:
    """AcceleratedHardwareReady as the EKS node monitoring agent writes it."""
    return {
        "type": "AcceleratedHardwareReady",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "lastHeartbeatTime": at,
    }


def with_conditions(node: LiveNode, *raws: dict[str, Any]) -> LiveNode:
    """The same Node object and boot, with these conditions written over its own."""
    written = {raw["type"]: Condition.from_api(raw) for raw in raws}
    return replace(node, conditions={**node.conditions, **written})


FELL_OFF = npd("GPUFellOffBus", XID_79, "2026-11-21T10:00:00Z")
#: Xid 154 lands 30 s later: NPD's GPUResetRequired rule matches, and the reason, the message and
#: the transition time are all rewritten; the status stays True.
RESET_REQUIRED = npd("GPUResetRequired", XID_154_REBOOT, "2026-11-21T10:00:30Z")


def event_state(
    node: LiveNode, condition: dict[str, Any], *, execution: str, boot: bool = True, **kw: Any
) -> WorkflowState:
    """The execution an exporter's event started: contract 1.1, with the node's boot when ``boot``."""
    state = workflow_state(node, condition=condition, execution=execution, **kw)
    raw = dict(state.raw)
    raw["event"] = {
        **raw["event"],
        "schemaVersion": "1.1",
        "node": {**raw["event"]["node"], **({"bootID": node.boot_id} if boot else {})},
    }
    return WorkflowState.parse(raw)


def readmit(state: WorkflowState, previous: Any, nodes: FakeNodes, ledger: FakeLedger, at: Any) -> Any:
    raw = {**state.raw, "admission": previous.to_json()}
    ledger.now = at
    return admit(WorkflowState.parse(raw), kube(nodes), ledger, at, mode=Mode.FULL)


# -- 1. the episode survives a change of reason ----------------------------------------------------


def test_xid_79_overwritten_by_xid_154_before_admit_is_still_replaced() -> None:
    """As reproduced on the local pipeline: Xid 79 is written, Xid 154 (Node Reboot Required)
    lands before admit re-reads the node. The event saw Xid 79 on this boot: the node is replaced,
    not rebooted and uncordoned."""
    node = live_node()
    nodes = FakeNodes({"gpu-a": with_conditions(node, RESET_REQUIRED)})
    ledger = FakeLedger()
    ledger.now = NOW
    decided = admit(event_state(node, FELL_OFF, execution="xid79"), kube(nodes), ledger, NOW, mode=Mode.FULL)
    assert decided.verdict == PROCEED and decided.decision is not None
    assert decided.decision.action is Action.REPLACE, decided.decision.reason
    # And the memory keeps it for every later execution of the instance (the Xid 154 event's own).
    later = admit(
        event_state(node, RESET_REQUIRED, execution="xid154"),
        kube(nodes),
        ledger,
        NOW + timedelta(seconds=5),
        mode=Mode.FULL,
    )
    assert later.decision is not None and later.decision.planned_action is Action.REPLACE


@pytest.mark.parametrize(
    "lesser",
    [
        npd("GPUDoubleBitECCError", XID_48, "2026-11-21T10:01:00Z"),
        RESET_REQUIRED,
        npd(
            "GPURecoveryActionPending",
            "NVRM: Xid (PCI:0000:53:00): 154, GPU recovery action changed from 0x0 (None) to 0x8 (Unknown)",
            "2026-11-21T10:01:00Z",
        ),
    ],
    ids=["GPUDoubleBitECCError", "GPUResetRequired", "GPURecoveryActionPending"],
)
def test_a_remembered_xid_79_decides_after_any_lesser_reason_moved_the_transition_time(
    lesser: dict[str, Any],
) -> None:
    """Admit saw Xid 79 (and remembered it); NPD then rewrote the condition with a lesser reason and
    a new transition time. An event from an exporter that sends no boot still decides replace:
    the memory's sighting belongs to the instance's episode, not to one transition time."""
    node = with_conditions(live_node(), FELL_OFF)
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    ledger.now = NOW
    first = admit(event_state(node, FELL_OFF, execution="first"), kube(nodes), ledger, NOW, mode=Mode.DRY_RUN)
    assert first.decision is not None and first.decision.planned_action is Action.REPLACE
    nodes.nodes["gpu-a"] = with_conditions(node, lesser)
    later = NOW + timedelta(minutes=2)
    ledger.now = later
    again = admit(
        event_state(node, lesser, execution="lesser", boot=False), kube(nodes), ledger, later, mode=Mode.FULL
    )
    assert again.decision is not None
    assert again.decision.action is Action.REPLACE, again.decision.reason


def test_a_lesser_reason_the_policy_ignores_does_not_hide_the_xid_79() -> None:
    """A custom rule that decides ``none`` for the lesser reason: the Xid 79 is still handled."""
    from nodeheal.config import PolicyOverrides, PolicySettings, RemediationSettings

    ignore = PolicyOverrides(reason_actions={"GPUResetRequired": Action.NONE})
    settings = RemediationSettings(policy=PolicySettings(overrides=ignore))
    node = live_node()
    nodes = FakeNodes({"gpu-a": with_conditions(node, RESET_REQUIRED)})
    ledger = FakeLedger()
    decided = admit(
        event_state(node, FELL_OFF, execution="xid79", settings=settings),
        kube(nodes),
        ledger,
        NOW,
        mode=Mode.FULL,
    )
    assert decided.decision is not None and decided.decision.action is Action.REPLACE


def test_a_reboot_ends_the_episode() -> None:
    """Another boot of the instance is another episode: a fault of the old boot decides nothing."""
    node = with_conditions(live_node(), FELL_OFF)
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    admit(event_state(node, FELL_OFF, execution="first"), kube(nodes), ledger, NOW, mode=Mode.DRY_RUN)
    rebooted = replace(
        with_conditions(node, npd("GPUDoubleBitECCError", XID_48, "2026-11-21T10:20:00Z")), boot_id="new-boot"
    )
    nodes.nodes["gpu-a"] = rebooted
    later = NOW + timedelta(minutes=20)
    ledger.now = later
    again = admit(
        event_state(rebooted, npd("GPUDoubleBitECCError", XID_48, "2026-11-21T10:20:00Z"), execution="after"),
        kube(nodes),
        ledger,
        later,
        mode=Mode.FULL,
    )
    assert again.decision is not None and again.decision.action is Action.REBOOT, again.decision.reason


def test_only_a_read_of_the_whole_node_healthy_ends_the_episode() -> None:
    """D19: the episode ends when every condition that was bad is seen healthy. A read showing
    GPUProblem healthy while AcceleratedHardwareReady is bad ends nothing; a read of the whole node
    healthy does, and the next fault of the same boot decides on its own."""
    node = with_conditions(
        live_node(), FELL_OFF, nma("False", "NvidiaXID48Error", XID_48, "2026-11-21T10:00:10Z")
    )
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    admit(event_state(node, FELL_OFF, execution="first"), kube(nodes), ledger, NOW, mode=Mode.DRY_RUN)
    healthy_gpu = npd("GPUHealthy", "", "2026-11-21T10:06:00Z") | {
        "status": "False",
        "reason": "NoGPUProblem",
    }
    # GPUProblem healthy, the agent's condition still bad: the Xid 79 still decides for it.
    nodes.nodes["gpu-a"] = with_conditions(node, healthy_gpu)
    at = NOW + timedelta(minutes=2)
    ledger.now = at
    cleared = admit(
        event_state(node, FELL_OFF, execution="first-retry"), kube(nodes), ledger, at, mode=Mode.DRY_RUN
    )
    assert cleared.verdict == STOP
    agent = admit(
        event_state(
            node, nma("False", "NvidiaXID48Error", XID_48, "2026-11-21T10:00:10Z"), execution="agent"
        ),
        kube(nodes),
        ledger,
        at,
        mode=Mode.DRY_RUN,
    )
    assert agent.decision is not None and agent.decision.planned_action is Action.REPLACE
    # The whole node read healthy: the episode is over.
    whole = with_conditions(
        node, healthy_gpu, nma("True", "AcceleratedHardwareReady", "", "2026-11-21T10:07:00Z")
    )
    nodes.nodes["gpu-a"] = whole
    at = NOW + timedelta(minutes=3)
    ledger.now = at
    assert (
        admit(event_state(node, FELL_OFF, execution="first-again"), kube(nodes), ledger, at).verdict == STOP
    )
    assert all(s.cleared_at is not None for s in ledger.sightings(CLUSTER, INSTANCE))
    # A new fault of the same boot, after that: decided on its own.
    fresh = npd("GPUDoubleBitECCError", XID_48, "2026-11-21T10:30:00Z")
    nodes.nodes["gpu-a"] = with_conditions(whole, fresh)
    at = NOW + timedelta(minutes=30)
    ledger.now = at
    new = admit(event_state(whole, fresh, execution="new"), kube(nodes), ledger, at, mode=Mode.FULL)
    assert new.decision is not None and new.decision.action is Action.REBOOT, new.decision.reason


def test_a_lesser_event_waits_behind_the_remediation_of_a_worse_fault() -> None:
    """A lesser fault that arrives while another execution remediates the node records no "alert"
    or "no action needed" of its own: it waits and is re-evaluated when the holder ends."""
    node = with_conditions(
        live_node(), nma("False", "DCGMError", "DCGM failed to start", "2026-11-21T10:01:00Z")
    )
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    ledger.now = NOW
    ledger.acquire_lock(
        CLUSTER, INSTANCE, "holder", timedelta(hours=2), LockClaim("gpu-a", "GPUProblem", Action.REPLACE, NOW)
    )
    lesser = nma("False", "DCGMError", "DCGM failed to start", "2026-11-21T10:01:00Z")
    waiting = admit(event_state(node, lesser, execution="lesser"), kube(nodes), ledger, NOW, mode=Mode.FULL)
    assert waiting.verdict == WAIT and "waiting behind it" in waiting.note
    # The holder replaced the node: the waiter is skipped, not an alert of its own.
    del nodes.nodes["gpu-a"]
    ledger.release_lock(CLUSTER, INSTANCE, "holder")
    gone = readmit(
        event_state(node, lesser, execution="lesser"), waiting, nodes, ledger, NOW + timedelta(minutes=5)
    )
    assert gone.verdict == STOP and "no longer exists" in gone.note


# -- 2. a contender that never takes over ------------------------------------------------------------

XID_48_CONDITION = npd("GPUDoubleBitECCError", XID_48, "2026-11-21T10:00:00Z")
NVLINK = nma("False", "NvidiaNVLinkError", "NVLink error on link 3", "2026-11-21T10:04:00Z")
AGENT_HEALTHY = nma("True", "AcceleratedHardwareReady", "", "2026-11-21T10:06:00Z")


def _holder_draining(ledger: FakeLedger) -> None:
    """Execution H (Xid 48, reboot) has cordoned the node and a drain round is running."""
    ledger.now = NOW
    ledger.acquire_lock(
        CLUSTER, INSTANCE, "holder", timedelta(hours=2), LockClaim("gpu-a", "GPUProblem", Action.REBOOT, NOW)
    )
    ledger.claim_mutation(CLUSTER, INSTANCE, "holder", step="drain", busy_for=MUTATION_BUSY)


def _contending() -> tuple[LiveNode, FakeNodes, FakeLedger, WorkflowState, Any]:
    """H drains (Xid 48, reboot) and C (NVLink, replace) has just contended it: C waits."""
    node = with_conditions(live_node(), XID_48_CONDITION, NVLINK)
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    _holder_draining(ledger)
    contender = event_state(node, NVLINK, execution="contender")
    return node, nodes, ledger, contender, admit(contender, kube(nodes), ledger, NOW, mode=Mode.FULL)


def test_a_contender_whose_fault_clears_takes_over_the_holders_fault() -> None:
    """Reproduced with the real admit: C (NVLink, replace) contends H's busy drain; H stops at its
    next claim and ends superseded; C's condition clears before C polls again. C must not stop: H's
    fault is still on the node and nobody holds it. C re-admits H's condition (and the episode's
    worst, its own NVLink fault, still decides)."""
    node, nodes, ledger, contender, waiting = _contending()
    assert waiting.verdict == WAIT and waiting.displaced == {
        "execution": "holder",
        "conditionType": "GPUProblem",
    }
    with pytest.raises(SupersededError):
        ledger.claim_mutation(CLUSTER, INSTANCE, "holder", step="drain", busy_for=MUTATION_BUSY)
    ledger.release_lock(CLUSTER, INSTANCE, "holder")  # H's Record outcome
    nodes.nodes["gpu-a"] = with_conditions(node, AGENT_HEALTHY)
    taken = readmit(contender, waiting, nodes, ledger, NOW + timedelta(seconds=30))
    assert taken.verdict == PROCEED and taken.lock_held, taken.note
    assert taken.condition is not None and taken.condition.type == "GPUProblem"
    assert "re-admitting GPUProblem of execution holder" in taken.note
    assert taken.decision is not None and taken.decision.action is Action.REPLACE, taken.decision.reason
    assert ledger.lock_holder(CLUSTER, INSTANCE) == "contender"
    # Every later step of C works on the condition it took over.
    after = WorkflowState.parse({**contender.raw, "admission": taken.to_json()})
    assert after.condition_type == "GPUProblem"


def test_a_contender_whose_fault_clears_while_the_holder_runs_hands_the_node_back() -> None:
    """C's fault clears while H still holds the node: C withdraws its mark and stops, and H goes on
    with its own fault instead of stopping for a successor that never comes."""
    node, nodes, ledger, contender, waiting = _contending()
    assert waiting.verdict == WAIT
    nodes.nodes["gpu-a"] = with_conditions(node, AGENT_HEALTHY)
    stopped = readmit(contender, waiting, nodes, ledger, NOW + timedelta(seconds=10))
    assert stopped.verdict == STOP
    ledger.claim_mutation(CLUSTER, INSTANCE, "holder", step="drain", busy_for=MUTATION_BUSY)
    assert ledger.lock_holder(CLUSTER, INSTANCE) == "holder"


def test_a_preempting_execution_whose_fault_clears_takes_over_the_preempted_fault() -> None:
    """C preempted H while H was still confirming; C's own fault then clears before C acts: H's
    fault is handled by C, not dropped."""
    node = with_conditions(live_node(), XID_48_CONDITION, NVLINK)
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    ledger.now = NOW
    ledger.acquire_lock(
        CLUSTER,
        INSTANCE,
        "holder",
        timedelta(hours=2),
        LockClaim("gpu-a", "GPUProblem", Action.REBOOT, NOW + timedelta(minutes=5)),
    )
    contender = event_state(node, NVLINK, execution="contender")
    preempting = admit(contender, kube(nodes), ledger, NOW, mode=Mode.FULL)
    assert preempting.preempted == "holder"
    nodes.nodes["gpu-a"] = with_conditions(node, AGENT_HEALTHY)
    taken = readmit(contender, preempting, nodes, ledger, NOW + timedelta(seconds=30))
    assert taken.verdict == PROCEED and taken.condition is not None and taken.condition.type == "GPUProblem"


def test_a_fault_that_cleared_inside_its_confirmation_time_is_not_remembered_as_confirmed() -> None:
    """The episode outlives a condition's recovery, but confirmation still means what it says: a
    fault that needed 120 s and cleared after 30 s was a flap. Bad again (any reason) long enough,
    or seen bad past its confirmation time, it counts."""
    from nodeheal.config import PolicySettings
    from nodeheal.workflow.episode import remembered_worst, sighting_of

    smi = npd(
        "GPUHardwareError", "nvidia-smi failed: Unable to determine the device handle", "2026-11-21T10:00:00Z"
    )
    agent = nma("False", "NvidiaXID48Error", XID_48, "2026-11-21T10:00:00Z")
    node = with_conditions(live_node(), smi, agent)
    sighting = sighting_of(
        Condition.from_api(smi),
        node,
        PolicySettings(),
        execution="first",
        now=NOW.replace(minute=0, second=30),
    )
    assert sighting is not None and sighting.confirm_seconds == 120 and sighting.action is Action.REPLACE
    healed = with_conditions(node, npd("NoGPUProblem", "", "2026-11-21T10:00:40Z") | {"status": "False"})
    assert remembered_worst([sighting], healed, NOW) is None
    assert remembered_worst([sighting], node, NOW) is not None
    seen_late = replace(sighting, seen_at=NOW.replace(minute=2, second=30))
    assert remembered_worst([seen_late], healed, NOW) is not None


class _Notifier:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def publish(self, notification: Any) -> str:
        self.sent.append(notification)
        return f"msg-{len(self.sent)}"


def _holder_state(node: LiveNode, stopped: dict[str, str]) -> WorkflowState:
    """H's state when its drain round stopped: admitted for Xid 48 (reboot), cordoned."""
    state = event_state(node, XID_48_CONDITION, execution="holder")
    admission = {
        "verdict": "proceed",
        "decision": {"action": "reboot", "plannedAction": "reboot", "reason": "Xid 48", "xid": 48},
        "node": {
            "name": node.name,
            "uid": node.uid,
            "instanceId": node.instance_id,
            "providerId": node.provider_id,
            "bootId": node.boot_id,
        },
        "condition": XID_48_CONDITION,
        "lockHeld": True,
        "at": "2026-11-21T10:05:00.000Z",
    }
    return WorkflowState.parse(
        {**state.raw, "admission": admission, "cordon": {"performed": True}, "stopped": stopped}
    )


def _superseded(message: str) -> dict[str, str]:
    return {"Error": "SupersededError", "Cause": f'{{"errorMessage": "{message}"}}'}


def test_a_superseded_holder_tells_a_person_when_no_successor_holds_the_node() -> None:
    """H stops for C's contender mark while C still waits: nobody holds the node at H's record,
    which carries NodeHeal's cordon and H's fault. Before, ``superseded`` was never notified."""
    from nodeheal.workflow.recording import record

    node = with_conditions(live_node(), XID_48_CONDITION, NVLINK)
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    _holder_draining(ledger)
    admit(event_state(node, NVLINK, execution="contender"), kube(nodes), ledger, NOW, mode=Mode.FULL)
    with pytest.raises(SupersededError) as stop:
        ledger.claim_mutation(CLUSTER, INSTANCE, "holder", step="drain", busy_for=MUTATION_BUSY)
    notifier = _Notifier()
    result = record(
        _holder_state(node, _superseded(str(stop.value))), ledger, notifier, NOW, region="us-west-2"
    )
    assert result["outcome"] == "superseded" and result["notification"]
    (sent,) = notifier.sent
    assert "nodeheal retry" in sent.message and ledger.lock_holder(CLUSTER, INSTANCE) is None


def test_a_superseded_holder_whose_successor_holds_the_node_stays_quiet() -> None:
    from nodeheal.workflow.recording import record

    node = with_conditions(live_node(), XID_48_CONDITION, NVLINK)
    ledger = FakeLedger()
    ledger.now = NOW
    ledger.acquire_lock(
        CLUSTER,
        INSTANCE,
        "contender",
        timedelta(hours=2),
        LockClaim("gpu-a", "AcceleratedHardwareReady", Action.REPLACE, NOW),
    )
    notifier = _Notifier()
    result = record(
        _holder_state(node, _superseded("contender took over")), ledger, notifier, NOW, region="us-west-2"
    )
    assert result["outcome"] == "superseded" and not result["notification"] and notifier.sent == []
    assert ledger.lock_holder(CLUSTER, INSTANCE) == "contender"


def test_a_contender_that_is_aborted_gives_the_node_back_to_the_holder() -> None:
    """C contends H's busy drain, then C is aborted (or times out): its end, whoever records it,
    withdraws the mark, so H's next step goes on instead of stopping for nobody."""
    from nodeheal.workflow.recording import record_failure

    _, _, ledger, contender, waiting = _contending()
    assert waiting.verdict == WAIT
    aborted = WorkflowState.parse(
        {
            **contender.raw,
            "admission": waiting.to_json(),
            "failure": {"Error": "States.Aborted", "Cause": "aborted"},
        }
    )
    record_failure(aborted, ledger, None, NOW, region="us-west-2", by="finalizer")
    ledger.claim_mutation(CLUSTER, INSTANCE, "holder", step="drain", busy_for=MUTATION_BUSY)
    assert ledger.lock_holder(CLUSTER, INSTANCE) == "holder"


# -- a fault gone by the time its own execution admits -----------------------------------------------


HEALTHY_GPU = npd("NoGPUProblem", "", "2026-11-21T10:00:02Z") | {"status": "False"}


def test_a_xid_79_gone_before_its_admit_still_decides_while_the_episode_goes_on() -> None:
    """Soak seed 12001501: a detector restart cleared GPUProblem's Xid 79 two seconds after the
    exporter shipped it, while AcceleratedHardwareReady's Xid 48 was being remediated. The Xid 79's
    own execution stopped (its condition no longer bad) and forgot it; the holder rebooted a GPU
    that had fallen off the bus. The episode goes on while another condition is bad (D19), so the
    stop remembers the fault the event reported, and the instance is replaced."""
    node = with_conditions(
        live_node(), HEALTHY_GPU, nma("False", "NvidiaXID48Error", XID_48, "2026-11-21T10:00:00Z")
    )
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    at = NOW + timedelta(seconds=3)
    ledger.now = at
    gone = admit(event_state(node, FELL_OFF, execution="xid-79"), kube(nodes), ledger, at, mode=Mode.FULL)
    assert gone.verdict == STOP and "no longer bad" in gone.note
    remembered = ledger.sightings(CLUSTER, INSTANCE)
    assert [(s.condition_type, s.action) for s in remembered] == [("GPUProblem", Action.REPLACE)]
    assert remembered[0].seen_at < at  # as the exporter saw it, not as admit found it
    agent = admit(
        event_state(
            node, nma("False", "NvidiaXID48Error", XID_48, "2026-11-21T10:00:00Z"), execution="agent"
        ),
        kube(nodes),
        ledger,
        at,
        mode=Mode.FULL,
    )
    assert agent.decision is not None and agent.decision.planned_action is Action.REPLACE


def test_a_fault_gone_inside_its_confirmation_time_is_a_flap_and_not_remembered() -> None:
    """KernelDeadlock waits 600 s before it counts: one the exporter saw two seconds into its bad
    period, gone when its execution admits, was a flap, and the Xid 48 beside it is rebooted."""
    deadlock = {
        "type": "KernelDeadlock",
        "status": "True",
        "reason": "DockerHung",
        "message": "task docker:9506 blocked for more than 120 seconds.",
        "lastTransitionTime": "2026-11-21T09:59:59Z",
        "lastHeartbeatTime": "2026-11-21T09:59:59Z",
    }
    recovered = deadlock | {"status": "False", "reason": "KernelHasNoDeadlock", "message": ""}
    node = with_conditions(
        live_node(), recovered, nma("False", "NvidiaXID48Error", XID_48, "2026-11-21T10:00:00Z")
    )
    nodes = FakeNodes({"gpu-a": node})
    ledger = FakeLedger()
    gone = admit(event_state(node, deadlock, execution="deadlock"), kube(nodes), ledger, NOW, mode=Mode.FULL)
    assert gone.verdict == STOP
    assert ledger.sightings(CLUSTER, INSTANCE) == []
