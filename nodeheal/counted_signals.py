"""Signals that count: Warning Events that predict a failure but do not act alone.

A single Xid 92 (a high single-bit ECC rate) or a non-fatal NVLink5 error calls for nothing, and
the decision table records it and moves on. Many of them on one instance within hours is a GPU
that is degrading. These signals reach NodeHeal as Kubernetes Warning Events about the Node, not
as conditions:

* node-problem-detector's GPU log monitor (``deploy/node-problem-detector/gpu-monitor.json``)
  reports them as temporary problems, reason ``GPUInformationalXid`` (Xid 38, 63, 92, 121, 157,
  154 to "None", and 144-150 when the driver says ``Nonfatal``) or ``GPUApplicationXid`` (13, 31,
  32, 43, 45, 68, 69 and 94 without ``RST: Yes``), with the kernel line as the message. So the Xid
  is read from the message, never from the reason;
* NPD's stock kernel and systemd monitors report ``OOMKilling``, ``TaskHung`` and the restarts of
  ``kubelet``, ``containerd`` and ``docker`` (``KubeletStart``, ``ContainerdStart``,
  ``DockerStart``) the same way (NPD v1.35.1 ``config/kernel-monitor.json``,
  ``config/systemd-monitor.json``);
* the EKS node monitoring agent records a Warning with the condition type as reason and
  ``<reason>: <message>`` as message (``nodeExporter.Warning`` in
  https://github.com/aws/eks-node-monitoring-agent/blob/51af549/pkg/manager/node_exporter.go):
  ``NvidiaXID92Warning: detected unknown XID-92 on the instance, ...`` for an Xid it does not list
  as fatal (``monitors/nvidia/dcgm/dcgm_policies.go``), and ``DCGMHealthCode<n>: DCGM detected
  issues in health check system with error code <n>`` for a DCGM health incident that is a warning,
  not a failure (``monitors/nvidia/dcgm/dcgm_healthcheck.go``). Its fatal findings are conditions
  (``Fatal`` there sets the condition and records no Event), which the decision table handles.

This module names each counted signal and holds its default rule (reading one out of an Event is
``nodeheal.policy.counted_signals``, which needs the Xid parser):
``count`` occurrences within ``windowHours`` on one instance calls for ``action``. Each default
cites the catalog row it follows (``nodeheal/policy/xid_catalog.csv``, NVIDIA's Xid catalog).
Counting itself (windows, occurrences, crossings) is ``nodeheal.workflow.signal_windows``.

No ``retire`` action exists yet (D11): a count that calls for a gentler end than a reboot alerts a
person today. The action vocabulary is the decision table's, so a later action slots in here
without a new shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from nodeheal.actions import Action

#: The condition type of an execution started by a counted signal. No detector writes it: the
#: execution's condition is made from the window (``nodeheal.workflow.signal_windows``), and Admit
#: proves it against the ledger instead of the Node (docs/architecture.md, D1 and D19).
COUNTED_CONDITION_TYPE = "NodeHealCountedSignal"

#: The prefix client-go's event aggregator gives a merged Event's message: from the 10th distinct
#: message with the same source, object, type and reason within 10 minutes, one Event stands for
#: them all and carries the newest message after this prefix (``tools/record/events_cache.go``,
#: ``EventAggregate``).
AGGREGATED_MESSAGE_PREFIX = "(combined from similar events): "


@dataclass(frozen=True, slots=True)
class CountedRule:
    """``count`` occurrences within ``window_hours`` on one instance calls for ``action``."""

    count: int
    window_hours: int
    action: Action

    def to_json(self) -> dict[str, object]:
        return {"count": self.count, "windowHours": self.window_hours, "action": self.action.value}


@dataclass(frozen=True, slots=True)
class SignalDefinition:
    #: Stable id: the ledger's window items, execution names and ``policy.countedSignals`` key on it.
    key: str
    #: What a person reads: "Xid 92 (high single-bit ECC rate)".
    title: str
    #: The reason of the execution's condition (``COUNTED_CONDITION_TYPE``): one word per signal.
    reason: str
    default: CountedRule
    #: Why the default is what it is, and where that comes from.
    source: str


def _definitions(*definitions: SignalDefinition) -> Mapping[str, SignalDefinition]:
    return MappingProxyType({d.key: d for d in definitions})


#: The counted signals and their defaults. Thresholds are within reach of client-go's spam filter
#: (docs/operations.md, "Counted signals"): one NPD monitor on one node gets 25 Events, then one
#: every 5 minutes, so at most 25 + 12 x windowHours are ever seen in a window.
DEFINITIONS: Mapping[str, SignalDefinition] = _definitions(
    SignalDefinition(
        key="xid-63",
        title="Xid 63 (row remap pending)",
        reason="Xid63RowRemapPending",
        default=CountedRule(count=2, window_hours=24, action=Action.REBOOT),
        source=(
            "NVIDIA's catalog, Xid 63 (INFOROM_DRAM_RETIREMENT_EVENT): informational, the remap "
            "activates at the next GPU reset, trend the count. A second pending remap within a day "
            "means rows keep failing while the remaps wait for the reset, and on EC2 the reset is "
            "a reboot; one alone is recorded."
        ),
    ),
    SignalDefinition(
        key="xid-92",
        title="Xid 92 (high single-bit ECC rate)",
        reason="Xid92HighSingleBitEccRate",
        default=CountedRule(count=10, window_hours=24, action=Action.ALERT),
        source=(
            "NVIDIA's catalog, Xid 92 (EXCESSIVE_SBE_INTERRUPTS): corrected errors, no immediate "
            "action; contact support, consider RMA if the rate stays high. Ten in a day is that "
            "rate; a person decides on the RMA."
        ),
    ),
    SignalDefinition(
        key="xid-94",
        title="Xid 94 without a reset required (contained ECC error)",
        reason="Xid94ContainedErrorsRepeated",
        default=CountedRule(count=5, window_hours=24, action=Action.ALERT),
        source=(
            "NVIDIA's catalog, Xid 94 (ROBUST_CHANNEL_CONTAINED_ERROR): contained to the "
            "application, which restarts; the GPU stays usable unless RST: Yes (a condition, "
            "handled by the decision table). Repeated containment on one GPU is worth a person."
        ),
    ),
    SignalDefinition(
        key="nvlink-nonfatal",
        title="non-fatal NVLink5 error (Xid 144-150)",
        reason="NvlinkNonfatalErrorsRepeated",
        default=CountedRule(count=10, window_hours=24, action=Action.ALERT),
        source=(
            "NVIDIA's catalog, Xid 144-150 (NVLink5): Nonfatal variants are usually ignorable, "
            "monitor them; Fatal ones are conditions. A link that keeps logging them is a person's call."
        ),
    ),
    SignalDefinition(
        key="dcgm-health-warning",
        title="DCGM health-check warning",
        reason="DcgmHealthWarningsRepeated",
        default=CountedRule(count=3, window_hours=24, action=Action.ALERT),
        source=(
            "EKS node monitoring agent, dcgm_healthcheck.go: a DCGM health incident of result WARN "
            "is a Warning Event (FAIL is a condition). DCGM's error codes need a person to read."
        ),
    ),
    SignalDefinition(
        key="oom-kill",
        title="OOM kill",
        reason="OomKillsRepeated",
        default=CountedRule(count=20, window_hours=1, action=Action.ALERT),
        source=(
            "NPD kernel-monitor, OOMKilling: a pod's own limit, not the node's fault; twenty in an "
            "hour on one node is a workload a person should look at. Nothing is done to the node."
        ),
    ),
    SignalDefinition(
        key="task-hung",
        title="hung kernel task",
        reason="TasksHungRepeated",
        default=CountedRule(count=3, window_hours=1, action=Action.ALERT),
        source=(
            "NPD kernel-monitor, TaskHung: a task blocked for 120 s; the permanent KernelDeadlock "
            "condition is the node-level verdict, and repeated hangs before it are a person's call."
        ),
    ),
    SignalDefinition(
        key="service-restart",
        title="kubelet, containerd or docker restart",
        reason="ServiceRestartsRepeated",
        default=CountedRule(count=3, window_hours=1, action=Action.ALERT),
        source=(
            "NPD systemd-monitor, KubeletStart, ContainerdStart, DockerStart: a service that "
            "restarts three times in an hour is crash-looping; a person finds out why."
        ),
    ),
)


def definition_by_reason(reason: str) -> SignalDefinition | None:
    """The counted signal whose execution condition carries ``reason``."""
    for definition in DEFINITIONS.values():
        if definition.reason == reason:
            return definition
    return None


def unaggregated(message: str) -> tuple[str, bool]:
    """The message without client-go's aggregation prefix, and whether it had one."""
    if message.startswith(AGGREGATED_MESSAGE_PREFIX):
        return message[len(AGGREGATED_MESSAGE_PREFIX) :], True
    return message, False
