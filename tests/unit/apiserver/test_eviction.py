"""The eviction subresource's order of checks, through the real `kubernetes` client.

Every test follows EvictionREST.Create of kubernetes/kubernetes v1.33:
https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/pod/storage/eviction.go
The retry's pauses go through a recorder instead of time.sleep, so a test sees the ~10 s the real
server spends (and can change the cluster at a given pause) without waiting for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, make_pdb, make_pod, messages
from nodeheal.sim.apiserver.eviction import EVICTIONS_RETRY, Backoff

NS = "train"
OLD_UID = "6f1c2a8e-0000-4000-8000-000000000001"


class Pauses:
    """time.sleep for the eviction retry: records each pause and may act at the n-th (1-based)."""

    def __init__(self) -> None:
        self.taken: list[float] = []
        self._actions: dict[int, Callable[[], None]] = {}

    def at(self, index: int, action: Callable[[], None]) -> None:
        self._actions[index] = action

    def __call__(self, seconds: float) -> None:
        self.taken.append(seconds)
        action = self._actions.pop(len(self.taken), None)
        if action is not None:
            action()


@pytest.fixture
def pauses() -> Pauses:
    return Pauses()


@pytest.fixture
def server(pauses: Pauses) -> Iterator[FakeKubeApiServer]:
    # Real time scale: the recorded pauses are the real server's; nothing here waits them out.
    store = ClusterStore(sleep=pauses)
    store.add(make_node("gpu-a", instance_id="i-0a"), make_node("gpu-b", instance_id="i-0b"))
    with FakeKubeApiServer(store) as srv:
        yield srv
    store.close()


@pytest.fixture
def policy(server: FakeKubeApiServer) -> client.PolicyV1Api:
    return client.PolicyV1Api(server.api_client())


def evict(
    core: client.CoreV1Api, name: str, *, uid: str | None = None, resource_version: str | None = None
) -> Any:
    options = None
    if uid is not None or resource_version is not None:
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version)
        )
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS), delete_options=options)
    return core.create_namespaced_pod_eviction(name, NS, body)


def refused(core: client.CoreV1Api, name: str, **preconditions: str) -> client.ApiException:
    with pytest.raises(client.ApiException) as err:
        evict(core, name, **preconditions)
    return err.value


def web(index: int, *, node: str = "gpu-a", **kwargs: Any) -> dict[str, Any]:
    return make_pod(
        f"web-{index}", NS, node, labels={"app": "web"}, owner_kind="StatefulSet", owner_name="web", **kwargs
    )


def stored(server: FakeKubeApiServer, name: str) -> dict[str, Any]:
    return dict(server.store.get("pods", name, NS))


def conditions(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in pod["status"].get("conditions") or []}


def conflict_body(name: str, why: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": messages.CONFLICT.format(resource="Pod", name=name, why=why),
        "reason": "Conflict",
        "details": {"name": name, "kind": "Pod"},
        "code": 409,
    }


def processing_429(err: client.ApiException, budget: str) -> None:
    assert err.status == 429
    assert err.headers["Retry-After"] == str(messages.EVICTION_RETRY_AFTER_SECONDS)
    body = json.loads(err.body)
    assert body["message"] == messages.EVICTION_BUDGET_VIOLATION
    assert body["details"] == {
        "causes": [
            {
                "reason": messages.DISRUPTION_BUDGET_CAUSE,
                "message": messages.EVICTION_BUDGET_PROCESSING.format(name=budget),
            }
        ],
        "retryAfterSeconds": messages.EVICTION_RETRY_AFTER_SECONDS,
    }


def needs_429(err: client.ApiException, budget: str, desired: int, current: int) -> None:
    assert err.status == 429
    assert "Retry-After" not in err.headers
    cause = json.loads(err.body)["details"]["causes"][0]
    assert cause["message"] == messages.EVICTION_BUDGET_NEEDS.format(
        name=budget, desired=desired, current=current
    )


# -- the DisruptionTarget condition ---------------------------------------------------------------


def test_disruption_target_is_written_before_the_delete(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """addConditionAndDeletePod updates the pod's status with DisruptionTarget (reason
    EvictionByEvictionAPI) and only then deletes it: two writes, in that order."""
    server.store.add(web(0))
    before = server.store.resource_version
    evict(core, "web-0")
    events, _ = server.store.events_after(before, "pods")
    assert [e.type for e in events] == ["MODIFIED", "MODIFIED"]
    marked, deleting = (e.object for e in events)
    assert not marked["metadata"].get("deletionTimestamp")
    target = conditions(marked)[messages.DISRUPTION_TARGET]
    assert target["status"] == "True"
    assert (target["reason"], target["message"]) == (
        messages.DISRUPTION_TARGET_REASON,
        messages.DISRUPTION_TARGET_MESSAGE,
    )
    assert target["lastProbeTime"] is None and target["lastTransitionTime"]
    assert list(conditions(marked))[-1] == messages.DISRUPTION_TARGET  # appended, as UpdatePodCondition does
    assert deleting["metadata"]["deletionTimestamp"]
    assert conditions(deleting)[messages.DISRUPTION_TARGET] == target


def test_evicting_a_terminating_pod_again_writes_nothing_new(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """A second eviction of a terminating pod: canIgnorePDB, the condition is already there
    (UpdatePodCondition changes nothing, so no write), and the delete only keeps the grace period."""
    server.store.add(web(0))
    evict(core, "web-0")
    before = server.store.resource_version
    assert evict(core, "web-0") is not None
    assert server.store.events_after(before, "pods")[0] == []


def test_dry_run_eviction_writes_nothing(
    server: FakeKubeApiServer, core: client.CoreV1Api, policy: client.PolicyV1Api
) -> None:
    """A dry run adds no condition (addConditionAndDeletePod skips the update), deletes nothing and
    records no disruptedPods (checkAndDecrement stops before the status write)."""
    server.store.add(web(0), web(1), web(2))
    server.store.add(make_pdb("web", NS, {"app": "web"}, max_unavailable=1))
    before = server.store.resource_version
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="web-0", namespace=NS))
    core.create_namespaced_pod_eviction("web-0", NS, body, dry_run="All")
    assert server.store.events_after(before, "pods")[0] == []
    status = policy.read_namespaced_pod_disruption_budget("web", NS).status
    assert (status.disruptions_allowed, status.disrupted_pods) == (1, None)


# -- the retry loop --------------------------------------------------------------------------------


def test_a_pending_namesake_is_retried_for_about_ten_seconds_then_409(
    server: FakeKubeApiServer, core: client.CoreV1Api, pauses: Pauses
) -> None:
    """The name now belongs to a new Pending pod. canIgnorePDB lets the retry loop delete it, but
    the uid precondition (checked by getLatestPod against the new pod) conflicts, and
    retry.OnError(EvictionsRetry) tries 20 times, 0.5 s (+ up to 10% jitter) apart, before it
    answers the last conflict."""
    (new,) = server.store.add(web(0, node="gpu-b", phase="Pending"))
    err = refused(core, "web-0", uid=OLD_UID)
    assert err.status == 409
    why = messages.PRECONDITION_UID_MISMATCH.format(precondition=OLD_UID, record=new["metadata"]["uid"])
    assert json.loads(err.body) == conflict_body("web-0", why)
    assert len(pauses.taken) == EVICTIONS_RETRY.steps - 1 == 19
    assert all(0.5 <= pause <= 0.55 for pause in pauses.taken)
    assert 9.5 <= sum(pauses.taken) <= 10.45
    pod = stored(server, "web-0")
    assert not pod["metadata"].get("deletionTimestamp")
    assert messages.DISRUPTION_TARGET not in conditions(pod)


def test_a_pending_namesake_that_starts_running_meets_its_budget_first(
    server: FakeKubeApiServer, core: client.CoreV1Api, pauses: Pauses
) -> None:
    """While the loop retries, the new pod starts running: canIgnorePDB no longer holds, the loop
    ends, and the PDB check comes first, answering 429 before any uid check."""
    server.store.add(web(0, node="gpu-b", phase="Pending"), web(1), web(2))
    server.store.add(make_pdb("web", NS, {"app": "web"}, min_available=3))
    starts = make_pod("web-0", NS, "gpu-b", phase="Running")["status"]

    def start_running() -> None:
        server.store.mutate("pods", "web-0", lambda pod: pod.update(status=starts), NS)

    pauses.at(3, start_running)
    err = refused(core, "web-0", uid=OLD_UID)
    needs_429(err, "web", desired=3, current=3)
    assert len(pauses.taken) == 3


def test_a_running_namesake_covered_by_a_budget_uses_it_up_then_409(
    server: FakeKubeApiServer, core: client.CoreV1Api, policy: client.PolicyV1Api, pauses: Pauses
) -> None:
    """A running namesake goes straight to the budget: checkAndDecrement writes the pod's name
    into disruptedPods, then the delete's uid check fails (409, no retry). The budget stays used:
    the new pod is not counted healthy (disruption.go countHealthyPods), so the next eviction is 429."""
    server.store.add(web(0, node="gpu-b"), web(1), web(2))
    server.store.add(make_pdb("web", NS, {"app": "web"}, max_unavailable=1))
    err = refused(core, "web-0", uid=OLD_UID)
    assert err.status == 409
    assert pauses.taken == []
    status = policy.read_namespaced_pod_disruption_budget("web", NS).status
    assert list(status.disrupted_pods) == ["web-0"]
    assert (status.current_healthy, status.disruptions_allowed) == (2, 0)
    needs_429(refused(core, "web-1"), "web", desired=2, current=2)
    assert not stored(server, "web-0")["metadata"].get("deletionTimestamp")


def test_a_disrupted_pod_that_was_not_deleted_counts_again_after_the_deletion_timeout() -> None:
    """The disruption controller drops a disruptedPods entry DeletionTimeout (2 minutes) after the
    eviction allowed it if the pod never started terminating (disruption.go buildDisruptedPodMap).
    https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/controller/disruption/disruption.go"""
    store = ClusterStore(time_scale=0.001)  # 2 minutes are 0.12 s
    store.add(make_node("gpu-a", instance_id="i-0a"), web(0), web(1), web(2))
    store.add(make_pdb("web", NS, {"app": "web"}, max_unavailable=1))
    with FakeKubeApiServer(store) as server:
        core = client.CoreV1Api(server.api_client())
        started = time.monotonic()
        assert refused(core, "web-0", uid=OLD_UID).status == 409
        deadline = started + 5
        while "disruptedPods" in store.get("poddisruptionbudgets", "web", NS)["status"]:
            assert time.monotonic() < deadline, "the disruptedPods entry never expired"
            time.sleep(0.01)
        # Not before the (scaled) DeletionTimeout: the entry was there, and held, until then.
        assert time.monotonic() - started >= 120 * 0.001
        status = store.get("poddisruptionbudgets", "web", NS)["status"]
        assert (status["currentHealthy"], status["disruptionsAllowed"]) == (3, 1)
    store.close()


def test_a_callers_resource_version_precondition_turns_the_retry_off(
    server: FakeKubeApiServer, core: client.CoreV1Api, pauses: Pauses
) -> None:
    """With preconditions.resourceVersion set, shouldRetry is false: the first conflict is the
    answer, with getLatestPod's wording."""
    (pod,) = server.store.add(web(0, phase="Pending"))
    err = refused(core, "web-0", resource_version="1")
    why = messages.PRECONDITION_RESOURCE_VERSION_MISMATCH.format(
        precondition="1", record=pod["metadata"]["resourceVersion"]
    )
    assert json.loads(err.body) == conflict_body("web-0", why)
    assert pauses.taken == []


