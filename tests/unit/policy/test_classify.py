"""The default decision table (docs/architecture.md, "Decision policy"), row by row; cdk.json overrides."""

from __future__ import annotations

import pytest

from nodeheal.actions import Action
from nodeheal.conditions import Condition
from nodeheal.config import PolicyOverrides
from nodeheal.policy.classify import classify
from tests.unit.policy.helpers import nma, npd, policy_from

DEFAULTS = PolicyOverrides()


def line(xid: int, text: str = "details") -> str:
    return f"NVRM: Xid (PCI:0000:3b:00): {xid}, pid='<unknown>', name=<unknown>, {text}"


def run(
    condition: Condition, overrides: PolicyOverrides = DEFAULTS, unknown: Action = Action.ALERT
) -> Action:
    return classify(condition, overrides, unknown).action


# Row: Xid 13, 31, 32, 43, 45, 68, 69, 94 -> none (application-induced or contained).
@pytest.mark.parametrize("xid", [13, 31, 32, 43, 45, 68, 69, 94])
def test_application_and_contained_xids_are_none(xid: int) -> None:
    result = classify(npd(line(xid)), DEFAULTS, Action.ALERT)
    assert result.action is Action.NONE
    assert (result.xid, result.signal, result.confirm_seconds) == (xid, f"xid:{xid}", 0)


def test_xid_94_with_reset_required_is_reboot() -> None:
    message = line(94, "Contained: CE User Channel (0x9). RST: Yes, D-RST: No")
    result = classify(npd(message), DEFAULTS, Action.ALERT)
    assert result.action is Action.REBOOT
    assert "RST: Yes" in result.reason


def test_xid_94_with_reset_not_required_is_none() -> None:
    assert run(npd(line(94, "Contained: CE User Channel (0x9). RST: No, D-RST: No"))) is Action.NONE


# Row: Xid 38, 63, 92, 121, 157; Xid 154 "to 0x0 (None)" -> none (record the trend).
@pytest.mark.parametrize("xid", [38, 63, 92, 121, 157])
def test_informational_xids_are_none(xid: int) -> None:
    assert run(npd(line(xid))) is Action.NONE


def test_xid_154_back_to_none_is_none() -> None:
    message = (
        "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed "
        "from 0x1 (GPU Reset Required) to 0x0 (None)"
    )
    assert run(npd(message)) is Action.NONE


# Row: reset-class Xids and Xid 154 "Reset/Reboot Required" -> reboot.
@pytest.mark.parametrize("xid", [46, 48, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158])
def test_reset_class_xids_are_reboot(xid: int) -> None:
    result = classify(npd(line(xid)), DEFAULTS, Action.ALERT)
    assert result.action is Action.REBOOT
    assert result.xid == xid


@pytest.mark.parametrize(
    "target", ["0x1 (GPU Reset Required)", "0x2 (Node Reboot Required)", "0x4 (Drain and Reset)"]
)
def test_xid_154_reset_or_reboot_required_is_reboot(target: str) -> None:
    message = f"NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to {target}"
    result = classify(npd(message), DEFAULTS, Action.ALERT)
    assert result.action is Action.REBOOT
    assert result.signal == "xid:154"


def test_xid_95_uncontained_is_reboot_even_without_reset_flag() -> None:
    message = line(95, "Uncontained: LTC TAG (0x2,0x0). RST: No, D-RST: No")
    result = classify(npd(message), DEFAULTS, Action.ALERT)
    assert result.action is Action.REBOOT
    assert "RST: No" in result.reason


# Row: Xid 79, 54, 74, 56-58; NMA NvidiaNVLinkError, NvidiaDeviceCountMismatch -> replace.
@pytest.mark.parametrize("xid", [79, 54, 74, 56, 57, 58])
def test_hardware_xids_are_replace(xid: int) -> None:
    assert run(npd(line(xid))) is Action.REPLACE


