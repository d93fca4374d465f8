"""Pods the fake's kubelet runs to completion, and the pod spec checks a create meets first.

The kubelet of the node a pod is bound to starts it and reports it through the pod's status
(status_manager.go, https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/kubelet/status/status_manager.go):
``Running`` with the container started, then, for ``restartPolicy: Never``, the container
terminated with its exit code and the pod ``Succeeded`` (0) or ``Failed``
(``getPhase`` in https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/kubelet/kubelet_pods.go).
A create is validated by ``ValidatePodCreate`` before anything is stored
(https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/validation.go).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node

NS = "kube-system"


@pytest.fixture
def ran() -> list[str]:
    return []


@pytest.fixture
def server(ran: list[str]) -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(make_node("gpu-a", instance_id="i-0a"))

    def run(pod: dict[str, Any]) -> tuple[int, str]:
        ran.append(pod["metadata"]["name"])
        return (0, "") if pod["metadata"]["name"].startswith("ok") else (3, "boom")

    store.run_pods(run)
    with FakeKubeApiServer(store) as srv:
        yield srv
    store.close()


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": "gpu-a",
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}],
            **spec,
        },
    }


def phases(core: client.CoreV1Api, name: str) -> list[str]:
    """The phases a watch sees for ``name`` until it is finished."""
    seen: list[str] = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod, NS, field_selector=f"metadata.name={name}", timeout_seconds=10
    ):
        phase = event["object"].status.phase
        if not seen or seen[-1] != phase:
            seen.append(phase)
        if phase in ("Succeeded", "Failed"):
            stream.stop()
    return seen


def test_a_bound_pod_runs_to_succeeded(core: client.CoreV1Api, ran: list[str]) -> None:
    core.create_namespaced_pod(NS, pod("ok-1"))
    seen = phases(core, "ok-1")
    assert seen[-1] == "Succeeded" and set(seen) <= {"Pending", "Running", "Succeeded"}
    assert ran == ["ok-1"]
    done = core.read_namespaced_pod("ok-1", NS).status
    terminated = done.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    core.delete_namespaced_pod("ok-1", NS)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("ok-1", NS)
    assert gone.value.status == 404, "a finished pod has no containers to stop: deleted at once"


def test_a_nonzero_exit_is_failed_with_the_message(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod("bad-1"))
    assert phases(core, "bad-1")[-1] == "Failed"
    terminated = core.read_namespaced_pod("bad-1", NS).status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason, terminated.message) == (3, "Error", "boom")


def test_a_dead_kubelet_never_starts_it(
    server: FakeKubeApiServer, core: client.CoreV1Api, ran: list[str]
) -> None:
    server.store.set_kubelet_alive("gpu-a", False)
    created = core.create_namespaced_pod(NS, pod("ok-2"))
    assert created.status.phase == "Pending"
    assert core.read_namespaced_pod("ok-2", NS).status.phase == "Pending"
    assert ran == []


@pytest.mark.parametrize(
    ("spec", "causes"),
    [
        ({"containers": []}, [("FieldValueRequired", "spec.containers", "Required value")]),
        (
            {"containers": [{"name": "c"}], "restartPolicy": "Sometimes"},
            [
                ("FieldValueRequired", "spec.containers[0].image", "Required value"),
                (
                    "FieldValueNotSupported",
                    "spec.restartPolicy",
                    'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
                ),
            ],
        ),
        (
            {"volumes": [{"name": "kmsg", "hostPath": {"path": ""}}]},
            [("FieldValueRequired", "spec.volumes[0].hostPath.path", "Required value")],
        ),
    ],
)
def test_an_invalid_pod_spec_is_422(
    core: client.CoreV1Api, ran: list[str], spec: dict[str, Any], causes: list[tuple[str, str, str]]
) -> None:
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(NS, pod("ok-3", **spec))
    assert refused.value.status == 422
    body = json.loads(refused.value.body)
    assert body["reason"] == "Invalid"
    assert [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]] == causes
    assert ran == []
