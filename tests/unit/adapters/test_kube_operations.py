"""Node and Pod operations through the real ``kubernetes`` client against the fake API server."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeheal.errors import KubernetesApiError, KubernetesApiUnavailableError, NodeGoneError
from nodeheal.kube.client import StaticClientProvider
from nodeheal.kube.nodes import NodeOperations
from nodeheal.kube.pods import PodOperations, PodOutcome
from nodeheal.kube.transport import GeneratedClientTransport, HttpTransport
from nodeheal.kube_views import (
    ANNOTATION_CORDONED_AT,
    ANNOTATION_CORDONED_BY_NODEHEAL,
    ANNOTATION_EXECUTION,
    ANNOTATION_REASON,
    UNHEALTHY_TAINT_KEY,
    PodView,
)
from nodeheal.sim.apiserver import messages
from nodeheal.sim.apiserver.objects import make_node, make_pdb, make_pod
from nodeheal.sim.apiserver.server import FakeKubeApiServer
from nodeheal.sim.apiserver.status import ApiError
from nodeheal.sim.apiserver.store import ClusterStore

NODE = "ip-10-0-158-235.us-west-2.compute.internal"
OTHER_NODE = "ip-10-0-7-9.us-west-2.compute.internal"
INSTANCE = "i-0abc1234567890def"
NOW = datetime(2026, 11, 21, 10, 0, 5, tzinfo=UTC)
KARPENTER_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def _client(kube: FakeKubeApiServer) -> HttpTransport:
    # NodeHeal's own provider, so its client settings (retries, pool size) are what is exercised.
    return StaticClientProvider(kube.url, token="sim").transport("sim")


@pytest.fixture
def nodes(kube: FakeKubeApiServer) -> NodeOperations:
    return NodeOperations(_client(kube))


@pytest.fixture
def pods(kube: FakeKubeApiServer) -> PodOperations:
    return PodOperations(_client(kube))


def _add_node(kube: FakeKubeApiServer, name: str = NODE, **kwargs: Any) -> dict[str, Any]:
    (stored,) = kube.store.add(make_node(name, instance_id=kwargs.pop("instance_id", INSTANCE), **kwargs))
    return dict(stored)


def _stored_node(kube: FakeKubeApiServer, name: str = NODE) -> dict[str, Any]:
    return dict(kube.store.get("nodes", name))


def _taints(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("spec") or {}).get("taints") or [])


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


# -- reads ----------------------------------------------------------------------------------------


def test_get_returns_a_live_node_view(kube: FakeKubeApiServer, nodes: NodeOperations) -> None:
    stored = _add_node(kube, extra_conditions=[{"type": "GPUProblem", "status": "True", "reason": "XID79"}])
    node = nodes.get(NODE)
    assert node is not None
    assert node.name == NODE
    assert node.uid == stored["metadata"]["uid"]
    assert node.instance_id == INSTANCE
    assert node.gpu_capacity == 8
    assert node.is_ready
    gpu = node.condition("GPUProblem")
    assert gpu is not None and gpu.status == "True" and gpu.is_bad
    assert node.boot_id == stored["status"]["nodeInfo"]["bootID"]


def test_get_missing_node_is_none(nodes: NodeOperations) -> None:
    assert nodes.get("no-such-node") is None


def test_operations_work_over_a_kubeconfig_style_generated_client(kube: FakeKubeApiServer) -> None:
    _add_node(kube)
    node = NodeOperations(GeneratedClientTransport(kube.api_client())).get(NODE)
    assert node is not None and node.name == NODE


def test_list_filters_by_label_selector(kube: FakeKubeApiServer, nodes: NodeOperations) -> None:
    _add_node(kube, NODE, node_pool="gpu")
    _add_node(kube, OTHER_NODE, instance_id="i-0fff1234567890abc", node_pool="cpu")
    assert {n.name for n in nodes.list()} == {NODE, OTHER_NODE}
    assert [n.name for n in nodes.list("karpenter.sh/nodepool=gpu")] == [NODE]
    assert nodes.list("karpenter.sh/nodepool=none") == []


# -- cordon ---------------------------------------------------------------------------------------


def test_list_whose_snapshot_expires_mid_way_lists_again_whole(
    kube: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Pages after the first are read at the first page's revision; once etcd compacted it the
    next page is 410 (``handleCompactedErrorForPaging`` in k8s.io/apiserver
    pkg/storage/etcd3/errors.go). NodeHeal then lists again from the start, without a limit, as
    client-go's pager does (``FullListIfExpired`` in k8s.io/client-go tools/pager/pager.go): the
    answer is today's nodes, never pages of two different moments."""
    for index, name in enumerate(("node-a", "node-b", "node-c")):
        _add_node(kube, name, instance_id=f"i-0{index}aa1234567890abc")

    def churn_then_compact() -> None:
        kube.store.remove("nodes", "node-c")
        _add_node(kube, "node-d", instance_id="i-0dd1234567890abcd")
        kube.store.compact()

    kube.faults.call_before(churn_then_compact, skip=1, method="GET", path="^/api/v1/nodes$")
    paged = NodeOperations(_client(kube), page_size=1)
    # Listen on the adapter's own logger, at its level: once a handler has set up Powertools'
    # "nodeheal" logger in this process (quiet in the demo), warnings neither pass that logger's
    # level nor propagate to the root logger caplog listens on.
    adapter_logger = logging.getLogger("nodeheal.kube.client")
    caplog.set_level(logging.WARNING, logger=adapter_logger.name)
    adapter_logger.addHandler(caplog.handler)
    try:
        listed = [n.name for n in paged.list()]
    finally:
        adapter_logger.removeHandler(caplog.handler)
    assert listed == ["node-a", "node-b", "node-d"]
    # The first page, the expired second one, then the whole list.
    assert kube.faults.count("GET", "^/api/v1/nodes$") == 3
    assert "the list's snapshot expired after 1 objects (410)" in caplog.text


