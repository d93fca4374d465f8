"""Pods, graceful deletion, the eviction subresource and live PodDisruptionBudget status."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, make_pdb, make_pod, messages


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    # 1 simulated second = 10 ms, so a 30 s grace period takes 0.3 s.
    store = ClusterStore(time_scale=0.01)
    store.add(make_node("gpu-a", instance_id="i-0a"), make_node("gpu-b", instance_id="i-0b"))
    with FakeKubeApiServer(store) as srv:
        yield srv


def evict(core: client.CoreV1Api, name: str, namespace: str = "train") -> client.V1Eviction:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    return core.create_namespaced_pod_eviction(name, namespace, body)


def replicas(store: ClusterStore, count: int, node: str = "gpu-a", app: str = "trainer") -> None:
    for i in range(count):
        store.add(
            make_pod(
                f"{app}-{i}", "train", node, labels={"app": app}, owner_kind="StatefulSet", owner_name=app
            )
        )


def pdb_status(
    server: FakeKubeApiServer, name: str, namespace: str = "train"
) -> client.V1PodDisruptionBudgetStatus:
    policy = client.PolicyV1Api(server.api_client())
    return policy.read_namespaced_pod_disruption_budget(name, namespace).status


def test_pods_by_node_with_combined_field_selectors(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    store = server.store
    store.add(
        make_pod("a", "train", "gpu-a"),
        make_pod("done", "train", "gpu-a", phase="Succeeded"),
        make_pod("b", "kube-system", "gpu-a", owner_kind="DaemonSet", owner_name="nvidia-device-plugin"),
        make_pod("c", "train", "gpu-b"),
    )
    on_a = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-a")
    assert sorted(p.metadata.name for p in on_a.items) == ["a", "b", "done"]
    active = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-a,status.phase!=Succeeded")
    assert sorted(p.metadata.name for p in active.items) == ["a", "b"]
    namespaced = core.list_namespaced_pod("train", field_selector="spec.nodeName==gpu-a,status.phase=Running")
    assert [p.metadata.name for p in namespaced.items] == ["a"]
    assert on_a.items[0].metadata.owner_references or on_a.items[1].metadata.owner_references


def test_create_get_and_pod_status_reset_on_create(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("train", make_pod("new", "train", "gpu-a"))
    assert created.metadata.uid
    fetched = core.read_namespaced_pod("new", "train")
    assert fetched.spec.node_name == "gpu-a"
    assert fetched.status.phase == "Pending"
    assert fetched.status.conditions is None
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_pod("missing", "train")
    assert err.value.status == 404


def test_eviction_without_pdb_starts_graceful_deletion(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    evicted: list[str] = []
    removed = threading.Event()
    server.store.on("pod_evicted", lambda pod: evicted.append(pod["metadata"]["name"]))
    server.store.on("pod_deleted", lambda pod: removed.set())
    server.store.add(make_pod("solo", "train", "gpu-a", grace_seconds=30))
    result = evict(core, "solo")
    assert result is not None
    pod = core.read_namespaced_pod("solo", "train")
    assert pod.metadata.deletion_timestamp is not None
    assert pod.metadata.deletion_grace_period_seconds == 30
    assert evicted == ["solo"]
    assert removed.wait(5)
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_pod("solo", "train")
    assert err.value.status == 404


def test_eviction_blocked_by_pdb_returns_real_429(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    replicas(server.store, 2)
    server.store.add(make_pdb("trainer-pdb", "train", {"app": "trainer"}, min_available=2))
    with pytest.raises(client.ApiException) as err:
        evict(core, "trainer-0")
    assert err.value.status == 429
    assert json.loads(err.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": messages.EVICTION_BUDGET_VIOLATION,
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": messages.DISRUPTION_BUDGET_CAUSE,
                    "message": messages.EVICTION_BUDGET_NEEDS.format(
                        name="trainer-pdb", desired=2, current=2
                    ),
                }
            ]
        },
        "code": 429,
    }
    assert core.read_namespaced_pod("trainer-0", "train").metadata.deletion_timestamp is None


def test_eviction_of_missing_pod_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as err:
        evict(core, "ghost")
    assert err.value.status == 404
    body = json.loads(err.value.body)
    assert (body["reason"], body["message"]) == ("NotFound", 'pods "ghost" not found')


def test_eviction_budget_decrements_as_pods_terminate(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    replicas(server.store, 3)
    server.store.add(make_pdb("trainer-pdb", "train", {"app": "trainer"}, max_unavailable=1))
    status = pdb_status(server, "trainer-pdb")
    assert (status.expected_pods, status.desired_healthy, status.disruptions_allowed) == (3, 2, 1)
    evict(core, "trainer-0")
    with pytest.raises(client.ApiException) as err:
        evict(core, "trainer-1")
    assert err.value.status == 429
    # Evicting a pod that is already terminating succeeds, as on the real server.
    evict(core, "trainer-0")


def test_eviction_with_two_matching_pdbs_is_500(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    replicas(server.store, 2)
    server.store.add(
        make_pdb("one", "train", {"app": "trainer"}, max_unavailable=1),
        make_pdb(
            "two", "train", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, max_unavailable=1
        ),
    )
    with pytest.raises(client.ApiException) as err:
        evict(core, "trainer-0")
    assert err.value.status == 500
    assert json.loads(err.value.body)["message"] == messages.EVICTION_MULTIPLE_BUDGETS


def test_not_ready_pod_can_be_evicted_when_budget_is_met(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    replicas(server.store, 3)
    server.store.set_pod_ready("train", "trainer-2", ready=False)
    server.store.add(make_pdb("trainer-pdb", "train", {"app": "trainer"}, min_available=2))
    assert pdb_status(server, "trainer-pdb").disruptions_allowed == 0
    evict(core, "trainer-2")
    with pytest.raises(client.ApiException):
        evict(core, "trainer-1")


@pytest.mark.parametrize(
    ("count", "min_available", "max_unavailable", "expected"),
    [
        (10, "50%", None, (10, 5, 5)),
        (3, "50%", None, (3, 2, 1)),  # 1.5 rounds up to 2 desired healthy
        (3, None, "50%", (3, 1, 2)),  # maxUnavailable 1.5 rounds up to 2
        (4, None, "10%", (4, 3, 1)),
        (2, 5, None, (2, 5, 0)),
        (3, None, 0, (3, 3, 0)),
        (0, 1, None, (0, 1, 0)),
    ],
)
def test_pdb_math(
    server: FakeKubeApiServer,
    count: int,
    min_available: int | str | None,
    max_unavailable: int | str | None,
    expected: tuple[int, int, int],
) -> None:
    replicas(server.store, count)
    server.store.add(make_pdb("b", "train", {"app": "trainer"}, min_available, max_unavailable))
    status = pdb_status(server, "b")
    assert (status.expected_pods, status.desired_healthy, status.disruptions_allowed) == expected
    assert status.current_healthy == count
    condition = status.conditions[0]
    assert condition.type == "DisruptionAllowed"
    assert condition.reason == ("SufficientPods" if expected[2] else "InsufficientPods")


def test_pdb_percentage_uses_controller_scale(server: FakeKubeApiServer) -> None:
    replicas(server.store, 2)
    server.store.set_scale("train", "StatefulSet", "trainer", 4)
    server.store.add(make_pdb("b", "train", {"app": "trainer"}, max_unavailable="25%"))
    status = pdb_status(server, "b")
    assert (status.expected_pods, status.desired_healthy, status.disruptions_allowed) == (4, 3, 0)


def test_pdb_over_pods_without_scalable_controller_fails_safe(server: FakeKubeApiServer) -> None:
    server.store.add(make_pod("job-0", "train", "gpu-a", labels={"app": "job"}, owner_kind="Job"))
    server.store.add(make_pdb("b", "train", {"app": "job"}, max_unavailable=1))
    status = pdb_status(server, "b")
    assert status.disruptions_allowed == 0
    assert status.conditions[0].reason == "SyncFailed"
    assert status.conditions[0].message == 'found no controllers for pod "job-0"'


def test_pdb_list_all_namespaces_and_create(server: FakeKubeApiServer) -> None:
    policy = client.PolicyV1Api(server.api_client())
    replicas(server.store, 2)
    created = policy.create_namespaced_pod_disruption_budget(
        "train", make_pdb("x", "train", {"app": "trainer"}, 1)
    )
    assert created.metadata.generation == 1
    assert created.status.disruptions_allowed == 1
    listed = policy.list_pod_disruption_budget_for_all_namespaces()
    assert [p.metadata.name for p in listed.items] == ["x"]
    assert listed.kind == "PodDisruptionBudgetList"


def test_graceful_delete_timing_follows_time_scale(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    server.store.add(make_pod("slow", "train", "gpu-a", grace_seconds=30))
    gone = threading.Event()
    server.store.on("pod_deleted", lambda pod: gone.set())
    started = time.monotonic()
    pod = core.delete_namespaced_pod("slow", "train")
    assert pod.metadata.deletion_grace_period_seconds == 30
    assert not gone.wait(0.15)
    assert gone.wait(5)
    assert 0.25 <= time.monotonic() - started < 2.0


def test_actual_stop_time_override_and_shortening(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    store = server.store
    store.add(
        make_pod("quick", "train", "gpu-a", grace_seconds=300),
        make_pod("long", "train", "gpu-a", grace_seconds=300),
    )
    store.set_pod_stop_seconds("train", "quick", 20)
    done: dict[str, float] = {}
    store.on("pod_deleted", lambda pod: done.setdefault(pod["metadata"]["name"], time.monotonic()))
    started = time.monotonic()
    core.delete_namespaced_pod("quick", "train")
    core.delete_namespaced_pod("long", "train")
    # A second delete may shorten the grace period (to 0 here: immediate): the pod is gone by
    # the time that delete is answered, whatever the machine's load.
    core.delete_namespaced_pod("long", "train", grace_period_seconds=0)
    shortened = time.monotonic()
    assert "long" in done and done["long"] <= shortened
    # The override (20 s, 0.2 s at the test's time scale) stops the quick pod, not its 300 s grace
    # (3 s): a loaded machine makes the stop later, never earlier, so only the lower bound is tight.
    deadline = time.monotonic() + 30
    while "quick" not in done and time.monotonic() < deadline:
        time.sleep(0.02)
    assert 0.15 <= done["quick"] - started < 3.0


def test_delete_grace_zero_and_uid_precondition(core: client.CoreV1Api, server: FakeKubeApiServer) -> None:
    """A stale uid precondition is rest.BeforeDelete's early Conflict, on the Kind "Pod":
    https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/rest/delete.go#L83-L91"""
    (pod,) = server.store.add(make_pod("p", "train", "gpu-a"))
    with pytest.raises(client.ApiException) as err:
        core.delete_namespaced_pod(
            "p", "train", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="x"))
        )
    assert err.value.status == 409
    body = json.loads(err.value.body)
    why = messages.PRECONDITION_UID_MISMATCH.format(precondition="x", record=pod["metadata"]["uid"])
    assert body["message"] == messages.CONFLICT.format(resource="Pod", name="p", why=why)
    assert (body["reason"], body["details"]) == ("Conflict", {"name": "p", "kind": "Pod"})
    # Present though empty, the precondition is still compared (the pointer is set).
    with pytest.raises(client.ApiException) as empty:
        core.delete_namespaced_pod("p", "train", body={"preconditions": {"uid": ""}})
    assert empty.value.status == 409
    with pytest.raises(client.ApiException) as stale:
        core.delete_namespaced_pod("p", "train", body={"preconditions": {"resourceVersion": "1"}})
    why = messages.PRECONDITION_RESOURCE_VERSION_MISMATCH.format(
        precondition="1", record=pod["metadata"]["resourceVersion"]
    )
    assert json.loads(stale.value.body)["message"] == messages.CONFLICT.format(
        resource="Pod", name="p", why=why
    )
    deleted = core.delete_namespaced_pod("p", "train", body=client.V1DeleteOptions(grace_period_seconds=0))
    assert deleted.metadata.name == "p"
    assert core.list_namespaced_pod("train").items == []


def test_pod_spec_is_immutable_except_allowed_fields(
    core: client.CoreV1Api, server: FakeKubeApiServer
) -> None:
    server.store.add(make_pod("p", "train", "gpu-a"))
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_pod("p", "train", {"spec": {"nodeName": "gpu-b"}})
    assert err.value.status == 422
    patched = core.patch_namespaced_pod("p", "train", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.labels == {"a": "b"}
