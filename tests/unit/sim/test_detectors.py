"""The simulated detectors write a Node condition as their source does (nodeheal.sim.detectors).

Each case quotes the behaviour of the function the writer models: NPD's
``pkg/systemlogmonitor/log_monitor.go`` ``generateStatus`` and
``pkg/custompluginmonitor/custom_plugin_monitor.go`` ``generateStatus``, the node monitoring
agent's ``pkg/manager/node_exporter.go`` ``Fatal``. The same writers are behind the fake API
server's ``report_node_condition`` and the seeded world's ``report_condition``, tested here too.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nodeheal.config import RemediationSettings
from nodeheal.sim import detectors
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.seeded import fault_effects
from nodeheal.sim.seeded.faults import XID_MESSAGES, PlannedFault
from nodeheal.sim.seeded.policy_oracle import classify
from nodeheal.sim.seeded.world import World

ROOT = Path(__file__).resolve().parents[3]
T0, T1 = "2026-11-23T08:00:00Z", "2026-11-23T08:05:00Z"
XID_79 = "NVRM: Xid (PCI:0000:53:00): 79, pid=2411, name=python3, GPU has fallen off the bus."
XID_48 = "NVRM: Xid (PCI:0000:97:00): 48, pid=2411, name=python3, An uncorrectable double bit error (DBE)"
NMA_79 = "detected XID-79 on the instance, review kernel logs for additional information."
NMA_48 = "detected XID-48 on the instance, review kernel logs for additional information."


def condition(
    status: str, reason: str, message: str, at: str = T0, type: str = "GPUProblem"
) -> dict[str, Any]:
    return {
        "type": type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": at,
        "lastTransitionTime": at,
    }


# -- NPD's log monitor: a permanent rule -----------------------------------------------------------


def test_npd_a_new_reason_moves_the_transition_time_and_replaces_the_message() -> None:
    current = condition("True", "GPUFellOffBus", XID_79)
    written = detectors.npd_permanent(current, "GPUProblem", "GPUDoubleBitECCError", XID_48, T1)
    assert written == condition("True", "GPUDoubleBitECCError", XID_48, T1)


def test_npd_the_same_reason_keeps_the_old_message_and_transition_time() -> None:
    current = condition("True", "GPUFellOffBus", XID_79)
    other_line = XID_79.replace("pid=2411", "pid=7")
    written = detectors.npd_permanent(current, "GPUProblem", "GPUFellOffBus", other_line, T1)
    assert (written["status"], written["reason"], written["message"]) == ("True", "GPUFellOffBus", XID_79)
    assert written["lastTransitionTime"] == T0
    assert written["lastHeartbeatTime"] == T1  # SetConditions stamps the heartbeat on every write


def test_npd_a_match_on_a_healthy_condition_moves_the_transition_time() -> None:
    current = condition("False", "GPUHealthy", "no NVIDIA GPU fault seen in the kernel log")
    written = detectors.npd_permanent(current, "GPUProblem", "GPUFellOffBus", XID_79, T1)
    assert written == condition("True", "GPUFellOffBus", XID_79, T1)
    assert detectors.npd_permanent(None, "GPUProblem", "GPUFellOffBus", XID_79, T1) == written


def test_npd_start_writes_the_default_condition_with_a_new_transition_time() -> None:
    for current in (condition("True", "GPUFellOffBus", XID_79), condition("False", "GPUHealthy", "ok"), None):
        written = detectors.npd_start(current, "GPUProblem", "GPUHealthy", "fine", T1)
        assert written == condition("False", "GPUHealthy", "fine", T1)


# -- NPD's custom plugin monitor -------------------------------------------------------------------


def plugin(current: dict[str, Any] | None, status: str, message: str, **kwargs: Any) -> dict[str, Any]:
    reason = "GPUsUnavailable" if status == "True" else "GPUsAvailable"
    return detectors.npd_custom_plugin(
        current,
        "GPUUnavailable",
        status,
        reason,
        message,
        T1,
        default_reason="GPUsAvailable",
        default_message="all there",
        **kwargs,
    )


def test_plugin_true_then_false_writes_the_default_reason_and_message() -> None:
    bad = condition("True", "GPUsUnavailable", "GPU count mismatch", type="GPUUnavailable")
    assert plugin(bad, "False", "nvidia-smi OK, 8 of 8") == condition(
        "False", "GPUsAvailable", "all there", T1, type="GPUUnavailable"
    )


def test_plugin_unknown_keeps_the_output_for_debugging() -> None:
    healthy = condition("False", "GPUsAvailable", "all there", type="GPUUnavailable")
    written = plugin(healthy, "Unknown", "nvidia-smi not found")
    assert (written["status"], written["reason"], written["message"]) == (
        "Unknown",
        "GPUsAvailable",
        "nvidia-smi not found",
    )
    assert written["lastTransitionTime"] == T1


def test_plugin_a_new_output_under_the_same_reason_writes_nothing_but_the_heartbeat() -> None:
    bad = condition("True", "GPUsUnavailable", "nvidia-smi did not answer", type="GPUUnavailable")
    written = plugin(bad, "True", "GPU count mismatch: nvidia-smi lists 7, node advertises 8")
    assert written == {**bad, "lastHeartbeatTime": T1}
    # enable_message_change_based_condition_update: the new output moves the transition time.
    changed = plugin(bad, "True", "GPU count mismatch", message_change_updates=True)
    assert (changed["message"], changed["lastTransitionTime"]) == ("GPU count mismatch", T1)


def test_plugin_output_is_trimmed_and_cut_at_max_output_length() -> None:
    healthy = condition("False", "GPUsAvailable", "all there", type="GPUUnavailable")
    written = plugin(healthy, "True", "  " + "x" * 100 + "\n")
    assert written["message"] == "x" * detectors.PLUGIN_MAX_OUTPUT_LENGTH == "x" * 80


# -- the node monitoring agent's Fatal -------------------------------------------------------------


def test_nma_while_false_keeps_the_transition_time_takes_the_newest_reason_and_joins_messages() -> None:
    current = condition("False", "NvidiaXID79Error", NMA_79, type="AcceleratedHardwareReady")
    written = detectors.nma_fatal(current, "AcceleratedHardwareReady", "NvidiaXID48Error", NMA_48, T1)
    assert written["reason"] == "NvidiaXID48Error"
    assert written["message"] == f"{NMA_79}; {NMA_48}"
    assert (written["lastTransitionTime"], written["lastHeartbeatTime"]) == (T0, T1)


def test_nma_does_not_join_a_message_it_already_holds() -> None:
    joined = condition("False", "NvidiaXID48Error", f"{NMA_79}; {NMA_48}", type="AcceleratedHardwareReady")
    again = detectors.nma_fatal(joined, "AcceleratedHardwareReady", "NvidiaXID79Error", NMA_79, T1)
    assert (again["reason"], again["message"], again["lastTransitionTime"]) == (
        "NvidiaXID79Error",
        f"{NMA_79}; {NMA_48}",
        T0,
    )
    empty = condition("False", "DCGMError", "", type="AcceleratedHardwareReady")
    assert (
        detectors.nma_fatal(empty, "AcceleratedHardwareReady", "DCGMError", "lost", T1)["message"] == "lost"
    )


def test_nma_going_bad_moves_the_transition_time_and_starts_a_new_message() -> None:
    ready = condition(
        "True",
        "NvidiaGPUIsReady",
        "Monitoring for the Nvidia GPU system is active",
        type="AcceleratedHardwareReady",
    )
    written = detectors.nma_fatal(ready, "AcceleratedHardwareReady", "NvidiaXID79Error", NMA_79, T1)
    assert written == condition("False", "NvidiaXID79Error", NMA_79, T1, type="AcceleratedHardwareReady")
    # The agent holds every managed condition True from its start: an absent one goes bad now.
    assert detectors.nma_fatal(None, "AcceleratedHardwareReady", "NvidiaXID79Error", NMA_79, T1) == written


def test_nma_start_is_the_only_way_back_to_true() -> None:
    bad = condition("False", "NvidiaXID79Error", NMA_79, type="AcceleratedHardwareReady")
    written = detectors.nma_start(bad, "AcceleratedHardwareReady", "NvidiaGPUIsReady", "active", T1)
    assert written == condition("True", "NvidiaGPUIsReady", "active", T1, type="AcceleratedHardwareReady")


# -- the plain setter and the dispatch -------------------------------------------------------------


def test_the_plain_setter_moves_the_transition_time_only_on_a_status_change() -> None:
    current = condition("True", "KubeletReady", "posting", type="Ready")
    same = detectors.set_plainly(current, "Ready", "True", "KubeletReady", "still posting", T1)
    assert (same["message"], same["lastTransitionTime"]) == ("still posting", T0)
    changed = detectors.set_plainly(current, "Ready", "False", "KubeletNotReady", "rebooting", T1)
    assert changed["lastTransitionTime"] == T1


@pytest.mark.parametrize(
    ("condition_type", "detector"),
    [
        ("GPUProblem", detectors.Detector.NPD_LOG_MONITOR),
        ("KernelDeadlock", detectors.Detector.NPD_LOG_MONITOR),
        ("ReadonlyFilesystem", detectors.Detector.NPD_LOG_MONITOR),
        ("GPUUnavailable", detectors.Detector.NPD_CUSTOM_PLUGIN),
        ("AcceleratedHardwareReady", detectors.Detector.NODE_MONITORING_AGENT),
        ("StorageReady", detectors.Detector.NODE_MONITORING_AGENT),
        ("Ready", detectors.Detector.KUBELET),
        ("MemoryPressure", detectors.Detector.KUBELET),
    ],
)
def test_each_condition_type_is_written_by_its_detector(
    condition_type: str, detector: detectors.Detector
) -> None:
    assert detectors.detector_of(condition_type) is detector


def test_a_status_a_detector_never_writes_is_refused() -> None:
    with pytest.raises(ValueError, match="never writes GPUProblem=Unknown"):
        detectors.report(None, "GPUProblem", "Unknown", "x", "y", T1)
    with pytest.raises(ValueError, match="never writes AcceleratedHardwareReady=Unknown"):
        detectors.report(None, "AcceleratedHardwareReady", "Unknown", "x", "y", T1)


def test_a_status_change_moves_the_transition_time_for_both_detectors() -> None:
    healthy_npd = condition("False", "GPUHealthy", "fine")
    assert (
        detectors.report(healthy_npd, "GPUProblem", "True", "GPUFellOffBus", XID_79, T1)["lastTransitionTime"]
        == T1
    )
    bad_npd = condition("True", "GPUFellOffBus", XID_79)
    assert (
        detectors.report(bad_npd, "GPUProblem", "False", "GPUHealthy", "fine", T1)["lastTransitionTime"] == T1
    )
    ready = condition("True", "NvidiaGPUIsReady", "active", type="AcceleratedHardwareReady")
    assert (
        detectors.report(ready, "AcceleratedHardwareReady", "False", "NvidiaXID79Error", NMA_79, T1)[
            "lastTransitionTime"
        ]
        == T1
    )
    bad_nma = condition("False", "NvidiaXID79Error", NMA_79, type="AcceleratedHardwareReady")
    assert (
        detectors.report(bad_nma, "AcceleratedHardwareReady", "True", "NvidiaGPUIsReady", "active", T1)[
            "lastTransitionTime"
        ]
        == T1
    )


# -- the fake API server and the seeded world write through them -----------------------------------


def _served(store: ClusterStore, name: str, condition_type: str) -> dict[str, Any]:
    node = store.get("nodes", name)
    return next(c for c in node["status"]["conditions"] if c["type"] == condition_type)


def _backdate(store: ClusterStore, name: str, condition_type: str) -> None:
    def change(node: dict[str, Any]) -> None:
        for cond in node["status"]["conditions"]:
            if cond["type"] == condition_type:
                cond["lastTransitionTime"] = T0

    store.mutate("nodes", name, change)


def test_the_fake_api_server_reports_conditions_as_the_detectors_write_them() -> None:
    from nodeheal.sim.apiserver.objects import make_node

    store = ClusterStore()
    store.add(make_node("gpu-a", instance_id="i-0123456789abcdef0"))
    store.report_node_condition("gpu-a", "GPUProblem", "True", "GPUDoubleBitECCError", XID_48)
    _backdate(store, "gpu-a", "GPUProblem")
    store.report_node_condition("gpu-a", "GPUProblem", "True", "GPUDoubleBitECCError", XID_79)
    kept = _served(store, "gpu-a", "GPUProblem")
    assert (kept["message"], kept["lastTransitionTime"]) == (XID_48, T0)  # same reason: message kept
    store.report_node_condition("gpu-a", "GPUProblem", "True", "GPUFellOffBus", XID_79)
    moved = _served(store, "gpu-a", "GPUProblem")
    assert (moved["reason"], moved["message"]) == ("GPUFellOffBus", XID_79)
    assert moved["lastTransitionTime"] != T0

    store.report_node_conditions(["gpu-a"], "AcceleratedHardwareReady", "False", "NvidiaXID79Error", NMA_79)
    _backdate(store, "gpu-a", "AcceleratedHardwareReady")
    store.report_node_condition("gpu-a", "AcceleratedHardwareReady", "False", "NvidiaXID48Error", NMA_48)
    agent = _served(store, "gpu-a", "AcceleratedHardwareReady")
    assert (agent["reason"], agent["message"], agent["lastTransitionTime"]) == (
        "NvidiaXID48Error",
        f"{NMA_79}; {NMA_48}",
        T0,
    )
    # The plain setter is still there, for the kubelet and for tests that place a condition.
    store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUFellOffBus", "placed")
    assert _served(store, "gpu-a", "GPUProblem")["message"] == "placed"


def _world() -> tuple[World, dict[str, datetime]]:
    clock = {"now": datetime(2026, 11, 23, 8, 0, tzinfo=UTC)}
    world = World(random.Random(3), lambda: clock["now"])
    world.add_node("gpu-a", pool_kind="karpenter", pool="gpu")
    return world, clock


def test_the_seeded_world_reports_conditions_as_the_detectors_write_them() -> None:
    world, clock = _world()
    world.report_condition("gpu-a", "GPUProblem", "True", "GPUFellOffBus", XID_79)
    first = world.condition("gpu-a", "GPUProblem") or {}
    clock["now"] += timedelta(minutes=5)
    world.report_condition("gpu-a", "GPUProblem", "True", "GPUDoubleBitECCError", XID_48)
    lesser = world.condition("gpu-a", "GPUProblem") or {}
    assert (lesser["reason"], lesser["message"]) == ("GPUDoubleBitECCError", XID_48)
    assert lesser["lastTransitionTime"] != first["lastTransitionTime"]

    world.report_condition("gpu-a", "AcceleratedHardwareReady", "False", "NvidiaXID79Error", NMA_79)
    before = world.condition("gpu-a", "AcceleratedHardwareReady") or {}
    clock["now"] += timedelta(minutes=5)
    world.report_condition("gpu-a", "AcceleratedHardwareReady", "False", "NvidiaXID48Error", NMA_48)
    after = world.condition("gpu-a", "AcceleratedHardwareReady") or {}
    assert after["lastTransitionTime"] == before["lastTransitionTime"]
    assert (after["reason"], after["message"]) == ("NvidiaXID48Error", f"{NMA_79}; {NMA_48}")
    # Ready stays last, as on a real Node.
    assert world.nodes["gpu-a"]["status"]["conditions"][-1]["type"] == "Ready"

    clock["now"] += timedelta(minutes=5)
    world.restart_detector("gpu-a", "AcceleratedHardwareReady")
    restarted = world.condition("gpu-a", "AcceleratedHardwareReady") or {}
    assert (restarted["status"], restarted["reason"]) == ("True", "NvidiaGPUIsReady")
    assert restarted["lastTransitionTime"] != before["lastTransitionTime"]


# -- the seeded simulation's faults are ones a real detector writes --------------------------------


def _shipped_rules() -> list[dict[str, Any]]:
    import json

    config = json.loads((ROOT / "deploy/node-problem-detector/gpu-monitor.json").read_text(encoding="utf-8"))
    rules: list[dict[str, Any]] = config["rules"]
    return rules


def _matching(line: str) -> list[tuple[str, str]]:
    """(type, reason) of every rule of the shipped GPU config the line matches. NPD matches a
    rule's pattern against the whole line (``^pattern$`` in logbuffer's Match)."""
    return [(r["type"], r["reason"]) for r in _shipped_rules() if re.fullmatch(r["pattern"], line)]


def test_each_kernel_line_the_simulation_writes_matches_the_permanent_rule_of_its_reason() -> None:
    for severity, reason in fault_effects._NPD_REASONS.items():
        assert _matching(XID_MESSAGES[severity]) == [("permanent", reason)], severity


def test_xid_13_never_touches_gpu_problem_with_the_shipped_config() -> None:
    line = "NVRM: Xid (PCI:0000:53:00): 13, pid=2411, name=python3, Graphics SM Warp Exception"
    assert _matching(line) == [("temporary", "GPUApplicationXid")]


def test_the_simulated_gpu_faults_are_decided_as_each_severity_says() -> None:
    """A gpu-fault's ``none`` is the node monitoring agent's Xid 63, never a GPUProblem: the shipped
    NPD config has no permanent rule NodeHeal decides none."""
    settings = RemediationSettings()
    written: Counter[tuple[str, str, str]] = Counter()
    for seed in range(300):
        world, _ = _world()
        sim = SimpleNamespace(invariants=SimpleNamespace(coverage=Counter()), world=world, armed={})
        fault_effects.inject(sim, PlannedFault("gpu-fault", 0, seed))  # type: ignore[arg-type]
        for cond in world.nodes["gpu-a"]["status"]["conditions"]:
            if cond["type"] in ("GPUProblem", "AcceleratedHardwareReady", "KernelDeadlock") and cond[
                "reason"
            ] not in ("GPUHealthy", "KernelHasNoDeadlock", "FilesystemIsNotReadOnly"):
                written[(cond["type"], cond["reason"], classify(cond, settings, {}))] += 1
    assert set(written) == {
        ("GPUProblem", "GPUFellOffBus", "replace"),
        ("GPUProblem", "GPUDoubleBitECCError", "reboot"),
        ("AcceleratedHardwareReady", "NvidiaXID79Error", "replace"),
        ("AcceleratedHardwareReady", "NvidiaXID48Error", "reboot"),
        ("AcceleratedHardwareReady", "NvidiaXID63Error", "none"),
        ("KernelDeadlock", "DockerHung", "replace"),
    }


@pytest.mark.parametrize(
    ("condition_type", "status", "first", "lesser", "moves"),
    [
        ("GPUProblem", "True", "replace", ("reboot", "alert"), True),
        ("AcceleratedHardwareReady", "False", "replace", ("reboot", "none"), False),
    ],
)
def test_a_lesser_fault_is_written_as_its_detector_writes_it(
    condition_type: str, status: str, first: str, lesser: tuple[str, ...], moves: bool
) -> None:
    settings = RemediationSettings()
    seen: set[str] = set()
    for seed in range(40):
        world, clock = _world()
        world.report_condition(
            "gpu-a", condition_type, status, *fault_effects._fault(condition_type, first, random.Random(0))
        )
        before = world.condition("gpu-a", condition_type) or {}
        clock["now"] += timedelta(minutes=1)
        sim = SimpleNamespace(invariants=SimpleNamespace(coverage=Counter()), world=world, armed={})
        fault_effects.inject(sim, PlannedFault("message-less-severe", 0, seed))  # type: ignore[arg-type]
        after = world.condition("gpu-a", condition_type) or {}
        seen.add(classify({**after, "message": after["message"].split("; ")[-1]}, settings, {}))
        if moves:  # NPD: another reason rewrites reason, message and transition time
            assert after["lastTransitionTime"] != before["lastTransitionTime"]
            assert after["message"] != before["message"] and "; " not in after["message"]
        else:  # the agent: same transition time, newest reason, messages joined
            assert after["lastTransitionTime"] == before["lastTransitionTime"]
            assert after["message"] == f"{before['message']}; {after['message'].split('; ')[-1]}"
        assert after["reason"] != before["reason"]
    assert seen == set(lesser)


# -- the conformance table has a row for each writer -----------------------------------------------


def test_the_conformance_table_has_a_row_citing_the_source_of_each_writer() -> None:
    text = (ROOT / "docs/fake-apiserver.md").read_text(encoding="utf-8")
    section = text.split("## Detector writes", 1)[1].split("\n## ", 1)[0]
    rows = {
        match["writer"]: line
        for line in section.splitlines()
        if (match := re.match(r"^\|\s*`(?P<writer>[a-z_]+)`\s*\|", line))
    }
    assert set(rows) == set(detectors.WRITERS)
    for writer, line in rows.items():
        source = detectors.NMA_REPO if "nma" in writer else detectors.NPD_REPO
        if writer == "set_plainly":
            source = detectors.KUBELET_REPO
        assert source in line, f"the row of {writer} cites no source at the version read"
        assert f"`detectors.{writer}`" in line or f"`{writer}`" in line