def test_list_of_a_nodes_pods_survives_an_expired_snapshot(kube: FakeKubeApiServer) -> None:
    """The same for the drain's list of a node's pods (one consistent list, or a fresh one)."""
    _add_pods(kube, *(make_pod(f"trainer-{i}", "ml", NODE, owner_kind="StatefulSet") for i in range(3)))

    def schedule_then_compact() -> None:
        _add_pods(kube, make_pod("trainer-3", "ml", NODE, owner_kind="StatefulSet"))
        kube.store.compact()

    kube.faults.call_before(schedule_then_compact, skip=2, method="GET", path="^/api/v1/pods$")
    listed = PodOperations(_client(kube), page_size=1).list_on_node(NODE)
    assert [p.key for p in listed] == [f"ml/trainer-{i}" for i in range(4)]
    assert kube.faults.count("GET", "^/api/v1/pods$") == 4


def test_cordon_sets_unschedulable_taint_and_annotations_keeping_other_taints(
    kube: FakeKubeApiServer, nodes: NodeOperations
) -> None:
    _add_node(kube, taints=[GPU_TAINT, KARPENTER_TAINT])

    result = nodes.cordon(NODE, execution="exec-1", reason="Xid 79: GPU fell off the bus", now=NOW)

    assert result.changed is True
    assert result.flipped_unschedulable is True
    assert result.previous_execution is None
    assert result.node.unschedulable is True
    assert result.node.cordoned_by_nodeheal is True
    stored = _stored_node(kube)
    assert stored["spec"]["unschedulable"] is True
    assert _taints(stored) == [
        GPU_TAINT,
        KARPENTER_TAINT,
        {"key": UNHEALTHY_TAINT_KEY, "effect": "NoSchedule"},
    ]
    annotations = _annotations(stored)
    assert annotations[ANNOTATION_EXECUTION] == "exec-1"
    assert annotations[ANNOTATION_REASON] == "Xid 79: GPU fell off the bus"
    assert annotations[ANNOTATION_CORDONED_AT] == "2026-11-21T10:00:05Z"
    assert annotations[ANNOTATION_CORDONED_BY_NODEHEAL] == "true"
    # Annotations NodeHeal does not own are untouched.
    assert annotations["karpenter.sh/nodepool-hash"] == "6821555240594823858"