def test_the_retry_pauses_really_by_default_scaled_by_time_scale() -> None:
    """Without a recorder the pauses are slept, each EvictionsRetry's 0.5 s times time_scale."""
    assert ClusterStore().eviction.retry == Backoff(steps=20, duration=0.5, factor=1.0, jitter=0.1)
    assert ClusterStore().eviction.sleep is time.sleep
    store = ClusterStore(time_scale=0.01)
    store.add(make_node("gpu-a", instance_id="i-0a"), web(0, phase="Pending"))
    with FakeKubeApiServer(store) as server:
        started = time.monotonic()
        err = refused(client.CoreV1Api(server.api_client()), "web-0", uid=OLD_UID)
        assert err.status == 409
        assert time.monotonic() - started >= 19 * 0.5 * 0.01
    store.close()


# -- what may go without consulting a budget -------------------------------------------------------


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed"])
def test_pending_and_finished_pods_go_without_the_budget(
    server: FakeKubeApiServer, core: client.CoreV1Api, phase: str
) -> None:
    """canIgnorePDB: a Pending, Succeeded or Failed pod is evicted even under a budget that allows
    no disruption, and the budget is not used (no disruptedPods entry)."""
    server.store.add(web(0, phase=phase), web(1), web(2))
    server.store.add(make_pdb("web", NS, {"app": "web"}, max_unavailable=0))
    evict(core, "web-0")
    pod = server.store.select("pods", lambda p: p["metadata"]["name"] == "web-0", NS)
    if phase == "Pending":
        # A pod on a node terminates with its grace period; a finished one is removed at once.
        assert pod and pod[0]["metadata"]["deletionTimestamp"]
    else:
        assert pod == []
    assert "disruptedPods" not in server.store.get("poddisruptionbudgets", "web", NS)["status"]


