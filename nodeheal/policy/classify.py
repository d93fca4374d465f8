"""What a bad Node condition asks for, before any history, label or mode is considered. Pure.

The default table (docs/architecture.md, "Decision policy"), from the most specific signal to the least:

1. **Xids** in the reason (``NvidiaXID79Error``) or the message (``NVRM: Xid (...): 79, ...``).
   Each Xid maps through its catalog category (see :data:`CATEGORY_ACTIONS`), with the driver's
   text decoded where NVIDIA says the action depends on it (94/95, 144-150, 154).
2. **Known reasons** of the EKS node monitoring agent (``NvidiaNVLinkError``, ``DCGMError``...).
3. **Condition rules** by type (``GPUProblem``, ``KernelDeadlock``, ``*Ready``, ``Ready``), for a
   bad condition that carries neither: these are the ones with a confirmation time, because
   without an Xid the only evidence is that the condition *stays* bad.
4. Anything else is **unknown** and gets ``unknown_action`` (alert by default): never destroy on
   what we do not understand.

When a condition carries several signals of the same level (one message with Xid 79 and Xid 154,
or a reason and a message), the most costly action wins: a cheaper remedy cannot fix the worse
fault. Overrides from ``cdk.json`` (global, then per pool) replace the defaults key by key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from nodeheal.actions import Action
from nodeheal.conditions import Condition
from nodeheal.config import ConditionRule, PolicyOverrides
from nodeheal.policy.catalog import XidEntry, lookup
from nodeheal.policy.signals import (
    CONTAINMENT_XIDS,
    NVLINK5_XIDS,
    RECOVERY_ACTION_XID,
    NvlinkSeverity,
    RecoveryAction,
    Source,
    XidSignal,
    xid_signals,
)

#: Catalog category -> default action. The catalog holds NVIDIA's facts; this mapping is NodeHeal's
#: policy on top of them. On EC2 NodeHeal cannot reset one GPU (``nvidia-smi -r`` needs every
#: process off the GPU and, on NVSwitch systems, the whole baseboard), so "reset the GPU" becomes
#: a reboot, and anything a reboot cannot fix becomes a replacement on fresh hardware.
CATEGORY_ACTIONS: Mapping[str, Action] = MappingProxyType(
    {
        # 13, 31, 32, 68, 69, 94: the application faulted; its own restart is the remedy.
        "APP_RESTART_NO_NODE_ACTION": Action.NONE,
        # 38, 43, 121, 157 and 63, 92: no immediate action per NVIDIA; the ledger keeps the trend.
        "INFORMATIONAL": Action.NONE,
        "INFORMATIONAL_TREND": Action.NONE,
        # 45: channel teardown after another Xid; that other Xid carries the decision.
        "FOLLOW_OTHER_XID": Action.NONE,
        # 46, 62, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158 and 48, 64: RESET_GPU.
        # A GPU that keeps failing after the reboot escalates to replace (decide.py).
        "GPU_RESET": Action.REBOOT,
        "GPU_RESET_THEN_HW_CHECK": Action.REBOOT,
        # 151: NVIDIA says RESTART_VM; on EC2 that is an instance reboot.
        "NODE_REBOOT_VM_RESTART": Action.REBOOT,
        # 79: RESTART_BM (a power cycle). An EC2 reboot keeps the same host and does not power-cycle
        # the GPU, so the reliable remedy is a new instance on different hardware.
        "NODE_REBOOT_POWER_CYCLE": Action.REPLACE,
        # 54: aux power / seating, physical; only different hardware helps.
        "HARDWARE_INSPECTION": Action.REPLACE,
        # 56, 57, 58, 61: unused on Ampere and later, so seeing one on a modern GPU means the board
        # is misbehaving; NVIDIA says contact support. Replace, as the design does for 56-58.
        "UNUSED_ON_MODERN_GPUS": Action.REPLACE,
        # 74: NVLink error; the register decode needs NVIDIA's workflow. The design treats it as a
        # link fault that follows the board, so replace.
        "DECODE_REQUIRED_GPU_RESET_OR_REBOOT": Action.REPLACE,
    }
)

#: Node monitoring agent reasons (reason -> action). ``*`` at the end of a key matches a prefix.
DEFAULT_REASON_ACTIONS: Mapping[str, Action] = MappingProxyType(
    {
        # Hardware the agent has already judged fatal: NVLink, a GPU missing. (Its double-bit ECC
        # reason, NvidiaDoubleBitError, is Xid 48 under another name and decided by that row:
        # signals.REASONS_NAMING_AN_XID.)
        "NvidiaNVLinkError": Action.REPLACE,
        "NvidiaDeviceCountMismatch": Action.REPLACE,
        # DCGM itself failed (host engine down, field read errors, health codes from a monitor that
        # is known to raise false positives when its connection drops): the monitor, not the GPU.
        "DCGMError": Action.ALERT,
        "DCGMFieldError*": Action.ALERT,
        "DCGMHealthCode*": Action.ALERT,
    }
)

#: Condition type -> rule when no Xid and no known reason is present. ``*Ready`` stands for the
#: node monitoring agent's readiness conditions (every ``...Ready`` except the kubelet's ``Ready``).
DEFAULT_CONDITION_RULES: Mapping[str, ConditionRule] = MappingProxyType(
    {
        # NPD's GPU check failed without an Xid (nvidia-smi hangs or errors): real, but a single
        # timeout under load is common, so it must persist for two minutes first.
        "GPUProblem": ConditionRule(Action.REPLACE, confirm_seconds=120),
        # NodeHeal's NPD plugin check (deploy/node-problem-detector): nvidia-smi does not answer or
        # fewer GPUs than the node advertised. A separate condition so the plugin's periodic
        # status never overwrites the kernel-log monitor's GPUProblem; same two-minute rule.
        "GPUUnavailable": ConditionRule(Action.REPLACE, confirm_seconds=120),
        # A process in D state or defunct still holding /dev/nvidia* (check_gpu_zombies.sh): the
        # driver no longer answers it, its GPU memory stays taken and no signal frees it; a reboot
        # does. Five minutes (five runs of the plugin) first, so a process briefly in D state
        # inside an ioctl is not a fault.
        "GPUDriverZombie": ConditionRule(Action.REBOOT, confirm_seconds=300),
        # A GPU slowed for heat or by the power brake, or above GPU_TEMP_MAX
        # (check_gpu_thermal.sh): slow, not broken, and the cause is usually outside the node
        # (cooling, the rack's power) where a new instance may land again. A person should know;
        # five minutes (about three runs) first, so a burst of heat under a new job is not a page.
        "GPUThermalThrottling": ConditionRule(Action.ALERT, confirm_seconds=300),
        # The subnet's router stopped answering this node's pings after answering earlier on the
        # same boot (check_gateway.sh) while the node still reaches the API server to say so. ICMP
        # to the gateway failing on one node is a person's call, not a replacement: a node whose
        # network is truly broken goes NotReady, which Karpenter and EKS node repair own (the
        # plain Ready rule below only alerts, for that reason), and a change across the VPC or an
        # AZ (a security group or network ACL dropping ICMP, the router itself) would otherwise
        # replace nodes into the same fault. Five minutes first, so a brief loss is not a page.
        "GatewayUnreachable": ConditionRule(Action.ALERT, confirm_seconds=300),
        # The node does not resolve its configured name (check_dns.sh): almost always the
        # resolver's fault or the VPC's, which no new node fixes. A person should know, after five
        # minutes.
        "DNSUnavailable": ConditionRule(Action.ALERT, confirm_seconds=300),
        # containerd answers slower than its bound, or not at all (check_runtime.sh): no pod
        # starts or stops cleanly on the node. A wedged daemon is what a reboot clears; five
        # minutes first, so a burst of image pulls is not a fault.
        "ContainerRuntimeUnresponsive": ConditionRule(Action.REBOOT, confirm_seconds=300),
        # The kernel log monitors' conditions below never return to False until NPD restarts (a
        # reboot), so a confirmation time would only delay: each acts on the line itself.
        # NPD's stock kernel monitor: XFS shut a filesystem down after an I/O or metadata error
        # (the EKS AL2023 AMIs' root is XFS): the node cannot write; a new one can.
        "XfsShutdown": ConditionRule(Action.REPLACE, confirm_seconds=0),
        # NPD's stock kernel monitor: the firmware reported a fatal hardware error (CPER): the
        # host's hardware, which only different hardware fixes.
        "CperHardwareErrorFatal": ConditionRule(Action.REPLACE, confirm_seconds=0),
        # NodeHeal's node-monitor.json: a soft or hard CPU lockup or an RCU stall. The kernel
        # that reported it stays suspect until it restarts; a reboot is the cheapest remedy.
        "CPUStuck": ConditionRule(Action.REBOOT, confirm_seconds=0),
        # An uncorrectable host memory error (EDAC UE): the DIMM is failing; new hardware.
        "MemoryUncorrectable": ConditionRule(Action.REPLACE, confirm_seconds=0),
        # An NVMe controller (EBS or instance store) timed out into a reset or went down.
        "DiskUnresponsive": ConditionRule(Action.REPLACE, confirm_seconds=0),
        # XFS or ext4 found corrupt metadata: nothing on the node repairs a mounted filesystem.
        "FilesystemCorrupted": ConditionRule(Action.REPLACE, confirm_seconds=0),
        # The node's kernel or disk is wedged; give it ten minutes to clear on its own.
        "KernelDeadlock": ConditionRule(Action.REPLACE, confirm_seconds=600),
        "ReadonlyFilesystem": ConditionRule(Action.REPLACE, confirm_seconds=600),
        # The agent only sets ``*Ready=False`` for reasons it rates fatal; the ten minutes match
        # EKS node auto-repair for these conditions.
        "*Ready": ConditionRule(Action.REPLACE, confirm_seconds=600),
        # NotReady is Karpenter's and EKS's to handle; a person should know, NodeHeal stays out.
        # Every new node reports Ready=False for its first seconds (CNI, device plugins): only a
        # node still NotReady after ten minutes is worth a page.
        "Ready": ConditionRule(Action.ALERT, confirm_seconds=600),
    }
)

#: One line per category for the explanation, so a person sees why the action fits the fault.
_CATEGORY_WHY: Mapping[str, str] = MappingProxyType(
    {
        "APP_RESTART_NO_NODE_ACTION": "the application faulted, the GPU is fine",
        "INFORMATIONAL": "no immediate action per NVIDIA; recorded",
        "INFORMATIONAL_TREND": "no immediate action per NVIDIA; recorded for the trend",
        "FOLLOW_OTHER_XID": "a consequence of another Xid, which carries the decision",
        "GPU_RESET": "NVIDIA says reset the GPU; on EC2 an instance reboot is the reset",
        "GPU_RESET_THEN_HW_CHECK": "NVIDIA says reset the GPU; on EC2 an instance reboot is the reset",
        "NODE_REBOOT_VM_RESTART": "NVIDIA says restart the VM; on EC2 that is an instance reboot",
        "NODE_REBOOT_POWER_CYCLE": "needs a power cycle, which an EC2 reboot is not; new hardware is",
        "HARDWARE_INSPECTION": "a physical fault only different hardware fixes",
        "UNUSED_ON_MODERN_GPUS": "never raised by a healthy modern GPU; NVIDIA says contact support",
        "DECODE_REQUIRED_GPU_RESET_OR_REBOOT": "an NVLink link fault that follows the board",
    }
)

READY_WILDCARD = "*Ready"


@dataclass(frozen=True, slots=True)
class Classification:
    action: Action
    #: Why, for a person: the signal, what NVIDIA says it means and recommends, what NodeHeal does.
    reason: str
    xid: int | None
    #: Stable short id of the deciding signal: ``xid:79``, ``reason:NvidiaNVLinkError``,
    #: ``condition:KernelDeadlock``, ``unknown``. Metrics and the ledger group by it.
    signal: str
    #: Seconds the condition must have been bad before acting (0: act now).
    confirm_seconds: int = 0


def classify(condition: Condition, overrides: PolicyOverrides, unknown_action: Action) -> Classification:
    if not condition.is_bad:
        return Classification(
            action=Action.NONE,
            reason=f"condition is healthy ({condition.type}={condition.status}); nothing to do",
            xid=None,
            signal=f"condition:{condition.type}",
        )

    reason_candidate = _classify_reason(condition.reason, overrides)
    signals = xid_signals(condition.reason, condition.message)
    if reason_candidate is not None and _match_key(condition.reason, overrides.reason_actions) is not None:
        # An operator's reasonActions entry that matches this reason (say ``NvidiaXID63Error``) is
        # a deliberate choice about it, more specific than the Xid the reason names, so it speaks
        # for the reason alone; Xids in the message are still weighed.
        signals = tuple(s for s in signals if s.source is not Source.REASON)
    candidates = [_classify_xid(signal, overrides, unknown_action) for signal in signals]
    if reason_candidate is not None:
        candidates.append(reason_candidate)
    if candidates:
        return _most_costly(candidates, condition)

    rule_candidate = _classify_condition_rule(condition, overrides)
    if rule_candidate is not None:
        return rule_candidate

    what = f"{condition.type}={condition.status}" + (
        f" (reason {condition.reason})" if condition.reason else ""
    )
    return Classification(
        action=unknown_action,
        reason=(
            f"{what} matches no Xid, known reason or condition rule; NodeHeal does not act on what it "
            f"does not understand, so the action is the policy's unknownAction ({unknown_action.value})"
        ),
        xid=None,
        signal="unknown",
    )


def default_xid_action(signal: XidSignal) -> tuple[Action | None, str]:
    """The built-in action for one Xid signal, and the decoding that led to it.

    None means the Xid cannot be judged (unknown to the catalog, or text that should state the
    action and does not); the caller then applies ``unknown_action``.
    """
    entry = lookup(signal.xid)
    if entry is None:
        return None, f"Xid {signal.xid} is not in NodeHeal's Xid catalog"
    if signal.xid in CONTAINMENT_XIDS:
        return _containment_action(signal, entry)
    if signal.xid in NVLINK5_XIDS:
        return _nvlink5_action(signal)
    if signal.xid == RECOVERY_ACTION_XID:
        return _recovery_action(signal)
    action = CATEGORY_ACTIONS.get(entry.category)
    if action is None:
        return None, f"the catalog category {entry.category} of Xid {signal.xid} has no default action"
    return action, f"{entry.category}: {_CATEGORY_WHY[entry.category]}"


def _containment_action(signal: XidSignal, entry: XidEntry) -> tuple[Action | None, str]:
    reset = signal.reset_required
    if signal.xid == 94:
        if reset:
            return Action.REBOOT, "the driver reports RST: Yes (a GPU reset is needed to finish containment)"
        flag = "RST: No" if reset is False else "no RST flag in the message"
        return Action.NONE, f"contained to the faulting application ({flag})"
    # 95 is uncontained: every context on the GPU is affected, and NVIDIA's immediate action is a
    # GPU reset whatever the flag says, so the flag is reported but does not lower the action.
    default = CATEGORY_ACTIONS[entry.category]
    flag = {True: "RST: Yes", False: "RST: No", None: "no RST flag in the message"}[reset]
    return default, f"uncontained memory error ({flag})"


def _nvlink5_action(signal: XidSignal) -> tuple[Action | None, str]:
    severity = signal.nvlink_severity
    if severity is NvlinkSeverity.FATAL:
        return Action.REBOOT, "the driver marks this NVLink5 error Fatal (the GPU needs a reset)"
    if severity is NvlinkSeverity.NONFATAL:
        return Action.NONE, "the driver marks this NVLink5 error Nonfatal (corrected; recorded for the trend)"
    return None, "the message does not say whether this NVLink5 error is Fatal or Nonfatal"


def _recovery_action(signal: XidSignal) -> tuple[Action | None, str]:
    stated = signal.recovery_action
    if stated is None:
        return None, "the message does not state which recovery action the driver requires"
    described = f"the driver's recovery action is now {stated.value!r}"
    if stated is RecoveryAction.NONE:
        return Action.NONE, f"{described}: the earlier fault is cleared"
    if stated in (RecoveryAction.GPU_RESET, RecoveryAction.NODE_REBOOT, RecoveryAction.DRAIN_AND_RESET):
        return Action.REBOOT, f"{described}; on EC2 an instance reboot is the GPU reset"
    # Drain P2P is a transitional state: the driver asks for peer-to-peer traffic to stop and
    # announces the real action in a later Xid 154. A person should know; nothing to destroy yet.
    return Action.ALERT, f"{described} (transitional; a later Xid 154 states the real action)"


def _classify_xid(signal: XidSignal, overrides: PolicyOverrides, unknown_action: Action) -> Classification:
    entry = lookup(signal.xid)
    where = {
        Source.MESSAGE: "in the message",
        Source.REASON: "in the reason",
        Source.FALLEN_OFF_THE_BUS: "(the message says the GPU has fallen off the bus, which is Xid 79)",
    }[signal.source]
    facts = (
        f"Xid {signal.xid} {where}: {entry.name} - {entry.meaning.rstrip('.')}. "
        f"Catalog recommendation: {entry.recommended_action.rstrip('.')}"
        if entry is not None
        else f"Xid {signal.xid} {where}"
    )
    override = overrides.xid_actions.get(signal.xid)
    if override is not None:
        because = f"the policy's xidActions override sets {override.value}"
        action = override
    else:
        default, decoded = default_xid_action(signal)
        if default is None:
            action = unknown_action
            because = f"{decoded}, so the policy's unknownAction applies ({unknown_action.value})"
        else:
            action = default
            because = (
                f"{decoded}; default action {default.value}" if decoded else f"default action {default.value}"
            )
    return Classification(
        action=action,
        reason=f"{facts}. NodeHeal: {because}",
        xid=signal.xid,
        signal=f"xid:{signal.xid}",
    )


def _classify_reason(reason: str, overrides: PolicyOverrides) -> Classification | None:
    if not reason:
        return None
    for table, origin in (
        (overrides.reason_actions, "the policy's reasonActions override"),
        (DEFAULT_REASON_ACTIONS, "the default for this node monitoring agent reason"),
    ):
        key = _match_key(reason, table)
        if key is not None:
            action = table[key]
            matched = key if key == reason else f"{reason} (matches {key})"
            return Classification(
                action=action,
                reason=f"reason {matched}: {origin} is {action.value}",
                xid=None,
                signal=f"reason:{reason}",
            )
    return None


def _match_key(reason: str, table: Mapping[str, Action]) -> str | None:
    """Exact key first, then the longest ``prefix*`` key that matches."""
    if reason in table:
        return reason
    prefixes = [key for key in table if key.endswith("*") and reason.startswith(key[:-1])]
    return max(prefixes, key=len) if prefixes else None


def _classify_condition_rule(condition: Condition, overrides: PolicyOverrides) -> Classification | None:
    rules = {**DEFAULT_CONDITION_RULES, **overrides.condition_rules}
    key = condition.type
    if key not in rules and condition.type != "Ready" and condition.type.endswith("Ready"):
        key = READY_WILDCARD
    rule = rules.get(key)
    if rule is None:
        return None
    origin = (
        "the policy's conditionRules override" if key in overrides.condition_rules else "the default rule"
    )
    wait = f" once it has stayed bad for {rule.confirm_seconds} s" if rule.confirm_seconds else ""
    detail = f" (reason {condition.reason})" if condition.reason else ""
    no_xid = " with no Xid in the message" if condition.type in ("GPUProblem", "GPUUnavailable") else ""
    return Classification(
        action=rule.action,
        reason=(
            f"{condition.type}={condition.status}{detail}{no_xid}: {origin} for {key} is "
            f"{rule.action.value}{wait}"
        ),
        xid=None,
        signal=f"condition:{condition.type}",
        confirm_seconds=rule.confirm_seconds,
    )


#: Other signals named in an explanation after the one that decided.
_MAX_OTHER_SIGNALS_LISTED = 10


def _most_costly(candidates: list[Classification], condition: Condition) -> Classification:
    # max() keeps the first of equal cost, so a reason's Xid (listed first) speaks for a message
    # that repeats it, and the earliest line of a multi-line message speaks for later equals.
    winner = max(candidates, key=lambda c: c.action.cost)
    others: dict[str, Action] = {}
    for candidate in candidates:
        if candidate.signal != winner.signal:
            seen = others.get(candidate.signal)
            if seen is None or candidate.action.cost > seen.cost:
                others[candidate.signal] = candidate.action
    reason = winner.reason
    if others:
        # A message may name hundreds of Xids; the explanation lists a few (it travels in the
        # workflow's state, the record and the notification: D17).
        shown = list(others.items())[:_MAX_OTHER_SIGNALS_LISTED]
        listed = "; ".join(f"{signal} -> {action.value}" for signal, action in shown)
        if len(others) > len(shown):
            listed += f"; and {len(others) - len(shown)} more"
        reason += f". Also on {condition.type}: {listed}; the most costly action wins"
    return Classification(
        action=winner.action,
        reason=reason,
        xid=winner.xid,
        signal=winner.signal,
        confirm_seconds=winner.confirm_seconds,
    )