def test_cordon_is_idempotent_for_the_same_execution(kube: FakeKubeApiServer, nodes: NodeOperations) -> None:
    _add_node(kube)
    nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)
    version = _stored_node(kube)["metadata"]["resourceVersion"]

    again = nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)

    assert again.changed is False
    assert again.flipped_unschedulable is True
    assert _stored_node(kube)["metadata"]["resourceVersion"] == version
    assert [t["key"] for t in _taints(_stored_node(kube))].count(UNHEALTHY_TAINT_KEY) == 1


def test_cordon_of_a_node_someone_else_cordoned_does_not_claim_the_flag(
    kube: FakeKubeApiServer, nodes: NodeOperations
) -> None:
    _add_node(kube, unschedulable=True)

    result = nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)

    assert result.changed is True
    assert result.flipped_unschedulable is False
    stored = _stored_node(kube)
    assert ANNOTATION_CORDONED_BY_NODEHEAL not in _annotations(stored)
    assert stored["spec"]["unschedulable"] is True

    # ...so uncordon removes NodeHeal's marks but leaves the person's cordon in place.
    assert nodes.uncordon(NODE) is True
    stored = _stored_node(kube)
    assert stored["spec"]["unschedulable"] is True
    assert UNHEALTHY_TAINT_KEY not in {t["key"] for t in _taints(stored)}
    assert not {ANNOTATION_EXECUTION, ANNOTATION_REASON, ANNOTATION_CORDONED_AT} & set(_annotations(stored))


def test_cordon_by_a_later_execution_takes_over_and_keeps_ownership(
    kube: FakeKubeApiServer, nodes: NodeOperations
) -> None:
    _add_node(kube)
    nodes.cordon(NODE, execution="exec-1", reason="first", now=NOW)

    second = nodes.cordon(NODE, execution="exec-2", reason="second", now=NOW)

    assert second.changed is True
    assert second.previous_execution == "exec-1"
    assert second.flipped_unschedulable is True
    annotations = _annotations(_stored_node(kube))
    assert annotations[ANNOTATION_EXECUTION] == "exec-2"
    assert annotations[ANNOTATION_REASON] == "second"
    assert annotations[ANNOTATION_CORDONED_BY_NODEHEAL] == "true"
    assert [t["key"] for t in _taints(_stored_node(kube))].count(UNHEALTHY_TAINT_KEY) == 1


def test_cordon_missing_or_replaced_node_is_node_gone(kube: FakeKubeApiServer, nodes: NodeOperations) -> None:
    with pytest.raises(NodeGoneError, match="no longer exists"):
        nodes.cordon(NODE, execution="e", reason="r", now=NOW)
    _add_node(kube)
    with pytest.raises(NodeGoneError, match="was replaced"):
        nodes.cordon(NODE, execution="e", reason="r", now=NOW, expected_uid="uid-of-the-old-node")
    assert _stored_node(kube)["spec"].get("unschedulable") is not True


def test_cordon_retries_when_the_node_changes_between_read_and_patch(
    kube: FakeKubeApiServer, nodes: NodeOperations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller adds a taint after NodeHeal read the node: the resourceVersion precondition
    makes the first patch fail with 409, and the retry keeps the controller's taint."""
    _add_node(kube, taints=[GPU_TAINT])
    original = NodeOperations._get_raw
    reads = 0

    def racing_read(self: NodeOperations, name: str) -> dict[str, Any] | None:
        nonlocal reads
        raw = original(self, name)
        reads += 1
        if reads == 1:

            def add_taint(node: dict[str, Any]) -> None:
                node["spec"]["taints"] = [*node["spec"].get("taints", []), KARPENTER_TAINT]

            kube.store.mutate("nodes", name, add_taint)
        return raw

    monkeypatch.setattr(NodeOperations, "_get_raw", racing_read)

    result = nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)

    assert reads == 2
    assert result.changed is True
    assert _taints(_stored_node(kube)) == [
        GPU_TAINT,
        KARPENTER_TAINT,
        {"key": UNHEALTHY_TAINT_KEY, "effect": "NoSchedule"},
    ]


