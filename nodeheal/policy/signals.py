"""Reading GPU fault signals out of a Node condition's reason and message.

Detectors report the same fault in different shapes, and the policy must read all of them the
same way:

* node-problem-detector copies the kernel line into the condition message:
  ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.``
  (also ``pid='<unknown>', name=<unknown>``, MIG attribution ``(PCI:0000:01:00 GPU-I:05)``,
  old drivers ``(0000:03:00)``, GSP-era ``NVRM: Xid 154, ...`` without a device);
* the EKS node monitoring agent puts the Xid in the reason: ``NvidiaXID79Error``,
  ``NvidiaXID13Warning``;
* people and scripts write plain ``Xid 79`` / ``XID 95 ...``.

Some Xids only mean something together with the driver's text after the number, which is
decoded here: 94/95 ``RST: Yes|No`` (whether a GPU reset is needed), 144-150 (NVLink5)
``Fatal``/``Nonfatal``, and 154, whose text states the recovery action the driver requires.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

#: ``Xid`` (any case) then optionally a parenthesised device and a colon, then the number: the
#: driver's kernel line (``NVRM: Xid (PCI:0000:53:00): 79, ...``, NPD's messages). A hyphen counts
#: as the colon: the EKS node monitoring agent's condition message is ``detected XID-79 on the
#: instance, review kernel logs for additional information.`` (``monitors/nvidia/dcgm/
#: dcgm_policies.go``), and it joins the messages of a condition that stays bad with "; " while the
#: reason becomes the newest fault's (``pkg/manager/node_exporter.go``, ``Fatal``): an Xid 79
#: followed by an Xid 48 reads ``NvidiaXID48Error`` with both in the message, and the 79 decides.
#: ``previous Xid N`` is excluded: the driver appends ``caused by previous Xid 149`` to an Xid 45
#: line, which names an earlier fault (logged on its own line) rather than a new one.
_XID = re.compile(
    r"(?<![A-Za-z0-9_])(?<!previous )xid\s*(?:\((?P<device>[^)]*)\))?\s*[:-]?\s*(?P<xid>\d{1,3})(?!\d)",
    re.IGNORECASE,
)
#: The node monitoring agent's reasons: ``NvidiaXID%dError`` (fatal) and ``NvidiaXID%dWarning``.
_NMA_XID_REASON = re.compile(r"^NvidiaXID(?P<xid>\d{1,3})(?P<kind>Error|Warning)$")
#: The driver's line when the GPU vanished from PCIe, sometimes logged without any Xid:
#: ``NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has fallen off
#: the bus and is not responding to commands.``
_FALLEN_OFF_THE_BUS = re.compile(r"fallen\s+off\s+the\s+bus", re.IGNORECASE)
#: Xid 94/95 (memory error containment): ``... Contained: CE User Channel (0x9). RST: No, D-RST: No``.
_RESET_REQUIRED = re.compile(r"(?<![A-Za-z-])RST:\s*(?P<value>Yes|No)\b", re.IGNORECASE)
#: Xid 144-150 (NVLink5): ``NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x021425c6 ...)``.
_NVLINK5_SEVERITY = re.compile(r"\b(?P<severity>Fatal|Nonfatal|Non-fatal)\b", re.IGNORECASE)
#: Xid 154: ``GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)``; the
#: ``from`` part is missing on some drivers. Only the target state matters.
_RECOVERY_TARGET = re.compile(
    r"\bto\s+(?P<code>0x[0-9a-f]+)?\s*(?:\((?P<label>[^)]*)\))?",
    re.IGNORECASE,
)
_RECOVERY_CHANGED = re.compile(r"recovery\s+action\s+changed", re.IGNORECASE)

FALLEN_OFF_THE_BUS_XID = 79
CONTAINMENT_XIDS = frozenset({94, 95})
NVLINK5_XIDS = frozenset(range(144, 151))
RECOVERY_ACTION_XID = 154


class Source(StrEnum):
    MESSAGE = "message"  # an Xid number in the condition message (NPD)
    REASON = "reason"  # NvidiaXID<n>Error / NvidiaXID<n>Warning (node monitoring agent)
    FALLEN_OFF_THE_BUS = "fallen-off-the-bus"  # the driver's text without an Xid


class RecoveryAction(StrEnum):
    """The GPU recovery actions the driver states in Xid 154 (NVML ``nvmlDeviceGpuRecoveryAction_t``)."""

    NONE = "None"
    GPU_RESET = "GPU Reset Required"
    NODE_REBOOT = "Node Reboot Required"
    DRAIN_P2P = "Drain P2P"
    DRAIN_AND_RESET = "Drain and Reset"


_RECOVERY_BY_CODE = {
    0: RecoveryAction.NONE,
    1: RecoveryAction.GPU_RESET,
    2: RecoveryAction.NODE_REBOOT,
    3: RecoveryAction.DRAIN_P2P,
    4: RecoveryAction.DRAIN_AND_RESET,
}


class NvlinkSeverity(StrEnum):
    FATAL = "Fatal"
    NONFATAL = "Nonfatal"


@dataclass(frozen=True, slots=True)
class XidSignal:
    """One Xid seen on a condition, with the driver's text that belongs to it."""

    xid: int
    source: Source
    #: The text after the Xid number up to the next Xid in the same message ("" from a reason).
    detail: str = ""
    #: PCI address as logged (``PCI:0000:3b:00``), when present.
    device: str = ""
    #: For NMA reasons: ``Error`` (the agent treats it as fatal) or ``Warning``.
    reason_kind: str = ""

    @property
    def reset_required(self) -> bool | None:
        """Xid 94/95: the driver's ``RST:`` flag; None when the text does not carry it."""
        match = _RESET_REQUIRED.search(self.detail)
        if match is None:
            return None
        return match.group("value").lower() == "yes"

    @property
    def nvlink_severity(self) -> NvlinkSeverity | None:
        """Xid 144-150: ``Fatal`` or ``Nonfatal`` as printed by the driver; None when absent."""
        match = _NVLINK5_SEVERITY.search(self.detail)
        if match is None:
            return None
        word = match.group("severity").lower()
        return NvlinkSeverity.FATAL if word == "fatal" else NvlinkSeverity.NONFATAL

    @property
    def recovery_action(self) -> RecoveryAction | None:
        """Xid 154: the recovery action the GPU changed *to*; None when it cannot be read."""
        return decode_recovery_action(self.detail)


