"""How the detectors NodeHeal listens to write a Node condition, as their source does. Pure.

Each writer takes the condition as the Node carries it (None when absent), what the detector
reports, and the time, and returns the condition the detector writes. Nothing else is read or
changed: the fake API server (``ClusterStore.report_node_condition``) and the seeded simulation
(``World.report_condition``) both write through :func:`report`, which picks the writer by the
detector that owns the condition type (:data:`CONDITIONS`).

The sources, read for this module (the functions are named in each writer's docstring):

* node-problem-detector (NPD) at ``v1.35.1``, the image ``deploy/node-problem-detector/values.yaml``
  pins; ``generateStatus`` of both monitors is unchanged at the newest commit read,
  ``6632ca67148f7a23df9cdbd98d9e89b388561a3a`` (v1.37.0-alpha.1-38).
* the EKS node monitoring agent (NMA) at ``51af5494fde6d2ed4629df2ed9f847ae800957fd`` (v1.7.0-7;
  ``pkg/manager/node_exporter.go`` is the same as at the v1.7.0 tag).

What the detectors do differently, and why it matters to NodeHeal (docs/architecture.md, D19): while a
condition stays bad, NPD's log monitor moves ``lastTransitionTime`` and replaces the message
whenever the reason changes, and keeps the old message when the same reason repeats; the agent
keeps ``lastTransitionTime``, overwrites the reason with the newest and joins the messages with
"; ". Neither writes the way a plain setter does (:func:`set_plainly`), which only the kubelet's
own conditions follow.

Not modelled: each detector keeps its conditions in memory and writes that memory back (NPD on a
change and every heartbeat, the agent every 15 s); here the Node's condition stands for that
memory, so a write by someone else is seen as the detector's state. NPD stamps a transition with
the first matched log line's timestamp; here it is ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

JSON = dict[str, Any]
#: One write of one condition: the condition as the Node carries it (None: absent) -> as written.
Writer = Callable[[JSON | None], JSON]

NPD_REPO = "https://github.com/kubernetes/node-problem-detector/blob/v1.35.1"
NMA_REPO = "https://github.com/aws/eks-node-monitoring-agent/blob/51af5494fde6d2ed4629df2ed9f847ae800957fd"
KUBELET_REPO = "https://github.com/kubernetes/kubernetes/blob/00267ac822c2df40bab2e223873f2b76864c5f3d"
#: ``max_output_length`` of deploy/node-problem-detector/gpu-plugin-monitor.json (NPD's default too).
PLUGIN_MAX_OUTPUT_LENGTH = 80


class Detector(StrEnum):
    NPD_LOG_MONITOR = "node-problem-detector log monitor"
    NPD_CUSTOM_PLUGIN = "node-problem-detector custom plugin monitor"
    NODE_MONITORING_AGENT = "EKS node monitoring agent"
    KUBELET = "kubelet"


@dataclass(frozen=True, slots=True)
class Owner:
    """The detector that writes a condition type, and what it writes when it starts (healthy)."""

    detector: Detector
    status: str
    reason: str
    message: str
    #: Where the start-up values come from.
    config: str


#: Who writes each condition type NodeHeal watches, with the values it starts with. Any other
#: type is the kubelet's (or a test's), written with :func:`set_plainly`.
CONDITIONS: Mapping[str, Owner] = MappingProxyType(
    {
        # The Xid rules of NodeHeal's own log monitor config (the plugin's check is GPUUnavailable).
        "GPUProblem": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "GPUHealthy",
            "no NVIDIA GPU fault seen in the kernel log",
            "deploy/node-problem-detector/gpu-monitor.json",
        ),
        "KernelDeadlock": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "KernelHasNoDeadlock",
            "kernel has no deadlock",
            "NPD config/kernel-monitor.json",
        ),
        "ReadonlyFilesystem": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "FilesystemIsNotReadOnly",
            "Filesystem is not read-only",
            "NPD config/readonly-monitor.json",
        ),
        "GPUUnavailable": Owner(
            Detector.NPD_CUSTOM_PLUGIN,
            "False",
            "GPUsAvailable",
            "nvidia-smi answers and lists every advertised GPU",
            "deploy/node-problem-detector/gpu-plugin-monitor.json",
        ),
        "GPUDriverZombie": Owner(
            Detector.NPD_CUSTOM_PLUGIN,
            "False",
            "NoGPUDriverZombies",
            "no process stuck in D state or defunct holds /dev/nvidia*",
            "deploy/node-problem-detector/gpu-zombie-monitor.json",
        ),
        "GPUThermalThrottling": Owner(
            Detector.NPD_CUSTOM_PLUGIN,
            "False",
            "GPUsNotThrottled",
            "no GPU is throttled for heat or power or above its temperature bound",
            "deploy/node-problem-detector/gpu-thermal-monitor.json",
        ),
        "GatewayUnreachable": Owner(
            Detector.NPD_CUSTOM_PLUGIN,
            "False",
            "GatewayReachable",
            "the default gateway answers ping",
            "deploy/node-problem-detector/gateway-monitor.json",
        ),
        "DNSUnavailable": Owner(
            Detector.NPD_CUSTOM_PLUGIN,
            "False",
            "DNSResolves",
            "the node resolves the configured name",
            "deploy/node-problem-detector/dns-monitor.json",
        ),
        "ContainerRuntimeUnresponsive": Owner(
            Detector.NPD_CUSTOM_PLUGIN,
            "False",
            "ContainerRuntimeResponsive",
            "the container runtime answers on its socket within the bound",
            "deploy/node-problem-detector/runtime-monitor.json",
        ),
        "XfsShutdown": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "XfsHasNotShutDown",
            "XFS has not shutdown",
            "NPD config/kernel-monitor.json",
        ),
        "CperHardwareErrorFatal": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "CperHardwareHasNoFatalError",
            "UEFI CPER has no fatal error",
            "NPD config/kernel-monitor.json",
        ),
        "CPUStuck": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "CPUsResponsive",
            "no CPU lockup or RCU stall seen in the kernel log",
            "deploy/node-problem-detector/node-monitor.json",
        ),
        "MemoryUncorrectable": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "NoUncorrectableMemoryError",
            "no uncorrectable memory error seen in the kernel log",
            "deploy/node-problem-detector/node-monitor.json",
        ),
        "DiskUnresponsive": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "DisksResponsive",
            "no NVMe controller reset or failure seen in the kernel log",
            "deploy/node-problem-detector/node-monitor.json",
        ),
        "FilesystemCorrupted": Owner(
            Detector.NPD_LOG_MONITOR,
            "False",
            "NoFilesystemCorruption",
            "no filesystem corruption seen in the kernel log",
            "deploy/node-problem-detector/node-monitor.json",
        ),
        # The agent's managed conditions (cmd/eks-node-monitoring-agent/main.go, conditionConfigs).
        "AcceleratedHardwareReady": Owner(
            Detector.NODE_MONITORING_AGENT,
            "True",
            "NvidiaGPUIsReady",
            "Monitoring for the Nvidia GPU system is active",
            "NMA cmd/eks-node-monitoring-agent/main.go",
        ),
        "KernelReady": Owner(
            Detector.NODE_MONITORING_AGENT,
            "True",
            "KernelIsReady",
            "Monitoring for the Kernel system is active",
            "NMA cmd/eks-node-monitoring-agent/main.go",
        ),
        "StorageReady": Owner(
            Detector.NODE_MONITORING_AGENT,
            "True",
            "DiskIsReady",
            "Monitoring for the Disk system is active",
            "NMA cmd/eks-node-monitoring-agent/main.go",
        ),
        "ContainerRuntimeReady": Owner(
            Detector.NODE_MONITORING_AGENT,
            "True",
            "ContainerRuntimeIsReady",
            "Monitoring for the ContainerRuntime system is active",
            "NMA cmd/eks-node-monitoring-agent/main.go",
        ),
        "NetworkingReady": Owner(
            Detector.NODE_MONITORING_AGENT,
            "True",
            "NetworkingIsReady",
            "Monitoring for the Networking system is active",
            "NMA cmd/eks-node-monitoring-agent/main.go",
        ),
        "Ready": Owner(
            Detector.KUBELET, "True", "KubeletReady", "kubelet is posting ready status", "the kubelet"
        ),
    }
)


def detector_of(condition_type: str) -> Detector:
    owner = CONDITIONS.get(condition_type)
    return owner.detector if owner is not None else Detector.KUBELET


def _condition(
    condition_type: str, status: str, reason: str, message: str, heartbeat: str, transition: str
) -> JSON:
    return {
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": heartbeat,
        "lastTransitionTime": transition,
    }


def npd_permanent(current: JSON | None, condition_type: str, reason: str, message: str, now: str) -> JSON:
    """A log line matched a ``permanent`` rule of an NPD log monitor.

    ``pkg/systemlogmonitor/log_monitor.go``, ``logMonitor.generateStatus``::

        if condition.Status == types.False || condition.Reason != rule.Reason {
            condition.Transition = timestamp
            condition.Message = message
            ...
        }
        condition.Status = types.True
        condition.Reason = rule.Reason

    The status becomes True. When it was False or the reason differs, the transition time moves and
    the message is the new one; when the same reason repeats, the old message and transition time
    stay. A ``temporary`` rule only records an Event: the condition is not written at all (there is
    no writer for it). ``problemclient.SetConditions`` stamps the heartbeat on every write.
    """
    if current is None or current.get("status") == "False" or current.get("reason") != reason:
        return _condition(condition_type, "True", reason, message, now, now)
    return _condition(
        condition_type,
        "True",
        reason,
        str(current.get("message", "")),
        now,
        str(current.get("lastTransitionTime") or now),
    )


def npd_start(current: JSON | None, condition_type: str, reason: str, message: str, now: str) -> JSON:
    """NPD starts (the pod restarts, or the node boots): each monitor writes its default conditions.

    ``log_monitor.go`` and ``pkg/custompluginmonitor/custom_plugin_monitor.go``,
    ``initialConditions``::

        conditions[i].Status = types.False
        conditions[i].Transition = time.Now()

    with the reason and message of the config's ``conditions`` entry. The log monitor has no other
    way back to False: a bad condition stays until NPD restarts. The transition time moves even
    when the condition was already False.
    """
    return _condition(condition_type, "False", reason, message, now, now)


def _plugin_output(message: str, max_output_length: int) -> str:
    """``pkg/custompluginmonitor/plugin/plugin.go``, ``Plugin.run``: the output is trimmed, then
    cut at ``max_output_length`` bytes."""
    output = message.strip().encode("utf-8")
    if len(output) > max_output_length:
        output = output[:max_output_length]
    return output.decode("utf-8", errors="ignore")


def npd_custom_plugin(
    current: JSON | None,
    condition_type: str,
    status: str,
    reason: str,
    message: str,
    now: str,
    *,
    default_reason: str,
    default_message: str,
    message_change_updates: bool = False,
    max_output_length: int = PLUGIN_MAX_OUTPUT_LENGTH,
) -> JSON:
    """A run of an NPD custom plugin with a ``permanent`` rule: exit 0 is False, 1 is True, any
    other is Unknown; ``reason`` is the rule's reason and ``message`` the plugin's output.

    ``pkg/custompluginmonitor/custom_plugin_monitor.go``, ``customPluginMonitor.generateStatus``:

    1. True -> False or Unknown: the config's default reason; the default message for False, the
       output for Unknown.
    2. False or Unknown -> True: the rule's reason and the output.
    3. False <-> Unknown: as 1.
    4. True stays True with another reason (or, with ``enable_message_change_based_condition_update``,
       another message): the rule's reason and the output.
    5. Otherwise nothing is written.

    Whenever something is written the transition time moves (``condition.Transition = timestamp``),
    even when the status stays True. NodeHeal's gpu-plugin-monitor.json leaves the message-change
    update off, so a new output under the same reason does not replace the message.
    """
    output = _plugin_output(message, max_output_length)
    old_status = str(current.get("status", "False")) if current is not None else "False"
    old_reason = str(current.get("reason", default_reason)) if current is not None else default_reason
    old_message = str(current.get("message", default_message)) if current is not None else default_message
    if old_status == "True" and status != "True":  # scenario 1
        new_reason, new_message = default_reason, (default_message if status == "False" else output)
    elif old_status != "True" and status == "True":  # scenario 2
        new_reason, new_message = reason, output
    elif old_status != status:  # scenario 3
        new_reason, new_message = default_reason, (default_message if status == "False" else output)
    elif (  # scenario 4
        old_status == "True"
        and status == "True"
        and (old_reason != reason or (message_change_updates and old_message != output))
    ):
        new_reason, new_message = reason, output
    else:  # scenario 5: nothing changes
        if current is None:
            return _condition(condition_type, status, default_reason, default_message, now, now)
        return {**current, "lastHeartbeatTime": now}
    return _condition(condition_type, status, new_reason, new_message, now, now)


def nma_fatal(current: JSON | None, condition_type: str, reason: str, message: str, now: str) -> JSON:
    """A monitor of the EKS node monitoring agent reports a condition of ``Fatal`` severity.

    ``pkg/manager/node_exporter.go``, ``nodeExporter.Fatal``::

        newCondition := corev1.NodeCondition{..., Status: corev1.ConditionFalse, LastTransitionTime: now}
        if oldCondition.Status == newCondition.Status {
            newCondition.LastTransitionTime = oldCondition.LastTransitionTime
            if oldCondition.Message != "" && oldCondition.Message != newCondition.Message &&
                !strings.Contains(oldCondition.Message, newCondition.Message) {
                newCondition.Message = oldCondition.Message + "; " + newCondition.Message
            } else if strings.Contains(oldCondition.Message, newCondition.Message) {
                newCondition.Message = oldCondition.Message
            }
        }

    The status becomes False and the reason is always the newest. While it stays False the
    transition time is kept and the messages are joined with "; ", a message already contained in
    the joined one being dropped; the joined message has no bound. ``Info`` and ``Warning`` only
    record an Event. The agent holds every managed condition True from its start
    (``initializeManagedConditions``), so an absent condition counts as True here.
    """
    if current is None or current.get("status") != "False":
        return _condition(condition_type, "False", reason, message, now, now)
    old = str(current.get("message", ""))
    if old not in ("", message) and message not in old:
        joined = f"{old}; {message}"
    elif message in old:
        joined = old
    else:
        joined = message
    return _condition(
        condition_type, "False", reason, joined, now, str(current.get("lastTransitionTime") or now)
    )


def nma_start(current: JSON | None, condition_type: str, reason: str, message: str, now: str) -> JSON:
    """The agent starts (the pod restarts, or the node boots): every managed condition is True with
    its ready reason and message.

    ``pkg/manager/node_exporter.go``, ``initializeManagedConditions``: ``Status: corev1.ConditionTrue``,
    ``LastTransitionTime: now``. The agent has no other way back to True: ``Fatal`` only sets False.
    """
    return _condition(condition_type, "True", reason, message, now, now)


def set_plainly(
    current: JSON | None, condition_type: str, status: str, reason: str, message: str, now: str
) -> JSON:
    """A plain setter: the transition time moves only when the status changes; reason and message
    are replaced. This is how the kubelet writes Ready (``pkg/kubelet/nodestatus/setters.go``,
    ``ReadyCondition``: ``if node.Status.Conditions[i].Status == newNodeReadyCondition.Status``
    the old ``LastTransitionTime`` is kept, else it is ``currentTime``), and what a test uses to
    place a condition exactly. Neither NPD nor the node monitoring agent writes this way."""
    if current is None or current.get("status") != status:
        return _condition(condition_type, status, reason, message, now, now)
    return _condition(
        condition_type, status, reason, message, now, str(current.get("lastTransitionTime") or now)
    )


def healthy(condition_type: str) -> tuple[str, str, str]:
    """(status, reason, message) the owner of ``condition_type`` writes when it starts clean."""
    owner = CONDITIONS.get(condition_type)
    if owner is None:
        return ("False", f"{condition_type}Healthy", "healthy")
    return (owner.status, owner.reason, owner.message)


def report(
    current: JSON | None, condition_type: str, status: str, reason: str, message: str, now: str
) -> JSON:
    """The condition as the detector that owns ``condition_type`` writes this report.

    * NPD's log monitor: True is a permanent rule's match (:func:`npd_permanent`); False is its
      start-up (:func:`npd_start`), the only way it writes False.
    * NPD's custom plugin: :func:`npd_custom_plugin`, with ``reason``/``message`` as the config's
      default condition when the status is not True.
    * The node monitoring agent: False is ``Fatal`` (:func:`nma_fatal`); True is its start-up
      (:func:`nma_start`), the only way it writes True.
    * Anything else (Ready and the kubelet's other conditions): :func:`set_plainly`.

    A status the owner never writes (Unknown from NPD's log monitor or the agent) is refused.
    """
    detector = detector_of(condition_type)
    if detector is Detector.NPD_LOG_MONITOR:
        if status == "True":
            return npd_permanent(current, condition_type, reason, message, now)
        if status == "False":
            return npd_start(current, condition_type, reason, message, now)
    elif detector is Detector.NPD_CUSTOM_PLUGIN:
        owner = CONDITIONS[condition_type]
        default_reason, default_message = (
            (owner.reason, owner.message) if status == "True" else (reason, message)
        )
        return npd_custom_plugin(
            current,
            condition_type,
            status,
            reason,
            message,
            now,
            default_reason=default_reason,
            default_message=default_message,
        )
    elif detector is Detector.NODE_MONITORING_AGENT:
        if status == "False":
            return nma_fatal(current, condition_type, reason, message, now)
        if status == "True":
            return nma_start(current, condition_type, reason, message, now)
    else:
        return set_plainly(current, condition_type, status, reason, message, now)
    raise ValueError(f"the {detector.value} never writes {condition_type}={status}")


#: Every writer, by name, with the detector it models: the conformance table in
#: docs/fake-apiserver.md has a row for each (tests/unit/sim/test_detectors.py checks it).
WRITERS: Mapping[str, Detector] = MappingProxyType(
    {
        "npd_permanent": Detector.NPD_LOG_MONITOR,
        "npd_start": Detector.NPD_LOG_MONITOR,
        "npd_custom_plugin": Detector.NPD_CUSTOM_PLUGIN,
        "nma_fatal": Detector.NODE_MONITORING_AGENT,
        "nma_start": Detector.NODE_MONITORING_AGENT,
        "set_plainly": Detector.KUBELET,
    }
)
