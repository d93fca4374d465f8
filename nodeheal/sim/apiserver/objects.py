"""Builders of complete, real-shaped Kubernetes objects for the simulated GPU cluster.

The `kubernetes` client validates responses into pydantic models, so every required field of
the real schema is present (a Node without a full `status.nodeInfo` fails to deserialize).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]

DEFAULT_CLUSTER = "training-on-eks"

_GPU_INSTANCES: dict[str, tuple[int, int, int, int]] = {
    # instance type: (vCPUs, memory GiB, EFA interfaces, max pods)
    "p5.48xlarge": (192, 2048, 32, 100),
    "p5e.48xlarge": (192, 2048, 32, 100),
    "p4d.24xlarge": (96, 1152, 4, 737),
    "g6e.48xlarge": (192, 1536, 4, 737),
    "g6e.12xlarge": (48, 384, 1, 234),
    "g5.48xlarge": (192, 768, 1, 345),
}


def rfc3339(moment: datetime | None = None) -> str:
    """Second-precision UTC timestamp, the format of metav1.Time."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid() -> str:
    return str(uuid.uuid4())


def _private_ip(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"10.0.{digest[0]}.{max(digest[1], 1)}"


def _condition(ctype: str, status: str, reason: str, message: str, now: str) -> JSON:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def make_node(
    name: str,
    *,
    instance_id: str,
    zone: str = "us-west-2b",
    instance_type: str = "p5.48xlarge",
    node_pool: str = "gpu",
    capacity_type: str = "on-demand",
    gpus: int = 8,
    ready: bool = True,
    extra_labels: dict[str, str] | None = None,
    extra_conditions: list[JSON] | None = None,
    cluster: str = DEFAULT_CLUSTER,
    unschedulable: bool = False,
    taints: list[JSON] | None = None,
    finalizers: list[str] | None = None,
) -> JSON:
    """A Node as an EKS + Karpenter GPU node reports it, with NPD-style GPU conditions.

    Karpenter puts `karpenter.sh/termination` on its nodes; pass it in `finalizers` when the
    simulation plays Karpenter, since a node with a finalizer outlives its DELETE."""
    now = rfc3339()
    region = zone[:-1]
    vcpus, mem_gib, efa, max_pods = _GPU_INSTANCES.get(instance_type, (96, 768, 0, 110))
    ip = _private_ip(name)
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "k8s.io/cloud-provider-aws": hashlib.md5(cluster.encode(), usedforsecurity=False).hexdigest(),
        "karpenter.k8s.aws/instance-category": instance_type[0],
        "karpenter.k8s.aws/instance-family": instance_type.split(".")[0],
        "karpenter.k8s.aws/instance-gpu-count": str(gpus),
        "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
        "karpenter.sh/capacity-type": capacity_type,
        "karpenter.sh/initialized": "true",
        "karpenter.sh/nodepool": node_pool,
        "karpenter.sh/registered": "true",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "nvidia.com/gpu.present": "true" if gpus else "false",
        "topology.k8s.aws/zone-id": f"usw2-az{ord(zone[-1]) - ord('a') + 1}",
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
    }
    labels.update(extra_labels or {})
    resources = {
        "cpu": str(vcpus),
        "ephemeral-storage": "104845292Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{mem_gib * 1024 * 1024}Ki",
        "nvidia.com/gpu": str(gpus),
        "pods": str(max_pods),
        "vpc.amazonaws.com/efa": str(efa),
    }
    allocatable = dict(resources)
    allocatable["cpu"] = f"{vcpus * 1000 - 190}m"
    allocatable["memory"] = f"{mem_gib * 1024 * 1024 - 5_000_000}Ki"
    allocatable["ephemeral-storage"] = "95551679124"
    ready_cond = (
        _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", now)
        if ready
        else _condition("Ready", "False", "KubeletNotReady", "container runtime network not ready", now)
    )
    conditions = [
        _condition("KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock", now),
        _condition(
            "ReadonlyFilesystem", "False", "FilesystemIsNotReadOnly", "Filesystem is not read-only", now
        ),
        _condition("GPUProblem", "False", "GPUHealthy", "all GPUs are healthy", now),
        _condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            now,
        ),
        _condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now),
        _condition(
            "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available", now
        ),
        ready_cond,
    ]
    for extra in extra_conditions or []:
        cond = {
            **_condition(
                extra["type"],
                extra.get("status", "False"),
                extra.get("reason", ""),
                extra.get("message", ""),
                now,
            ),
            **extra,
        }
        conditions = [c for c in conditions if c["type"] != cond["type"]]
        conditions.insert(len(conditions) - 1, cond)
    spec: JSON = {"providerID": f"aws:///{zone}/{instance_id}"}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": new_uid(),
            "creationTimestamp": now,
            "labels": labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": ip,
                "karpenter.k8s.aws/ec2nodeclass-hash": "9284529346582713434",
                "karpenter.sh/nodepool-hash": "6821555240594823858",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            **({"finalizers": list(finalizers)} if finalizers else {}),
        },
        "spec": spec,
        "status": {
            "capacity": resources,
            "allocatable": allocatable,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": new_uid(),
                "containerRuntimeVersion": "containerd://1.7.27",
                "kernelVersion": "6.1.141-155.222.amzn2023.x86_64",
                "kubeProxyVersion": "v1.33.0-eks-802817d",
                "kubeletVersion": "v1.33.0-eks-802817d",
                "machineID": hashlib.md5(instance_id.encode(), usedforsecurity=False).hexdigest(),
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023.7.20250609",
                "systemUUID": "ec2" + hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()[3:],
            },
            "images": [
                {
                    "names": [
                        "nvcr.io/nvidia/k8s-device-plugin@sha256:"
                        "7089559ce6153018806857f5049085bae15b3bf6f1c8bd19d8b12f707d087dea",
                        "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
                    ],
                    "sizeBytes": 187_343_912,
                },
                {
                    "names": [
                        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause@sha256:"
                        "529cf6b1b6e5b76e901abc43aee825badbd93f9c5ee5f1e316d46a83abbce5a2",
                        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause:3.10",
                    ],
                    "sizeBytes": 319_670,
                },
            ],
        },
    }


