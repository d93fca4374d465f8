"""What the simulated cluster's controllers and builders agree on about workloads."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
#: The multi-node training job the simulation runs (and the demo watches come back).
TRAINING_JOB = "llm-pretrain"


#: The healthy state each detector-owned condition returns to when its detector restarts clean.
HEALTHY_CONDITIONS: dict[str, tuple[str, str]] = {
    "GPUProblem": ("GPUHealthy", "all GPUs are healthy"),
    "GPUUnavailable": ("GPUsAvailable", "all GPUs are available"),
    "AcceleratedHardwareReady": ("NvidiaAcceleratedHardwareIsReady", "accelerated hardware is ready"),
    "KernelDeadlock": ("KernelHasNoDeadlock", "kernel has no deadlock"),
    "ReadonlyFilesystem": ("FilesystemIsNotReadOnly", "Filesystem is not read-only"),
}


def gpus_requested(pod: JSON) -> int:
    total = 0
    for container in pod.get("spec", {}).get("containers", []):
        total += int(container.get("resources", {}).get("requests", {}).get(GPU, 0))
    return total


def is_ready(node: JSON) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def is_running(pod: JSON) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
