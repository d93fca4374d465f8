"""Xid parsing against log lines in the shapes the NVIDIA driver, NPD and the node monitoring agent
write them (driver format strings from open-gpu-kernel-modules, lines quoted in NVIDIA's memory
error management guide and in public gpud / NVSentinel test suites)."""

from __future__ import annotations

import pytest

from nodeheal.policy.signals import (
    NvlinkSeverity,
    RecoveryAction,
    Source,
    decode_recovery_action,
    xid_from_reason,
    xid_signals,
    xids_in_message,
)

XID_LINES = [
    # NPD copies the driver line; pid/name present.
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.", 79),
    # Kernel timestamp prefix and the driver's '<unknown>' pid and name.
    (
        "[6781741.548779] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.",
        79,
    ),
    # journald prefix.
    (
        "Nov 21 10:00:00 ip-10-0-158-235 kernel: NVRM: Xid (PCI:0000:53:00): 13, pid=28719, name=python3, "
        "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
        13,
    ),
    # MIG attribution inside the parentheses.
    (
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, "
        "Contained: CE User Channel (0x9). RST: No, D-RST: No",
        94,
    ),
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:02 GPU-CI:01): 43, pid=812, name=python, Ch 00000010", 43),
    # Older drivers: no PCI: prefix.
    ("[...] NVRM: Xid (0000:03:00): 14, Channel 00000001", 14),
    # GSP-era laptop/desktop lines without a device.
    (
        "NVRM: Xid 119, Timeout after 9s of waiting for RPC response from GPU0 GSP! Expected function 4097",
        119,
    ),
    # No process attribution at all (the driver's second format).
    (
        "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed "
        "from 0x0 (None) to 0x1 (GPU Reset Required)",
        154,
    ),
    # Plain text written by a person or a script, and a BMC (Redfish) event.
    ("Xid 79", 79),
    ("[Tue Apr 22 23:22:23 UTC 2025][7][00] XID 95 Uncontained: FBHUB. RST: Yes; D-RST: No", 95),
]


@pytest.mark.parametrize(("line", "xid"), XID_LINES, ids=[str(i) for i in range(len(XID_LINES))])
def test_xid_is_read_from_real_line_formats(line: str, xid: int) -> None:
    signals = xids_in_message(line)
    assert [s.xid for s in signals] == [xid]
    assert signals[0].source is Source.MESSAGE


def test_device_is_kept() -> None:
    (signal,) = xids_in_message("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: x. RST: No")
    assert signal.device == "PCI:0000:01:00 GPU-I:05"


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Mar 14 16:34:51 UTC 2025",
        "NVRM: GPU at PCI:0000:91:00: GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b",
        # NVSwitch errors are SXids, a different numbering.
        "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 46 LTSSM Fault Up",
        "",
    ],
)
def test_lines_without_an_xid_yield_nothing(line: str) -> None:
    assert xids_in_message(line) == ()


def test_multiple_xids_keep_their_own_text() -> None:
    message = (
        "NVRM: Xid (PCI:0000:01:00): 79, pid=9962, name=python, GPU has fallen off the bus.\n"
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed "
        "from 0x0 (None) to 0x2 (Node Reboot Required)"
    )
    first, second = xids_in_message(message)
    assert (first.xid, second.xid) == (79, 154)
    assert "fallen off the bus" in first.detail and "recovery" not in first.detail
    assert second.recovery_action is RecoveryAction.NODE_REBOOT


def test_previous_xid_annotation_is_not_a_new_fault() -> None:
    # The driver appends " caused by previous Xid %d" to Xid 45 lines; Xid 149 was logged before.
    line = "NVRM: Xid (PCI:0008:01:00): 45, pid=2451, name=python, Ch 00000010 caused by previous Xid 149"
    assert [s.xid for s in xids_in_message(line)] == [45]


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system "
        "has fallen off the bus "
        "and is not responding to commands.",
        "NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.",
    ],
)
def test_fallen_off_the_bus_without_xid_is_79(line: str) -> None:
    (signal,) = xids_in_message(line)
    assert signal.xid == 79
    assert signal.source is Source.FALLEN_OFF_THE_BUS


