"""Issue 24, point 4 (D17): the 4 KiB cut keeps the most severe lines, not the first ones.

A message of real kernel lines (forty Xid 13 lines, then one Xid 79) is longer than 4 KiB. Kept
in message order, the cut holds only Xid 13 lines and the fault is decided ``none``; the GPU that
fell off the bus is never replaced. The exporter cuts the message before ingest sees it, so no
later step can recover a dropped line: the cut itself must keep what the policy decides on.

The EKS node monitoring agent does not add lines: while a condition's status stays the same it
joins the new message to the old with "; " on one line (``Fatal()`` in
pkg/manager/node_exporter.go), so its messages are cut by their "; " segments too.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeheal.actions import Action
from nodeheal.conditions import Condition
from nodeheal.config import PolicyOverrides
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.payload import MAX_MESSAGE_BYTES, bound_message, json_bytes
from nodeheal.policy.classify import classify
from tests.unit.exporter.helpers import node, with_condition
from tests.unit.workflow.fakes import NOW
from tests.unit.workflow.test_ingest import detail, envelope, run

DEVICE = "PCI:0000:53:00"


def xid_13(pid: int) -> str:
    return (
        f"NVRM: Xid ({DEVICE}): 13, pid={pid}, name=pt_main_thread, Graphics SM Warp Exception on "
        "(GPC 0, TPC 1, SM 0): Out Of Range Address"
    )


XID_79 = f"NVRM: Xid ({DEVICE}): 79, pid=4242, name=pt_main_thread, GPU has fallen off the bus."
#: Forty Xid 13 lines of a faulting job, then the GPU falling off the bus: about 5.2 KB.
XID_13_LINES = [xid_13(3100 + i) for i in range(40)]


def decided(message: str) -> Action:
    condition = Condition("GPUProblem", "True", "GPUHardwareError", message)
    return classify(condition, PolicyOverrides(), Action.ALERT).action


def within(cut: str, limit: int = MAX_MESSAGE_BYTES) -> bool:
    return json_bytes(cut) <= limit and len(cut.encode("utf-8")) <= limit


# -- the regression: kernel lines, and the node monitoring agent's one line ---------------------


def test_forty_xid_13_lines_then_an_xid_79_line_keep_the_xid_79_and_decide_replace() -> None:
    message = "\n".join([*XID_13_LINES, XID_79])
    assert len(message.encode()) > MAX_MESSAGE_BYTES
    assert decided(message) is Action.REPLACE

    cut = bound_message(message)

    assert within(cut)
    assert XID_79 in cut.splitlines()
    assert decided(cut) is Action.REPLACE
    # The rest of the room still goes to the lesser lines, kept whole and in their order.
    kept_13 = [line for line in cut.splitlines() if line in XID_13_LINES]
    assert len(kept_13) >= 25
    assert kept_13 == [line for line in XID_13_LINES if line in kept_13]
    assert cut.splitlines()[-2] == XID_79  # the original order: the Xid 79 came last
    assert cut.splitlines()[-1].startswith("…[truncated ")
    assert bound_message(cut) == cut


def test_the_node_monitoring_agents_joined_line_keeps_the_xid_79_segment() -> None:
    message = "; ".join([*XID_13_LINES, XID_79])
    assert "\n" not in message and len(message.encode()) > MAX_MESSAGE_BYTES
    assert decided(message) is Action.REPLACE

    cut = bound_message(message)

    assert within(cut)
    assert XID_79 in cut
    assert decided(cut) is Action.REPLACE
    # Whole segments, still joined the agent's way on one line, then the marker on its own.
    joined, marker = cut.split("\n")
    assert marker.startswith("…[truncated ")
    segments = joined.split("; ")
    assert segments[-1] == XID_79
    assert all(segment in XID_13_LINES for segment in segments[:-1]) and len(segments) >= 25
    assert bound_message(cut) == cut


def test_the_fatal_segment_first_in_a_joined_line_is_kept_too() -> None:
    message = "; ".join([XID_79, *XID_13_LINES])
    cut = bound_message(message)
    assert within(cut)
    assert cut.startswith(f"{XID_79}; {XID_13_LINES[0]}; ")
    assert decided(cut) is Action.REPLACE


def test_a_segment_the_policy_reads_without_an_xid_is_kept() -> None:
    # The driver's own words, logged without an Xid; the policy reads them as Xid 79.
    fallen = (
        "NVRM: The NVIDIA GPU 0000:53:00.0 (PCI ID: 10de:2330) installed in this system has fallen "
        "off the bus and is not responding to commands."
    )
    message = "; ".join([*XID_13_LINES, fallen, *XID_13_LINES[:5]])
    cut = bound_message(message)
    assert within(cut) and fallen in cut
    assert decided(cut) is Action.REPLACE


def test_the_driver_text_that_decides_an_xid_154_is_kept_with_it() -> None:
    # Xid 154 is judged by the recovery action its text states: a reboot over forty Xid 13s.
    xid_154 = (
        f"NVRM: Xid ({DEVICE}): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
        "(Node Reboot Required)"
    )
    message = "\n".join([*XID_13_LINES, xid_154])
    cut = bound_message(message)
    assert within(cut) and xid_154 in cut.splitlines()
    assert decided(cut) is Action.REBOOT


# -- the callers: the exporter ships, and ingest starts, what the policy must see -----------------


def test_the_exporter_ships_the_xid_79_of_a_long_kernel_message() -> None:
    message = "\n".join([*XID_13_LINES, XID_79])
    tracker = TransitionTracker(
        "training-on-eks", ExporterSettings(cluster_name="training-on-eks").watches, clock=lambda: NOW
    )
    broken = with_condition(node("ip-10-0-1-2"), "GPUProblem", "True", "GPUHardwareError", message)

    (event,) = tracker.observe(broken)

    shipped = json.loads(event.to_json())["condition"]["message"]
    assert within(shipped) and XID_79 in shipped.splitlines()
    assert decided(shipped) is Action.REPLACE


def test_ingest_starts_the_execution_with_the_xid_79_of_a_joined_message() -> None:
    body = detail()
    body["condition"]["message"] = "; ".join([*XID_13_LINES, XID_79])

    result, starter, _ = run(envelope(body))

    assert result["status"] == "started"
    message = starter.started[result["execution"]]["event"]["condition"]["message"]
    assert within(message) and XID_79 in message
    assert decided(message) is Action.REPLACE


# -- the property: any mix of lesser faults, one fatal line anywhere ----------------------------

#: Real-shaped Xid lines the default policy decides below replace: none (13, 31, 43, 45, 63, 94 with
#: RST: No), alert (an Xid the catalog does not know) and reboot (48, 119, 154 to a GPU reset).
LESSER = [
    xid_13(3101),
    f"NVRM: Xid ({DEVICE}): 31, pid=3102, name=python3, channel 0x00000010, intr 10000000. MMU Fault: "
    "ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f4e_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    f"NVRM: Xid ({DEVICE}): 43, pid=3103, name=python3, Ch 00000008",
    f"NVRM: Xid ({DEVICE}): 45, pid=3104, name=python3, Ch 00000010, errorString CTX SWITCH TIMEOUT",
    f"NVRM: Xid ({DEVICE}): 63, Row Remapper: New row (0x00000000000123ab) marked for remapping, "
    "reset gpu to activate.",
    f"NVRM: Xid ({DEVICE}): 94, pid=3105, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No",
    f"NVRM: Xid ({DEVICE}): 48, An uncorrectable double bit error (DBE) has been detected on GPU in "
    "the framebuffer at partition 1, subpartition 0.",
    f"NVRM: Xid ({DEVICE}): 119, pid=3106, name=python3, Timeout after 6s of waiting for RPC response "
    "from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x8).",
    f"NVRM: Xid ({DEVICE}): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
    f"NVRM: Xid ({DEVICE}): 201, pid=3107, name=python3, an Xid newer than the catalog",
]
#: Lines that carry no signal at all.
NOISE = [
    "kernel: nvidia-nvswitch2: link 00042 training retried, state ok",
    "kubelet: Container runtime status check may not have completed yet",
]
#: Lines the default policy decides replace on.
FATAL = [
    XID_79,
    "NVRM: The NVIDIA GPU 0000:53:00.0 (PCI ID: 10de:2330) installed in this system has fallen off "
    "the bus and is not responding to commands.",
    f"NVRM: Xid ({DEVICE}): 74, pid=3108, name=python3, NVLink: fatal error detected on link 3"
    "(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    f"NVRM: Xid ({DEVICE}): 54, Auxiliary power is not connected to the GPU board",
]


def test_the_lines_of_the_property_are_decided_as_it_assumes() -> None:
    assert all(decided(line).cost < Action.REPLACE.cost for line in LESSER)
    assert {decided(line) for line in LESSER} == {Action.NONE, Action.ALERT, Action.REBOOT}
    assert all(decided(line) is Action.REPLACE for line in FATAL)


@st.composite
def messages(draw: st.DrawFn) -> tuple[str, str]:
    """A message of lesser lines in any number and order, one fatal line anywhere; each joint is a
    line break (node-problem-detector, people) or "; " (the node monitoring agent)."""
    lesser = draw(st.lists(st.sampled_from(LESSER + NOISE), max_size=160))
    prefixes = draw(st.lists(st.sampled_from(["", "kernel: ", "[12345.678901] "]), min_size=len(lesser) + 1))
    fatal = draw(st.sampled_from(FATAL))
    parts = [f"{prefix}{line}" for prefix, line in zip(prefixes, lesser, strict=False)]
    parts.insert(draw(st.integers(0, len(parts))), fatal)
    joints = draw(st.lists(st.sampled_from(["\n", "; "]), min_size=len(parts), max_size=len(parts)))
    message = "".join(part + joint for part, joint in zip(parts, joints, strict=True))
    if draw(st.booleans()):
        message = message[: -len(joints[-1])]  # with or without a last line break
    return message, fatal


@settings(max_examples=150, deadline=None)
@given(messages(), st.sampled_from([MAX_MESSAGE_BYTES, 2048, 1024, 512]))
def test_the_cut_keeps_the_fatal_line_whole_and_decides_at_least_as_it_does(
    case: tuple[str, str], limit: int
) -> None:
    message, fatal = case

    cut = bound_message(message, limit)

    assert within(cut, limit)
    assert fatal in cut
    assert decided(cut).cost >= decided(fatal).cost
    assert bound_message(cut, limit) == cut