def _replace_after_first_read(
    kube: FakeKubeApiServer, monkeypatch: pytest.MonkeyPatch, **replacement: Any
) -> list[str]:
    """After NodeHeal's first read the Node is deleted and a new one takes its name (EC2 reused the
    IP), as on a real cluster between NodeHeal's GET and its PATCH. Returns the uids it read."""
    original = NodeOperations._get_raw
    seen: list[str] = []

    def racing_read(self: NodeOperations, name: str) -> dict[str, Any] | None:
        raw = original(self, name)
        if raw is not None:
            seen.append(raw["metadata"]["uid"])
        if len(seen) == 1:
            kube.store.remove("nodes", name)
            _add_node(kube, instance_id="i-0new1234567890new", **replacement)
        return raw

    monkeypatch.setattr(NodeOperations, "_get_raw", racing_read)
    return seen


def test_cordon_of_a_node_replaced_between_read_and_patch_leaves_the_new_node_alone(
    kube: FakeKubeApiServer, nodes: NodeOperations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The patch names the resourceVersion NodeHeal read; the new Node has another, so the real
    server answers 409 before it would look at anything else (store.go ``Update``:
    https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/generic/registry/store.go),
    and the re-read sees the new uid. NodeHeal must say "replaced", never cordon the newcomer."""
    old_uid = _add_node(kube)["metadata"]["uid"]
    seen = _replace_after_first_read(kube, monkeypatch)

    with pytest.raises(NodeGoneError, match="was replaced"):
        nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW, expected_uid=old_uid)

    assert seen[0] == old_uid and seen[1] != old_uid
    newcomer = _stored_node(kube)
    assert newcomer["spec"].get("unschedulable") is not True
    assert UNHEALTHY_TAINT_KEY not in {t["key"] for t in _taints(newcomer)}
    assert ANNOTATION_EXECUTION not in _annotations(newcomer)


def test_uncordon_of_a_node_replaced_between_read_and_patch_leaves_the_new_node_alone(
    kube: FakeKubeApiServer, nodes: NodeOperations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for uncordon: the newcomer was cordoned by someone else (Karpenter's taint and
    flag), and NodeHeal, whose cordon was on the old Node, must not clear it."""
    old_uid = _add_node(kube)["metadata"]["uid"]
    nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW, expected_uid=old_uid)
    _replace_after_first_read(kube, monkeypatch, unschedulable=True, taints=[KARPENTER_TAINT])

    with pytest.raises(NodeGoneError, match="was replaced"):
        nodes.uncordon(NODE, expected_uid=old_uid)

    newcomer = _stored_node(kube)
    assert newcomer["spec"]["unschedulable"] is True
    assert _taints(newcomer) == [KARPENTER_TAINT]


def test_cordon_gives_up_after_persistent_conflicts(
    kube: FakeKubeApiServer, nodes: NodeOperations, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add_node(kube)
    original = NodeOperations._get_raw

    def always_racing(self: NodeOperations, name: str) -> dict[str, Any] | None:
        raw = original(self, name)
        kube.store.mutate("nodes", name, lambda n: n["metadata"]["labels"].update({"churn": str(id(raw))}))
        return raw

    monkeypatch.setattr(NodeOperations, "_get_raw", always_racing)
    with pytest.raises(KubernetesApiError, match="kept changing"):
        nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)
    assert _stored_node(kube)["spec"].get("unschedulable") is not True


# -- uncordon -------------------------------------------------------------------------------------


def test_uncordon_undoes_exactly_what_cordon_did(kube: FakeKubeApiServer, nodes: NodeOperations) -> None:
    before = _add_node(kube, taints=[GPU_TAINT])
    nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)

    assert nodes.uncordon(NODE) is True

    after = _stored_node(kube)
    assert after["spec"].get("unschedulable", False) is False
    assert _taints(after) == [GPU_TAINT]
    assert _annotations(after) == _annotations(before)
    assert nodes.uncordon(NODE) is False