def _container_state(running: bool, phase: str, now: str) -> JSON:
    if running:
        return {"running": {"startedAt": now}}
    if phase == "Pending":
        return {"waiting": {"reason": "ContainerCreating"}}
    succeeded = phase == "Succeeded"
    return {
        "terminated": {
            "exitCode": 0 if succeeded else 1,
            "reason": "Completed" if succeeded else "Error",
            "startedAt": now,
            "finishedAt": now,
        }
    }


_CONTROLLER_API = {
    "DaemonSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "Deployment": "apps/v1",
    "Job": "batch/v1",
    "ReplicationController": "v1",
}


def make_pod(
    name: str,
    namespace: str,
    node_name: str | None,
    *,
    labels: dict[str, str] | None = None,
    owner_kind: str | None = None,
    owner_name: str | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    ready: bool = True,
    grace_seconds: int = 30,
    gpus: int = 0,
    mirror: bool = False,
) -> JSON:
    """A running Pod as the kubelet reports it; `mirror` makes it a static pod's mirror."""
    now = rfc3339()
    uid = new_uid()
    meta: JSON = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "creationTimestamp": now,
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
    }
    if mirror:
        # The kubelet marks mirror pods with this annotation and makes the Node their owner.
        meta["annotations"]["kubernetes.io/config.mirror"] = hashlib.md5(
            name.encode(), usedforsecurity=False
        ).hexdigest()
        meta["annotations"]["kubernetes.io/config.source"] = "file"
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node_name or "",
                "uid": new_uid(),
                "controller": True,
            }
        ]
    elif owner_kind:
        meta["ownerReferences"] = [
            {
                "apiVersion": _CONTROLLER_API.get(owner_kind, "apps/v1"),
                "kind": owner_kind,
                "name": owner_name or name.rsplit("-", 1)[0],
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{owner_kind}/{owner_name or name}")),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    resources: JSON = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources = {
            "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)},
            "limits": {"nvidia.com/gpu": str(gpus)},
        }
    spec: JSON = {
        "containers": [
            {
                "name": "main",
                "image": "public.ecr.aws/docker/library/busybox:1.37",
                "imagePullPolicy": "IfNotPresent",
                "resources": resources,
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Never" if owner_kind == "Job" else "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": grace_seconds,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    running = phase == "Running"
    ready_status = "True" if running and ready else "False"
    status: JSON = {"phase": phase, "qosClass": "Burstable"}
    if node_name:
        ip = _private_ip(f"{namespace}/{name}")
        status.update(
            {
                "hostIP": _private_ip(node_name),
                "hostIPs": [{"ip": _private_ip(node_name)}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": now,
                "conditions": [
                    {
                        "type": "PodReadyToStartContainers",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    },
                    {
                        "type": "Initialized",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    },
                    {
                        "type": "Ready",
                        "status": ready_status,
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    },
                    {
                        "type": "ContainersReady",
                        "status": ready_status,
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    },
                    {
                        "type": "PodScheduled",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    },
                ],
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": "public.ecr.aws/docker/library/busybox:1.37",
                        "imageID": "public.ecr.aws/docker/library/busybox@sha256:"
                        "f85340bf132ae937d2c2a763b8335c9bab35d6e8293f70f606b9c6178d84f42b",
                        "containerID": "containerd://" + hashlib.sha256(uid.encode()).hexdigest(),
                        "ready": running and ready,
                        "restartCount": 0,
                        "started": running,
                        "state": _container_state(running, phase, now),
                        "lastState": {},
                    }
                ],
            }
        )
    else:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
        ]
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": status}


def make_pdb(
    name: str,
    namespace: str,
    selector: JSON,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    *,
    unhealthy_pod_eviction_policy: str | None = None,
) -> JSON:
    """A policy/v1 PodDisruptionBudget; `selector` is a metav1.LabelSelector or plain matchLabels
    (an empty dict is the empty selector, which in policy/v1 covers every pod of the namespace)."""
    if (min_available is None) == (max_unavailable is None):
        raise ValueError("exactly one of min_available and max_unavailable must be set")
    if selector and "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": dict(selector)}
    spec: JSON = {"selector": selector}
    if min_available is not None:
        spec["minAvailable"] = min_available
    else:
        spec["maxUnavailable"] = max_unavailable
    if unhealthy_pod_eviction_policy is not None:
        spec["unhealthyPodEvictionPolicy"] = unhealthy_pod_eviction_policy
    return {
        "kind": "PodDisruptionBudget",
        "apiVersion": "policy/v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def make_lease(name: str, namespace: str, *, holder: str | None = None, duration_seconds: int = 15) -> JSON:
    spec: JSON = {"leaseDurationSeconds": duration_seconds}
    if holder is not None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec.update({"holderIdentity": holder, "acquireTime": now, "renewTime": now, "leaseTransitions": 0})
    return {
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def make_event(
    name: str,
    namespace: str,
    *,
    involved: JSON,
    reason: str,
    message: str,
    event_type: str = "Warning",
    component: str = "node-problem-detector",
    count: int = 1,
) -> JSON:
    """A core/v1 Event about `involved` (a full object or an ObjectReference-shaped dict)."""
    now = rfc3339()
    meta = involved.get("metadata", involved)
    ref: JSON = {
        "kind": involved.get("kind", "Node"),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "apiVersion": involved.get("apiVersion", "v1"),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": event_type,
        "count": count,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": component, "host": str(meta.get("name", ""))},
        "reportingComponent": component,
        "reportingInstance": str(meta.get("name", "")),
    }


#: The finalizer Karpenter puts on every NodeClaim (and its Node): its termination controller
#: drains the node, terminates the instance, then removes it
#: (https://github.com/kubernetes-sigs/karpenter/blob/v1.5.0/pkg/apis/v1/labels.go TerminationFinalizer).
KARPENTER_TERMINATION_FINALIZER = "karpenter.sh/termination"


def make_nodeclaim(
    name: str,
    *,
    provider_id: str,
    node_name: str = "",
    node_pool: str = "gpu",
    instance_type: str = "p5.48xlarge",
    finalizers: list[str] | None = None,
) -> JSON:
    """A ``karpenter.sh/v1`` NodeClaim as Karpenter leaves it once its instance registered.

    ``finalizers`` defaults to Karpenter's termination finalizer, so a DELETE only marks the
    object (deletionTimestamp) until something playing Karpenter removes the finalizer."""
    now = rfc3339()
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {
                "karpenter.sh/nodepool": node_pool,
                "node.kubernetes.io/instance-type": instance_type,
            },
            "finalizers": [KARPENTER_TERMINATION_FINALIZER] if finalizers is None else list(finalizers),
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]}
            ],
        },
        "status": {
            "nodeName": node_name,
            "providerID": provider_id,
            "conditions": [
                {"type": t, "status": "True", "reason": t, "lastTransitionTime": now, "message": ""}
                for t in ("Launched", "Registered", "Initialized", "Ready")
            ],
        },
    }