def decode_recovery_action(text: str) -> RecoveryAction | None:
    changed = _RECOVERY_CHANGED.search(text)
    if changed is None:
        return None
    target = _RECOVERY_TARGET.search(text, changed.end())
    if target is None:
        return None
    label = (target.group("label") or "").strip().lower()
    for action in RecoveryAction:
        if label == action.value.lower():
            return action
    # The label is the human text; the code is authoritative when the label is new or missing.
    code = target.group("code")
    if code is not None:
        return _RECOVERY_BY_CODE.get(int(code, 16))
    return None


#: The node monitoring agent's reasons that name a fault NVIDIA's catalog lists as an Xid, under
#: another name: one fault, one verdict (docs/architecture.md, D11), decided by the catalog's row.
#: ``NvidiaDoubleBitError`` is DCGM's double-bit ECC policy violation (``handleDbeFinding`` in
#: https://github.com/aws/eks-node-monitoring-agent/blob/main/monitors/nvidia/dcgm/dcgm_policies.go),
#: the uncorrectable ECC error the driver logs as Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE), whose NVIDIA
#: workflow (WORKFLOW_XID_48) is to reset the GPU first and replace only on persistent errors.
REASONS_NAMING_AN_XID = {"NvidiaDoubleBitError": 48}


def xid_from_reason(reason: str) -> XidSignal | None:
    """``NvidiaXID79Error`` -> Xid 79 (the node monitoring agent's reason naming), and the agent's
    other names for catalogued Xids (:data:`REASONS_NAMING_AN_XID`)."""
    named = REASONS_NAMING_AN_XID.get(reason.strip())
    if named is not None:
        return XidSignal(xid=named, source=Source.REASON, reason_kind="Error")
    match = _NMA_XID_REASON.match(reason.strip())
    if match is None:
        return None
    return XidSignal(xid=int(match.group("xid")), source=Source.REASON, reason_kind=match.group("kind"))


def xids_in_message(message: str) -> tuple[XidSignal, ...]:
    """Every Xid in a condition message, in order, each with the text that belongs to it.

    A message may carry several lines (NPD joins them, people paste them): ``Xid 79`` followed by
    ``Xid 154 ... Node Reboot Required`` is two signals, and the policy weighs each.
    """
    matches = list(_XID.finditer(message))
    signals: list[XidSignal] = []
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(message)
        signals.append(
            XidSignal(
                xid=int(match.group("xid")),
                source=Source.MESSAGE,
                detail=message[match.end() : end].strip(" ,.\n"),
                device=(match.group("device") or "").strip(),
            )
        )
    if not any(s.xid == FALLEN_OFF_THE_BUS_XID for s in signals):
        fallen = _FALLEN_OFF_THE_BUS.search(message)
        if fallen is not None:
            signals.append(
                XidSignal(
                    xid=FALLEN_OFF_THE_BUS_XID, source=Source.FALLEN_OFF_THE_BUS, detail=message.strip()
                )
            )
    return tuple(signals)


def xid_signals(reason: str, message: str) -> tuple[XidSignal, ...]:
    """All Xid signals on a condition: the reason's first (the agent's verdict), then the message's."""
    from_reason = xid_from_reason(reason)
    from_message = xids_in_message(message)
    return ((from_reason,) if from_reason is not None else ()) + from_message