def test_uncordon_leaves_a_node_nodeheal_never_touched_alone(
    kube: FakeKubeApiServer, nodes: NodeOperations
) -> None:
    _add_node(kube, unschedulable=True, taints=[KARPENTER_TAINT])
    version = _stored_node(kube)["metadata"]["resourceVersion"]
    assert nodes.uncordon(NODE) is False
    stored = _stored_node(kube)
    assert stored["metadata"]["resourceVersion"] == version
    assert stored["spec"]["unschedulable"] is True


def test_uncordon_after_someone_else_uncordoned_only_removes_marks(
    kube: FakeKubeApiServer, nodes: NodeOperations
) -> None:
    _add_node(kube)
    nodes.cordon(NODE, execution="exec-1", reason="r", now=NOW)
    kube.store.mutate("nodes", NODE, lambda n: n["spec"].update({"unschedulable": False}))

    assert nodes.uncordon(NODE) is True
    stored = _stored_node(kube)
    assert stored["spec"].get("unschedulable", False) is False
    assert ANNOTATION_CORDONED_BY_NODEHEAL not in _annotations(stored)


# -- delete node ----------------------------------------------------------------------------------


def test_delete_node_with_uid_precondition(kube: FakeKubeApiServer, nodes: NodeOperations) -> None:
    stored = _add_node(kube)
    kube.store.mutate("nodes", NODE, lambda n: n["metadata"].update({"finalizers": []}))
    assert nodes.delete(NODE, "some-other-uid") is False
    assert nodes.get(NODE) is not None
    assert nodes.delete(NODE, stored["metadata"]["uid"]) is True
    assert nodes.get(NODE) is None
    assert nodes.delete(NODE, stored["metadata"]["uid"]) is False


# -- pods -----------------------------------------------------------------------------------------


def _add_pods(kube: FakeKubeApiServer, *pods: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(p) for p in kube.store.add(*pods)]


def test_list_on_node_returns_only_that_nodes_pods(kube: FakeKubeApiServer, pods: PodOperations) -> None:
    _add_pods(
        kube,
        make_pod("trainer-0", "ml", NODE, owner_kind="StatefulSet", owner_name="trainer", gpus=8),
        make_pod(
            "dcgm-exporter-abcde", "kube-system", NODE, owner_kind="DaemonSet", owner_name="dcgm-exporter"
        ),
        make_pod("kube-proxy-static", "kube-system", NODE, mirror=True),
        make_pod("done", "ml", NODE, owner_kind="Job", phase="Succeeded"),
        make_pod("elsewhere", "ml", OTHER_NODE, owner_kind="ReplicaSet"),
    )
    listed = {p.key: p for p in pods.list_on_node(NODE)}
    assert set(listed) == {
        "ml/trainer-0",
        "kube-system/dcgm-exporter-abcde",
        "kube-system/kube-proxy-static",
        "ml/done",
    }
    assert [k for k, p in listed.items() if p.needs_eviction] == ["ml/trainer-0"]
    assert listed["kube-system/dcgm-exporter-abcde"].is_daemonset_pod
    assert listed["kube-system/kube-proxy-static"].is_mirror_pod
    assert listed["ml/trainer-0"].uid


