"""Fault injection's payload, pure: what detectors get; kube.fault_injection sends, commands.inject asks.

What ``nodeheal inject`` writes at each detector: the kernel log line, the pod that writes it, and
the DCGM field that carries the fault. :mod:`nodeheal.kube.fault_injection` sends the requests that
carry it, and :mod:`nodeheal.commands.inject` is the command that asks for them.

Three ways in, from the outside of the node to its inside:

* ``condition``: patch the Node condition as node-problem-detector would. Nothing on the node knows,
  and NPD's condition manager re-sends its own view of the conditions it owns on every heartbeat
  (``--k8s-exporter-heartbeat-period``; :data:`NPD_HEARTBEAT_PERIOD` in the shipped values) and 10 s
  after a failed update (``resyncPeriod`` in NPD's ``pkg/exporters/k8sexporter/condition/manager.go``),
  so the fake fault is reverted within one heartbeat, possibly mid-remediation.
* ``kmsg``: a short-lived privileged pod on the node writes the driver's ``NVRM: Xid`` line into
  ``/dev/kmsg``; NPD's kmsg log monitor reads it like the driver's own and raises the condition.
* ``dcgm``: ``dcgmi test --inject`` in the node's dcgm-exporter pod sets a DCGM field on its host
  engine, as seed 000 does by hand (``kubectl exec ... dcgmi test --inject --gpuid 0 -f 319 -v 4``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The shipped NPD values' ``settings.heartBeatPeriod`` (deploy/node-problem-detector/values.yaml;
#: a test holds them equal). NPD's own default (``--k8s-exporter-heartbeat-period``) is the same.
NPD_HEARTBEAT_PERIOD = "5m0s"
#: NPD's condition manager retries a failed update after this many seconds (``resyncPeriod``).
NPD_RESYNC_SECONDS = 10

CONDITION_REVERT_WARNING = (
    "warning: --via condition patches the Node status directly; nothing on the node knows. On a node "
    "running node-problem-detector, its condition manager re-sends its own view of every condition "
    f"it owns on each heartbeat ({NPD_HEARTBEAT_PERIOD} in deploy/node-problem-detector/values.yaml, "
    f"and {NPD_RESYNC_SECONDS} s after a failed update), so the fake fault reverts to NPD's value "
    "within one heartbeat, possibly mid-remediation (NodeHeal then sees the condition clear; "
    "drain.onConditionCleared decides what follows). Use --via kmsg to have NPD raise it itself."
)

#: The PCI address the injected lines name (the driver's ``PCI:<domain>:<bus>:<device>``).
DEFAULT_PCI = "0000:3b:00"

#: Labels of the injector pod, so a person (or a cleanup) finds every one: ``kubectl get pods -A
#: -l app.kubernetes.io/name=nodeheal-inject``.
INJECTOR_LABELS: Mapping[str, str] = {
    "app.kubernetes.io/name": "nodeheal-inject",
    "app.kubernetes.io/component": "kmsg-writer",
    "app.kubernetes.io/managed-by": "nodeheal",
}
#: Any image with a POSIX shell and printf; the pod only writes one line.
DEFAULT_KMSG_IMAGE = "public.ecr.aws/docker/library/busybox:1.36"
KMSG_CONTAINER = "write-kmsg"
#: ``printf`` the line given as ``$1``, so no character of it is ever read by the shell. One
#: ``write(2)`` is one kernel log record; the kernel adds the timestamp NPD reads.
KMSG_SCRIPT = 'printf "%s\\n" "$1" > /dev/kmsg'
#: The pod must not outlive a stuck write (a container runtime that never starts it is bounded by
#: the command's own wait; this bounds a container that started and hangs).
KMSG_ACTIVE_DEADLINE_SECONDS = 120


def kmsg_pod(*, node: str, namespace: str, line: str, image: str = DEFAULT_KMSG_IMAGE) -> dict[str, Any]:
    """The pod that writes ``line`` into ``node``'s kernel log.

    Bound to the node by ``spec.nodeName`` (no scheduler, so a cordoned node still runs it), it
    tolerates every taint (NodeHeal's ``nodeheal.io/unhealthy``, the GPU pool's ``nvidia.com/gpu``,
    the kubelet's ``unschedulable`` and NoExecute taints of a failing node), and mounts the host's
    ``/dev/kmsg`` character device. ``privileged`` because the default container profile does not
    let a container open the host's devices; the kernel itself checks no capability on a write
    (``devkmsg_write`` in kernel/printk/printk.c) but drops writes from user space silently when
    ``kernel.printk_devkmsg=off`` (the default, ``ratelimit``, lets one line through), so a pod
    that succeeded on such a host wrote nothing. The namespace must admit privileged pods (Pod
    Security ``privileged``). NPD's kmsg watcher keeps every record after its start time, whatever
    its facility (``pkg/systemlogmonitor/logwatchers/kmsg/log_watcher_linux.go``): a line written
    from user space (facility ``user``) is read like the driver's.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "nodeheal-inject-kmsg-",
            "namespace": namespace,
            "labels": dict(INJECTOR_LABELS),
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "activeDeadlineSeconds": KMSG_ACTIVE_DEADLINE_SECONDS,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": KMSG_CONTAINER,
                    "image": image,
                    "command": ["/bin/sh", "-c", KMSG_SCRIPT, "nodeheal-inject", line],
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "kmsg", "mountPath": "/dev/kmsg"}],
                }
            ],
            "volumes": [{"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}}],
        },
    }