@pytest.mark.parametrize("reason", ["NvidiaNVLinkError", "NvidiaDeviceCountMismatch"])
def test_nma_hardware_reasons_are_replace(reason: str) -> None:
    result = classify(nma(reason), DEFAULTS, Action.ALERT)
    assert result.action is Action.REPLACE
    assert (result.signal, result.xid, result.confirm_seconds) == (f"reason:{reason}", None, 0)


# Row: Xid 144-150 "Fatal" -> reboot, "Nonfatal" -> none; neither -> the unknown action.
@pytest.mark.parametrize("xid", range(144, 151))
def test_nvlink5_fatal_is_reboot(xid: int) -> None:
    assert run(npd(line(xid, "NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x021425c6 0x00000000)"))) is Action.REBOOT


@pytest.mark.parametrize("xid", range(144, 151))
def test_nvlink5_nonfatal_is_none(xid: int) -> None:
    assert run(npd(line(xid, "RLW_REMAP Nonfatal XC0 i0 Link 03 (0x004a7d05 0x00000000)"))) is Action.NONE


def test_nvlink5_without_severity_is_the_unknown_action() -> None:
    result = classify(npd(line(146, "TLW_RX_PIPE1 XC0 i0 Link 03")), DEFAULTS, Action.CORDON)
    assert result.action is Action.CORDON
    assert "Fatal or Nonfatal" in result.reason


# Row: NMA DCGMError, DCGMFieldError*, DCGMHealthCode* -> alert.
@pytest.mark.parametrize("reason", ["DCGMError", "DCGMFieldError230", "DCGMHealthCode72", "DCGMHealthCode3"])
def test_dcgm_reasons_are_alert(reason: str) -> None:
    result = classify(nma(reason), DEFAULTS, Action.NONE)
    assert result.action is Action.ALERT
    assert result.signal == f"reason:{reason}"


# Row: GPUProblem=True with no Xid -> replace after a 2 minute confirmation.
@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("NvidiaSmiFailed", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
        ("GPUDriverInitFailed", "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x55:2477)"),
        ("", ""),
    ],
)
def test_gpu_problem_without_xid_is_replace_after_confirmation(reason: str, message: str) -> None:
    result = classify(npd(message, reason=reason), DEFAULTS, Action.ALERT)
    assert result.action is Action.REPLACE
    assert result.confirm_seconds == 120
    assert (result.signal, result.xid) == ("condition:GPUProblem", None)


def test_gpu_check_plugin_condition_is_replace_after_confirmation() -> None:
    # deploy/node-problem-detector's check_gpu.sh sets GPUUnavailable, never GPUProblem.
    condition = Condition(
        "GPUUnavailable", "True", "GPUsUnavailable", "nvidia-smi reports 7 GPUs, expected 8"
    )
    result = classify(condition, DEFAULTS, Action.ALERT)
    assert result.action is Action.REPLACE and result.confirm_seconds == 120
    assert result.signal == "condition:GPUUnavailable"


# Row: KernelDeadlock / ReadonlyFilesystem = True and NMA *Ready=False -> replace after 10 minutes.
@pytest.mark.parametrize(
    "condition",
    [
        Condition("KernelDeadlock", "True", "DockerHung", "task docker:7 blocked for more than 300 seconds."),
        Condition("ReadonlyFilesystem", "True", "FilesystemIsReadOnly", "Remounting filesystem read-only"),
        nma("IPAMDNotRunning", condition_type="NetworkingReady"),
        nma("PodStuckTerminating", condition_type="ContainerRuntimeReady"),
        nma("ForkFailedOutOfPIDs", condition_type="KernelReady"),
        nma("XFSSmallAverageClusterSize", condition_type="StorageReady"),
        nma("DCGMDiagnosticFailure"),
    ],
    ids=lambda c: f"{c.type}-{c.reason}",
)
def test_node_level_faults_are_replace_after_ten_minutes(condition: Condition) -> None:
    result = classify(condition, DEFAULTS, Action.ALERT)
    assert result.action is Action.REPLACE
    assert result.confirm_seconds == 600
    assert result.signal == f"condition:{condition.type}"