def test_eviction_classifies_evicted_blocked_gone(kube: FakeKubeApiServer, pods: PodOperations) -> None:
    kube.store.add(make_pdb("trainer", "ml", {"app": "trainer"}, min_available=2))
    _add_pods(
        kube,
        make_pod("web-1", "ml", NODE, owner_kind="ReplicaSet", owner_name="web"),
        make_pod(
            "trainer-0", "ml", NODE, labels={"app": "trainer"}, owner_kind="StatefulSet", owner_name="trainer"
        ),
        make_pod(
            "trainer-1",
            "ml",
            OTHER_NODE,
            labels={"app": "trainer"},
            owner_kind="StatefulSet",
            owner_name="trainer",
        ),
    )
    listed = {p.name: p for p in pods.list_on_node(NODE)}
    vanished = PodView(namespace="ml", name="vanished", uid="0000", phase="Running", owner_kinds=())

    report = pods.evict([listed["web-1"], listed["trainer-0"], vanished], parallelism=3)

    by_pod = {r.pod: r for r in report.results}
    assert [r.pod for r in report.results] == ["ml/web-1", "ml/trainer-0", "ml/vanished"]
    assert by_pod["ml/web-1"].outcome is PodOutcome.EVICTED
    assert by_pod["ml/web-1"].status in (200, 201)
    blocked = by_pod["ml/trainer-0"]
    assert blocked.outcome is PodOutcome.BLOCKED
    assert blocked.status == 429
    assert blocked.retryable
    assert messages.EVICTION_BUDGET_VIOLATION in blocked.message
    assert messages.EVICTION_BUDGET_NEEDS.format(name="trainer", desired=2, current=2) in blocked.message
    assert by_pod["ml/vanished"].outcome is PodOutcome.GONE
    assert by_pod["ml/vanished"].status == 404
    assert [r.pod for r in report.evicted] == ["ml/web-1"]
    assert [r.pod for r in report.blocked] == ["ml/trainer-0"]
    assert [r.pod for r in report.gone] == ["ml/vanished"]
    assert report.failed == ()
    assert report.to_json()["counts"] == {
        "evicted": 1,
        "deleted": 0,
        "blocked": 1,
        "gone": 1,
        "failed": 0,
        "not-reached": 0,
    }
    # The evicted pod is terminating; the blocked one is untouched.
    assert kube.store.get("pods", "trainer-0", "ml")["metadata"].get("deletionTimestamp") is None


def test_eviction_of_a_replaced_namesake_is_gone_not_evicted(
    kube: FakeKubeApiServer, pods: PodOperations
) -> None:
    _add_pods(kube, make_pod("trainer-0", "ml", NODE, owner_kind="StatefulSet", owner_name="trainer"))
    listed = pods.list_on_node(NODE)
    # The StatefulSet recreated trainer-0 (same name, new uid) after NodeHeal listed it.
    kube.store.remove("pods", "trainer-0", "ml")
    _add_pods(kube, make_pod("trainer-0", "ml", OTHER_NODE, owner_kind="StatefulSet", owner_name="trainer"))

    report = pods.evict(listed, parallelism=1)

    (result,) = report.results
    assert result.outcome is PodOutcome.GONE
    assert result.status == 409
    assert kube.store.get("pods", "trainer-0", "ml")["metadata"].get("deletionTimestamp") is None


def test_eviction_of_a_pending_namesake_is_gone_after_the_servers_retries() -> None:
    """The namesake is Pending: the real server retries its uid conflict for ~10 s
    (EvictionsRetry in pkg/registry/core/pod/storage/eviction.go) and then answers 409, which is
    still GONE. https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/pod/storage/eviction.go
    """
    store = ClusterStore(time_scale=0.001)
    with FakeKubeApiServer(store) as kube:
        pods = PodOperations(_client(kube))
        _add_pods(kube, make_pod("trainer-0", "ml", NODE, owner_kind="StatefulSet", owner_name="trainer"))
        listed = pods.list_on_node(NODE)
        kube.store.remove("pods", "trainer-0", "ml")
        _add_pods(
            kube,
            make_pod(
                "trainer-0", "ml", OTHER_NODE, owner_kind="StatefulSet", owner_name="trainer", phase="Pending"
            ),
        )
        (result,) = pods.evict(listed, parallelism=1).results
        assert (result.outcome, result.status, result.retryable) == (PodOutcome.GONE, 409, False)
        assert not kube.store.get("pods", "trainer-0", "ml")["metadata"].get("deletionTimestamp")
    store.close()