# -- unready pods and unhealthyPodEvictionPolicy -----------------------------------------------


@pytest.mark.parametrize("policy_value", [None, "IfHealthyBudget"])
def test_an_unready_pod_waits_for_a_healthy_budget_by_default(
    server: FakeKubeApiServer, core: client.CoreV1Api, policy_value: str | None
) -> None:
    """IfHealthyBudget (also the default): an unready pod goes without using the budget only while
    currentHealthy >= desiredHealthy > 0; below that checkAndDecrement answers 429."""
    server.store.add(web(0, ready=False), web(1), web(2))
    server.store.add(
        make_pdb("web", NS, {"app": "web"}, min_available=3, unhealthy_pod_eviction_policy=policy_value)
    )
    needs_429(refused(core, "web-0"), "web", desired=3, current=2)


def test_always_allow_lets_an_unready_pod_go_whatever_the_budget(
    server: FakeKubeApiServer, core: client.CoreV1Api, policy: client.PolicyV1Api
) -> None:
    """unhealthyPodEvictionPolicy: AlwaysAllow: an unready pod is evicted even when the budget
    allows nothing, and no disruption is used; a ready pod is still held to the budget."""
    server.store.add(web(0, ready=False), web(1), web(2))
    server.store.add(
        make_pdb("web", NS, {"app": "web"}, min_available=3, unhealthy_pod_eviction_policy="AlwaysAllow")
    )
    evict(core, "web-0")
    assert stored(server, "web-0")["metadata"]["deletionTimestamp"]
    assert policy.read_namespaced_pod_disruption_budget("web", NS).status.disrupted_pods is None
    needs_429(refused(core, "web-1"), "web", desired=3, current=2)