# Row: Ready=False/Unknown -> alert.
@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_not_ready_is_alert(status: str) -> None:
    result = classify(
        Condition("Ready", status, "KubeletNotReady", "PLEG is not healthy"), DEFAULTS, Action.NONE
    )
    assert result.action is Action.ALERT
    assert (result.signal, result.confirm_seconds) == ("condition:Ready", 600)


# Row: unknown condition or reason -> alert (the policy's unknownAction).
@pytest.mark.parametrize(
    "condition",
    [
        Condition("FrequentKubeletRestart", "True", "FrequentKubeletRestart", "Found 6 kubelet restarts"),
        Condition("MemoryPressure", "True", "KubeletHasInsufficientMemory", ""),
        Condition("NVLinkProblem", "True", "Custom", ""),
    ],
    ids=lambda c: c.type,
)
def test_unknown_condition_is_the_unknown_action(condition: Condition) -> None:
    result = classify(condition, DEFAULTS, Action.ALERT)
    assert (result.action, result.signal, result.xid) == (Action.ALERT, "unknown", None)
    assert "unknownAction" in result.reason
    assert run(condition, unknown=Action.NONE) is Action.NONE


def test_xid_missing_from_the_catalog_is_the_unknown_action() -> None:
    result = classify(npd(line(8)), DEFAULTS, Action.ALERT)
    assert (result.action, result.xid, result.signal) == (Action.ALERT, 8, "xid:8")
    assert "not in NodeHeal's Xid catalog" in result.reason


@pytest.mark.parametrize(
    ("xid", "expected"),
    [(61, Action.REPLACE), (151, Action.REBOOT)],
)
def test_catalog_xids_outside_the_table_follow_their_category(xid: int, expected: Action) -> None:
    assert run(npd(line(xid))) is expected


def test_xid_154_drain_p2p_is_alert() -> None:
    message = (
        "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)"
    )
    assert run(npd(message)) is Action.ALERT


def test_xid_154_without_readable_action_is_the_unknown_action() -> None:
    assert run(npd(line(154, "GPU recovery action changed")), unknown=Action.NONE) is Action.NONE


@pytest.mark.parametrize(
    "condition",
    [
        Condition("GPUProblem", "False", "GPUHealthy", "NVRM: Xid (PCI:0000:3b:00): 79, stale text"),
        Condition("AcceleratedHardwareReady", "True", "NvidiaXID79Error", ""),
        Condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        Condition("SomethingNew", "False", "", ""),
    ],
    ids=lambda c: c.type,
)
def test_healthy_condition_is_none(condition: Condition) -> None:
    result = classify(condition, DEFAULTS, Action.REPLACE)
    assert (result.action, result.xid, result.confirm_seconds) == (Action.NONE, None, 0)
    assert "condition is healthy" in result.reason


def test_reason_cites_the_catalog() -> None:
    result = classify(npd(line(79, "GPU has fallen off the bus.")), DEFAULTS, Action.ALERT)
    assert "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in result.reason
    assert "fallen off the bus" in result.reason
    assert "RESTART_BM" in result.reason  # NVIDIA's recommendation, from the catalog
    assert "replace" in result.reason


def test_nma_xid_reason_is_read() -> None:
    result = classify(nma("NvidiaXID79Error", "GPU has fallen off the bus"), DEFAULTS, Action.ALERT)
    assert (result.action, result.xid, result.signal) == (Action.REPLACE, 79, "xid:79")


def test_nma_xid_reason_beats_the_ready_rule() -> None:
    # The agent marks Xid 63 fatal; NodeHeal's default follows NVIDIA (record only).
    result = classify(nma("NvidiaXID63Error"), DEFAULTS, Action.ALERT)
    assert (result.action, result.signal, result.confirm_seconds) == (Action.NONE, "xid:63", 0)