def test_a_budget_still_being_processed_is_blocked_and_retried(
    kube: FakeKubeApiServer, pods: PodOperations
) -> None:
    """429 with retry-after 10 s while the disruption controller has not observed the PDB's
    generation (eviction.go checkAndDecrement, createTooManyRequestsError): blocked, retried next
    round, and the explanation says why."""
    kube.store.add(make_pdb("trainer", "ml", {"app": "trainer"}, max_unavailable=1))
    _add_pods(
        kube,
        make_pod(
            "trainer-0", "ml", NODE, labels={"app": "trainer"}, owner_kind="StatefulSet", owner_name="trainer"
        ),
    )
    listed = pods.list_on_node(NODE)
    kube.store.pause_disruption_controller()
    kube.store.patch(
        "poddisruptionbudgets",
        "trainer",
        "application/merge-patch+json",
        {"spec": {"maxUnavailable": 2}},
        "ml",
    )
    (result,) = pods.evict(listed, parallelism=1).results
    assert (result.outcome, result.status, result.retryable) == (PodOutcome.BLOCKED, 429, True)
    assert messages.EVICTION_BUDGET_PROCESSING.format(name="trainer") in result.message


def test_a_429_without_a_budget_cause_is_load_shedding_not_a_budget(
    kube: FakeKubeApiServer, pods: PodOperations
) -> None:
    """API Priority and Fairness answers 429 too, with no DisruptionBudget cause: a retryable
    failure, not a PodDisruptionBudget's refusal."""
    _add_pods(kube, make_pod("web-1", "ml", NODE, owner_kind="ReplicaSet", owner_name="web"))
    listed = pods.list_on_node(NODE)
    kube.faults.fail_next(1, status=429, method="POST", path=r"/eviction$")
    (result,) = pods.evict(listed, parallelism=1).results
    assert (result.outcome, result.status, result.retryable) == (PodOutcome.FAILED, 429, True)


def test_a_conflict_on_the_pod_still_there_is_retried_not_gone(
    kube: FakeKubeApiServer, pods: PodOperations
) -> None:
    """A 409 Conflict while the pod is still there with its uid (the server's own resourceVersion
    check lost a race: eviction.go shouldEnforceResourceVersion) does not mean the pod is gone,
    whatever the message says: a transient failure, asked again next round."""
    _add_pods(kube, make_pod("web-1", "ml", NODE, owner_kind="ReplicaSet", owner_name="web"))
    listed = pods.list_on_node(NODE)
    kube.faults.fail_next(1, status=409, method="POST", path=r"/eviction$", message="precondition uid")
    (result,) = pods.evict(listed, parallelism=1).results
    assert (result.outcome, result.status, result.retryable) == (PodOutcome.FAILED, 409, True)
    kube.faults.fail_next(1, status=409, method="POST", path=r"/eviction$")
    kube.faults.fail_next(1, status=500, method="GET", path=r"/namespaces/ml/pods$")
    (unknown,) = pods.evict(listed, parallelism=1).results
    assert (unknown.outcome, unknown.retryable) == (PodOutcome.FAILED, True)
    assert [r.outcome for r in pods.evict(listed, parallelism=1).results] == [PodOutcome.EVICTED]


def test_a_pod_under_two_budgets_fails_retryably_with_the_servers_words(
    kube: FakeKubeApiServer, pods: PodOperations
) -> None:
    """eviction.go answers a pod covered by two PDBs with a bare 500: a failure, retried (a person
    may fix the budgets) until the drain's timeout decides."""
    kube.store.add(
        make_pdb("one", "ml", {"app": "web"}, max_unavailable=1),
        make_pdb("two", "ml", {"app": "web"}, max_unavailable=1),
    )
    _add_pods(
        kube, make_pod("web-1", "ml", NODE, labels={"app": "web"}, owner_kind="ReplicaSet", owner_name="web")
    )
    (result,) = pods.evict(pods.list_on_node(NODE), parallelism=1).results
    assert (result.outcome, result.status, result.retryable) == (PodOutcome.FAILED, 500, True)
    assert messages.EVICTION_MULTIPLE_BUDGETS in result.message


def test_parallel_eviction_of_a_hundred_pods(kube: FakeKubeApiServer, pods: PodOperations) -> None:
    _add_pods(
        kube,
        *(
            make_pod(f"worker-{i:03d}", "ml", NODE, owner_kind="ReplicaSet", owner_name="worker")
            for i in range(100)
        ),
    )
    listed = pods.list_on_node(NODE)
    assert len(listed) == 100
    # 100 ms per eviction: one at a time would take 10 s.
    kube.faults.add_latency(0.1, method="POST", path=r"/eviction$")

    started = time.monotonic()
    report = pods.evict(listed, parallelism=16)
    elapsed = time.monotonic() - started

    assert len(report.evicted) == 100
    assert [r.pod for r in report.results] == [p.key for p in listed]
    assert elapsed < 5.0
    assert all(_terminating_or_gone(kube, p) for p in listed)