def written_line(pod: Mapping[str, Any]) -> str:
    """The line a :func:`kmsg_pod` writes (its shell's ``$1``)."""
    command = pod["spec"]["containers"][0]["command"]
    return str(command[4])


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One DCGM field ``dcgmi test --inject`` sets, named as ``dcgm_fields.h`` names it."""

    field_id: int
    name: str


#: NVIDIA/DCGM ``dcgmlib/dcgm_fields.h``: ``#define DCGM_FI_DEV_XID_ERROR 230`` ("XID errors. The
#: value is the specific XID error"; ``DCGM_FI_DEV_XID_ERRORS`` is its older alias). DCGM's policy
#: manager checks it for the XID policy (``modules/policy/DcgmPolicyManager.cpp``, ``CheckXIDErrors``).
DCGM_XID_ERROR = DcgmField(230, "DCGM_FI_DEV_XID_ERROR")
#: ``#define DCGM_FI_DEV_ECC_DBE_VOL_DEV 319`` ("Device memory double bit volatile ECC errors"), the
#: field seed 000 injects and the one the policy manager checks for its double-bit ECC policy
#: (``CheckEccErrors``); the health watch reads the total, ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` (311).
#: Seed 000's other fields are not faults: 150 is ``DCGM_FI_DEV_GPU_TEMP_CELSIUS`` and 111
#: ``DCGM_FI_DEV_APP_MEM_CLOCK``.
DCGM_ECC_DBE_VOL_DEV = DcgmField(319, "DCGM_FI_DEV_ECC_DBE_VOL_DEV")


def dcgm_injection(xid: int | None, ecc_dbe: int | None) -> tuple[DcgmField, int]:
    """The field and value for a fault: an Xid goes to the Xid field with the Xid as its value; a
    double-bit ECC count to the device memory's volatile DBE count."""
    if (xid is None) == (ecc_dbe is None):
        raise ValueError("exactly one of xid and ecc_dbe")
    if xid is not None:
        return DCGM_XID_ERROR, xid
    assert ecc_dbe is not None
    return DCGM_ECC_DBE_VOL_DEV, ecc_dbe


def dcgmi_command(gpu: int, field: DcgmField, value: int, host: str = "") -> list[str]:
    """``dcgmi test --inject`` as seed 000 runs it, as an argv (no shell in between). The GPU is
    always named: dcgmi's ``--gpuid`` defaults to 1, not 0. ``host`` is dcgmi's ``--host`` (its
    default, ``localhost``, port 5555: the host engine listening in the pod's network namespace;
    ``dcgmi/CommandLineParser.cpp`` in NVIDIA/DCGM)."""
    argv = ["dcgmi", "test", "--inject", "--gpuid", str(gpu), "-f", str(field.field_id), "-v", str(value)]
    return [*argv, "--host", host] if host else argv