def test_an_unready_pod_that_turns_ready_before_its_delete_is_429_still_processing(
    server: FakeKubeApiServer, core: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unready pod let through by the budget is deleted with its resourceVersion as a
    precondition; if it changed (became ready) meanwhile, the conflict is answered as 429
    "still being processed" with retry-after 10 s, and the pod is left alone."""
    server.store.add(web(0, ready=False), web(1), web(2))
    server.store.add(make_pdb("web", NS, {"app": "web"}, min_available=2))
    budgets_for = server.store.budgets_for

    def becomes_ready_meanwhile(pod: dict[str, Any]) -> list[dict[str, Any]]:
        found = budgets_for(pod)
        server.store.set_pod_ready(NS, "web-0", ready=True)
        return found

    monkeypatch.setattr(server.store, "budgets_for", becomes_ready_meanwhile)
    processing_429(refused(core, "web-0"), "web")
    pod = stored(server, "web-0")
    assert not pod["metadata"].get("deletionTimestamp")
    assert messages.DISRUPTION_TARGET not in conditions(pod)


# -- the disruption controller's lag ---------------------------------------------------------------


def test_a_budget_whose_generation_is_not_observed_yet_is_429_with_retry_after(
    server: FakeKubeApiServer, core: client.CoreV1Api, policy: client.PolicyV1Api
) -> None:
    """checkAndDecrement: status.observedGeneration < metadata.generation (the spec changed and the
    disruption controller has not synced) is createTooManyRequestsError: retry-after 10 s."""
    server.store.add(web(0), web(1), web(2))
    server.store.add(make_pdb("web", NS, {"app": "web"}, max_unavailable=1))
    server.store.pause_disruption_controller()
    policy.patch_namespaced_pod_disruption_budget("web", NS, {"spec": {"maxUnavailable": 2}})
    budget = policy.read_namespaced_pod_disruption_budget("web", NS)
    assert (budget.metadata.generation, budget.status.observed_generation) == (2, 1)
    processing_429(refused(core, "web-0"), "web")
    server.store.resume_disruption_controller()
    evict(core, "web-0")
    evict(core, "web-1")


def test_a_budget_never_synced_is_429_still_processing(
    server: FakeKubeApiServer, core: client.CoreV1Api, policy: client.PolicyV1Api
) -> None:
    """A new PDB has the empty status the registry gives it (observedGeneration 0) until the
    disruption controller first syncs it."""
    server.store.add(web(0), web(1))
    server.store.pause_disruption_controller()
    policy.create_namespaced_pod_disruption_budget(NS, make_pdb("web", NS, {"app": "web"}, max_unavailable=1))
    status = policy.read_namespaced_pod_disruption_budget("web", NS).status
    assert (status.observed_generation, status.disruptions_allowed, status.expected_pods) == (None, 0, 0)
    processing_429(refused(core, "web-0"), "web")


def test_evictions_use_up_a_budget_the_controller_has_not_resynced(
    server: FakeKubeApiServer, core: client.CoreV1Api, policy: client.PolicyV1Api
) -> None:
    """checkAndDecrement writes the decrement itself (UpdateStatus), so a lagging controller cannot
    let two evictions through one disruption: the second sees disruptionsAllowed 0, and the
    DisruptionAllowed condition turns False (pdbhelper.UpdateDisruptionAllowedCondition)."""
    server.store.add(web(0), web(1), web(2))
    server.store.add(make_pdb("web", NS, {"app": "web"}, max_unavailable=1))
    server.store.pause_disruption_controller()
    evict(core, "web-0")
    status = policy.read_namespaced_pod_disruption_budget("web", NS).status
    assert status.disruptions_allowed == 0
    assert list(status.disrupted_pods) == ["web-0"]
    assert (status.conditions[0].status, status.conditions[0].reason) == ("False", "InsufficientPods")
    # The status the controller last wrote still counts web-0 healthy: the decrement is what holds.
    needs_429(refused(core, "web-1"), "web", desired=2, current=3)


# -- which budgets cover the pod ---------------------------------------------------------------------


def test_an_empty_selector_covers_every_pod_of_the_namespace(
    server: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    """getPodDisruptionBudgets uses metav1.LabelSelectorAsSelector: in policy/v1 an empty
    selector ({}) selects everything, so it guards pods whatever their labels."""
    server.store.add(make_pod("lone", NS, "gpu-a", labels={"x": "y"}))
    server.store.add(make_pdb("all", NS, {}, min_available=1))
    needs_429(refused(core, "lone"), "all", desired=1, current=1)


def test_a_pod_under_two_budgets_is_a_bare_500(server: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    """More than one PDB: the handler returns a failure Status (code 500, no reason or details)."""
    server.store.add(web(0), web(1))
    server.store.add(
        make_pdb("one", NS, {"app": "web"}, max_unavailable=1),
        make_pdb("two", NS, {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, max_unavailable=1),
    )
    err = refused(core, "web-0")
    assert err.status == 500
    assert json.loads(err.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": messages.EVICTION_MULTIPLE_BUDGETS,
        "code": 500,
    }