def _terminating_or_gone(kube: FakeKubeApiServer, pod: PodView) -> bool:
    try:
        stored = kube.store.get("pods", pod.name, pod.namespace)
    except ApiError as exc:
        return exc.code == 404
    return bool(stored["metadata"].get("deletionTimestamp"))


def test_one_failing_eviction_does_not_stop_the_others(kube: FakeKubeApiServer, pods: PodOperations) -> None:
    _add_pods(
        kube, *(make_pod(f"w-{i}", "ml", NODE, owner_kind="ReplicaSet", owner_name="w") for i in range(5))
    )
    listed = pods.list_on_node(NODE)
    kube.faults.fail_next(
        1, status=500, method="POST", path=r"/pods/w-2/eviction$", message="etcd leader changed"
    )

    report = pods.evict(listed, parallelism=5)

    assert len(report.evicted) == 4
    (failed,) = report.failed
    assert failed.pod == "ml/w-2"
    assert failed.status == 500
    assert failed.retryable
    assert "etcd leader changed" in failed.message


def test_delete_with_grace_period(kube: FakeKubeApiServer, pods: PodOperations) -> None:
    _add_pods(
        kube,
        make_pod("stuck", "ml", NODE, owner_kind="ReplicaSet", owner_name="s", grace_seconds=600),
        make_pod("quick", "ml", NODE, owner_kind="ReplicaSet", owner_name="q"),
    )
    listed = pods.list_on_node(NODE)
    gone = PodView(namespace="ml", name="gone", uid="x", phase="Running", owner_kinds=())

    report = pods.delete([*listed, gone], grace_seconds=15, parallelism=4)

    assert sorted(r.pod for r in report.deleted) == ["ml/quick", "ml/stuck"]
    assert [r.pod for r in report.gone] == ["ml/gone"]
    for name in ("stuck", "quick"):
        meta = kube.store.get("pods", name, "ml")["metadata"]
        assert meta["deletionTimestamp"]
        assert meta["deletionGracePeriodSeconds"] == 15


def test_delete_rejects_negative_grace_and_zero_parallelism(pods: PodOperations) -> None:
    with pytest.raises(ValueError, match="grace"):
        pods.delete([], grace_seconds=-1, parallelism=1)
    with pytest.raises(ValueError, match="parallelism"):
        pods.evict([PodView("ml", "p", "u", "Running", ())], parallelism=0)


# -- error mapping against the fake server --------------------------------------------------------


def test_injected_500_is_unavailable(kube: FakeKubeApiServer, nodes: NodeOperations) -> None:
    _add_node(kube)
    kube.faults.fail_next(1, status=500, method="GET", path=r"/api/v1/nodes/")
    with pytest.raises(KubernetesApiUnavailableError, match="HTTP 500"):
        nodes.get(NODE)
    assert nodes.get(NODE) is not None


def test_injected_403_on_patch_is_an_api_error(kube: FakeKubeApiServer, nodes: NodeOperations) -> None:
    _add_node(kube)
    kube.faults.fail_next(
        1,
        status=403,
        method="PATCH",
        message='nodes "x" is forbidden: User "nodeheal" cannot patch resource "nodes"',
    )
    with pytest.raises(KubernetesApiError, match=r"HTTP 403 Forbidden: nodes .* cannot patch") as caught:
        nodes.cordon(NODE, execution="e", reason="r", now=NOW)
    assert not isinstance(caught.value, KubernetesApiUnavailableError)


def test_injected_timeout_is_unavailable(kube: FakeKubeApiServer) -> None:
    _add_node(kube)
    kube.faults.timeout_next(1, hold_seconds=2.0, method="GET")
    with pytest.raises(KubernetesApiUnavailableError):
        NodeOperations(_client(kube), timeout=(1.0, 0.5)).get(NODE)