# Severity: the most costly action wins.
def test_most_costly_xid_wins_in_a_multi_line_message() -> None:
    message = "\n".join(
        [
            line(13, "Graphics SM Warp Exception"),
            line(79, "GPU has fallen off the bus."),
            "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed "
            "from 0x0 (None) to 0x2 (Node Reboot Required)",
        ]
    )
    result = classify(npd(message), DEFAULTS, Action.ALERT)
    assert (result.action, result.xid, result.signal) == (Action.REPLACE, 79, "xid:79")
    assert "xid:13 -> none" in result.reason and "xid:154 -> reboot" in result.reason


def test_reason_and_message_are_weighed_together() -> None:
    condition = nma("NvidiaXID13Warning", message=line(48, "An uncorrectable double bit error (DBE)"))
    assert classify(condition, DEFAULTS, Action.ALERT).xid == 48


def test_dcgm_reason_with_an_xid_in_the_message_follows_the_xid() -> None:
    result = classify(nma("DCGMError", message=line(79)), DEFAULTS, Action.ALERT)
    assert (result.action, result.signal) == (Action.REPLACE, "xid:79")


# Overrides from cdk.json.
def test_global_xid_override_wins() -> None:
    overrides = policy_from({"xidActions": {"63": "replace", "79": "alert"}}).overrides
    assert run(npd(line(63)), overrides) is Action.REPLACE
    result = classify(npd(line(79)), overrides, Action.ALERT)
    assert result.action is Action.ALERT
    assert "xidActions override" in result.reason


def test_xid_override_beats_message_decoding() -> None:
    overrides = policy_from({"xidActions": {"94": "none"}}).overrides
    assert run(npd(line(94, "Contained: x (0x9). RST: Yes, D-RST: No")), overrides) is Action.NONE


def test_reason_override_exact_and_prefix() -> None:
    overrides = policy_from(
        {"reasonActions": {"DCGMError": "replace", "DCGMHealthCode*": "none", "NvidiaPCIeError": "reboot"}}
    ).overrides
    assert run(nma("DCGMError"), overrides) is Action.REPLACE
    assert run(nma("DCGMHealthCode72"), overrides) is Action.NONE
    assert run(nma("DCGMFieldError230"), overrides) is Action.ALERT  # default still applies
    assert run(nma("NvidiaPCIeError"), overrides) is Action.REBOOT  # more specific than *Ready


def test_reason_override_speaks_for_the_xid_it_names() -> None:
    overrides = policy_from({"reasonActions": {"NvidiaXID79Error": "alert"}}).overrides
    result = classify(nma("NvidiaXID79Error"), overrides, Action.ALERT)
    assert (result.action, result.signal) == (Action.ALERT, "reason:NvidiaXID79Error")


def test_condition_rule_overrides() -> None:
    overrides = policy_from(
        {
            "conditionRules": {
                "*Ready": {"action": "alert"},
                "NetworkingReady": {"action": "reboot", "confirmSeconds": 30},
                "GPUProblem": {"action": "cordon", "confirmSeconds": 60},
                "FrequentKubeletRestart": "cordon",
            }
        }
    ).overrides
    storage = classify(nma("IOError", condition_type="StorageReady"), overrides, Action.ALERT)
    assert (storage.action, storage.confirm_seconds) == (Action.ALERT, 0)
    networking = classify(nma("IPAMDNotRunning", condition_type="NetworkingReady"), overrides, Action.ALERT)
    assert (networking.action, networking.confirm_seconds) == (Action.REBOOT, 30)
    gpu = classify(npd("nvidia-smi timed out", reason="NvidiaSmiFailed"), overrides, Action.ALERT)
    assert (gpu.action, gpu.confirm_seconds) == (Action.CORDON, 60)
    assert run(Condition("FrequentKubeletRestart", "True"), overrides) is Action.CORDON
    # The kubelet's Ready is not covered by the *Ready wildcard.
    assert run(Condition("Ready", "False"), overrides) is Action.ALERT
    assert run(npd(line(79)), overrides) is Action.REPLACE  # an Xid is more specific than a rule