def test_fallen_off_the_bus_with_xid_79_is_one_signal() -> None:
    line = "NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus and is not responding to commands."
    assert [s.xid for s in xids_in_message(line)] == [79]


@pytest.mark.parametrize(
    ("reason", "xid", "kind"),
    [
        ("NvidiaXID79Error", 79, "Error"),
        ("NvidiaXID13Warning", 13, "Warning"),
        ("NvidiaXID154Warning", 154, "Warning"),
    ],
)
def test_node_monitoring_agent_reasons(reason: str, xid: int, kind: str) -> None:
    signal = xid_from_reason(reason)
    assert signal is not None
    assert (signal.xid, signal.reason_kind, signal.source) == (xid, kind, Source.REASON)


@pytest.mark.parametrize("reason", ["NvidiaXIDError", "NvidiaNVLinkError", "GPUFellOffBus", "XID79", ""])
def test_other_reasons_name_no_xid(reason: str) -> None:
    assert xid_from_reason(reason) is None


def test_reason_and_message_signals_are_combined_reason_first() -> None:
    signals = xid_signals("NvidiaXID48Error", "NVRM: Xid (PCI:0000:3b:00): 63, pid=1, Row Remapper: New row")
    assert [(s.xid, s.source) for s in signals] == [(48, Source.REASON), (63, Source.MESSAGE)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No",
            True,
        ),
        (
            "NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No",
            False,
        ),
        # D-RST (reset for the drained device) must not be read as RST.
        ("NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). D-RST: Yes", None),
        ("XID 95 Uncontained: FBHUB. RST: Yes; D-RST: No", True),
        ("NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Ch 00000008", None),
    ],
)
def test_reset_required_flag(line: str, expected: bool | None) -> None:
    (signal,) = xids_in_message(line)
    assert signal.reset_required is expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[171167.969026] NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 00 "
            "(0x021405c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
            NvlinkSeverity.FATAL,
        ),
        (
            "NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 "
            "(0x00086226 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)",
            NvlinkSeverity.NONFATAL,
        ),
        (
            "NVRM: Xid (PCI:0000:04:00): 145, RLW_CTRL Nonfatal XC0 i0 Link 00 "
            "(0x00000003 0x80000000 0x00000000 0x00000000)",
            NvlinkSeverity.NONFATAL,
        ),
        (
            "NVRM: Xid (PCI:0000:04:00): 144, SAW_MVB Fatal XC0 i0 Link 00 "
            "(0x00000001 0x00000002 0x00000000 0x00000000)",
            NvlinkSeverity.FATAL,
        ),
        ("NVRM: Xid (PCI:0000:5f:00): 146, TLW_RX_PIPE1 XC0 i0 Link 03", None),
    ],
)
def test_nvlink5_severity(line: str, expected: NvlinkSeverity | None) -> None:
    (signal,) = xids_in_message(line)
    assert signal.nvlink_severity is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", RecoveryAction.GPU_RESET),
        (
            "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
            RecoveryAction.NODE_REBOOT,
        ),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", RecoveryAction.NONE),
        (
            "GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)",
            RecoveryAction.GPU_RESET,
        ),
        (
            "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
            RecoveryAction.DRAIN_AND_RESET,
        ),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", RecoveryAction.DRAIN_P2P),
        # Some drivers omit the "from" state.
        ("GPU recovery action changed to 0x1 (GPU Reset Required)", RecoveryAction.GPU_RESET),
        # A label this version does not know: the code decides.
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Reboot The Node)", RecoveryAction.NODE_REBOOT),
        ("GPU recovery action changed from 0x0 (None) to 0x9 (Something New)", None),
        ("GPU recovery action ... 0x1 (GPU Reset Required)", None),
        ("", None),
    ],
)
def test_xid_154_recovery_action(text: str, expected: RecoveryAction | None) -> None:
    assert decode_recovery_action(text) is expected