def test_per_pool_overrides_merge_over_global() -> None:
    policy = policy_from(
        {
            "xidActions": {"63": "alert"},
            "nodePools": {"inference": {"xidActions": {"63": "replace", "13": "alert"}}},
        }
    )
    assert run(npd(line(63)), policy.for_pool("training")) is Action.ALERT
    assert run(npd(line(13)), policy.for_pool("training")) is Action.NONE
    assert run(npd(line(63)), policy.for_pool("inference")) is Action.REPLACE
    assert run(npd(line(13)), policy.for_pool("inference")) is Action.ALERT


# One fault, one verdict (docs/architecture.md, D11): a double-bit ECC error is Xid 48 in the kernel log (NPD)
# and NvidiaXID48Error or NvidiaDoubleBitError from the node monitoring agent (its Xid policy and
# its DCGM double-bit policy). NVIDIA's WORKFLOW_XID_48: reset the GPU first, replace only when the
# error persists, which the reboot escalation does.
SAME_FAULT_DIFFERENT_DETECTORS = {
    "double-bit ECC": [
        (
            "GPUProblem",
            "GPUXid",
            "NVRM: Xid (PCI:0000:53:00): 48, pid=4121, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
        ),
        (
            "AcceleratedHardwareReady",
            "NvidiaXID48Error",
            "detected XID-48 on the instance, review kernel logs for additional information.",
        ),
        (
            "AcceleratedHardwareReady",
            "NvidiaDoubleBitError",
            "detected 1 Nvidia Double Bit error(s) on location 0",
        ),
    ],
    "GPU fallen off the bus": [
        (
            "GPUProblem",
            "GPUXid",
            "NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        ),
        (
            "AcceleratedHardwareReady",
            "NvidiaXID79Error",
            "detected XID-79 on the instance, review kernel logs for additional information.",
        ),
    ],
    "NVLink error": [
        (
            "GPUProblem",
            "GPUXid",
            "NVRM: Xid (PCI:0000:53:00): 74, pid=4121, name=python, NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
        ),
        (
            "AcceleratedHardwareReady",
            "NvidiaXID74Error",
            "detected XID-74 on the instance, review kernel logs for additional information.",
        ),
        ("AcceleratedHardwareReady", "NvidiaNVLinkError", "detected 12 NVLink errors on fieldId 409"),
    ],
}


@pytest.mark.parametrize("fault", sorted(SAME_FAULT_DIFFERENT_DETECTORS))
def test_the_same_fault_gets_one_verdict_from_every_detector(fault: str) -> None:
    verdicts = {
        (condition_type, reason): classify(
            Condition(
                condition_type, "False" if condition_type.endswith("Ready") else "True", reason, message
            ),
            DEFAULTS,
            Action.ALERT,
        ).action
        for condition_type, reason, message in SAME_FAULT_DIFFERENT_DETECTORS[fault]
    }
    assert len(set(verdicts.values())) == 1, verdicts


def test_a_double_bit_error_is_rebooted_as_xid_48() -> None:
    result = classify(nma("NvidiaDoubleBitError"), DEFAULTS, Action.ALERT)
    assert (result.action, result.xid, result.signal) == (Action.REBOOT, 48, "xid:48")


def test_the_node_monitoring_agents_joined_message_keeps_an_earlier_fatal_xid() -> None:
    """The agent keeps the transition time, overwrites the reason with the newest fault and joins
    the messages with "; " (``pkg/manager/node_exporter.go``, ``Fatal``; its Xid message is
    ``detected XID-%d on the instance, ...``). Xid 79 then Xid 48 reads ``NvidiaXID48Error``, and
    the Xid 79 in the message still decides replace."""
    joined = (
        "detected XID-79 on the instance, review kernel logs for additional information.; "
        "detected XID-48 on the instance, review kernel logs for additional information."
    )
    result = classify(nma("NvidiaXID48Error", joined), DEFAULTS, Action.ALERT)
    assert (result.action, result.xid) == (Action.REPLACE, 79)
