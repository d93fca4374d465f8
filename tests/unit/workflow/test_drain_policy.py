"""Issue 12 section 2: the drain policy, pod by pod (nodeheal.workflow.drain_policy)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeheal.actions import Mode
from nodeheal.config import DrainSettings, EvictionModeRule, RemediationSettings
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.errors import ConfigurationError, DrainAbortedError
from nodeheal.kube.pods import DeletionReport, EvictionReport, PodOutcome, PodResult
from nodeheal.kube_event_body import EventType
from nodeheal.kube_views import PodView
from nodeheal.payload import state_bytes
from nodeheal.settings_reader import SettingsReader
from nodeheal.sim.apiserver.objects import make_pod
from nodeheal.workflow import mutations, step_events
from nodeheal.workflow.drain_policy import (
    MAX_PODS_NAMED_PER_CLASS,
    SKIP_DRAIN_ANNOTATION,
    NodeState,
    PodAction,
    PodClass,
    class_record,
    eviction_mode,
    merged_class_record,
    namespace_matches,
    next_poll_seconds,
    plan_drain,
    plan_pod,
)
from nodeheal.workflow.ports import KubeAccess
from tests.unit.workflow.fakes import NOW, FakeNodes, gpu_problem, live_node
from tests.unit.workflow.test_safety_defects import admitted_state, cordoned, held_ledger

STARTED = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
READY = NodeState(ready=True)
NOT_READY = NodeState(ready=False)


def pod(
    name: str = "trainer-0",
    namespace: str = "training",
    *,
    owner_kind: str | None = "ReplicaSet",
    empty_dir: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    deletion_timestamp: datetime | None = None,
    mirror: bool = False,
) -> PodView:
    """A pod as the API server serves it, through the same parser the drain uses."""
    raw = make_pod(
        name,
        namespace,
        "gpu-a",
        owner_kind=owner_kind,
        labels=labels,
        annotations=annotations,
        phase=phase,
        mirror=mirror,
    )
    if empty_dir:
        raw["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    if deletion_timestamp is not None:
        raw["metadata"]["deletionTimestamp"] = deletion_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return PodView.from_api(raw)


def drain(**overrides: Any) -> DrainSettings:
    return DrainSettings.read(SettingsReader(overrides, "drain"))


def planned(
    target: PodView,
    settings: DrainSettings | None = None,
    *,
    node: NodeState = READY,
    after: float = 0.0,
) -> tuple[PodAction, tuple[PodClass, ...]]:
    plan = plan_pod(target, settings or DrainSettings(), node, STARTED + timedelta(seconds=after), STARTED)
    return plan.action, plan.classes


# -- the pod view the plan reads ---------------------------------------------------------------


def test_the_pod_view_reads_controller_empty_dir_labels_and_deletion_time() -> None:
    raw = make_pod("p", "ml", "gpu-a", owner_kind="Job", labels={"app": "x"})
    raw["spec"]["volumes"] = [
        {"name": "cache", "emptyDir": {"medium": "Memory"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
        {"name": "tmp", "emptyDir": {}},
    ]
    raw["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:30Z"
    view = PodView.from_api(raw)
    assert view.has_controller and view.empty_dir_volumes == ("cache", "tmp")
    assert view.labels == {"app": "x"}
    assert view.deletion_requested and view.deletion_timestamp == datetime(
        2026, 11, 21, 10, 0, 30, tzinfo=UTC
    )

    # An owner that is not the controller (kubectl: metav1.GetControllerOf) leaves the pod unmanaged.
    raw["metadata"]["ownerReferences"][0]["controller"] = False
    assert not PodView.from_api(raw).has_controller
    assert not PodView.from_api(make_pod("bare", "ml", "gpu-a")).has_controller


# -- classes and actions -----------------------------------------------------------------------


def test_an_ordinary_managed_pod_is_evicted_immediately() -> None:
    assert planned(pod()) == (PodAction.EVICT, (PodClass.IMMEDIATE,))


@pytest.mark.parametrize(
    ("target", "pod_class"),
    [
        (pod(owner_kind="DaemonSet"), PodClass.DAEMON_SET),
        (pod(mirror=True, owner_kind=None), PodClass.MIRROR),
        (pod(phase="Succeeded"), PodClass.FINISHED),
        (pod(phase="Failed"), PodClass.FINISHED),
    ],
)
def test_pods_no_drain_moves_are_left(target: PodView, pod_class: PodClass) -> None:
    assert planned(target) == (PodAction.LEAVE, (pod_class,))


@pytest.mark.parametrize(
    ("policy", "action"), [("evict", PodAction.EVICT), ("refuse", PodAction.REFUSE), ("wait", PodAction.WAIT)]
)
def test_empty_dir_pods_follow_drain_empty_dir(policy: str, action: PodAction) -> None:
    assert planned(pod(empty_dir=True), drain(emptyDir=policy)) == (action, (PodClass.EMPTY_DIR,))
    # The other class's policy does not apply to them.
    assert planned(pod(empty_dir=True), drain(unmanagedPods="refuse"))[0] is PodAction.EVICT


@pytest.mark.parametrize(
    ("policy", "action"), [("evict", PodAction.EVICT), ("refuse", PodAction.REFUSE), ("wait", PodAction.WAIT)]
)
def test_unmanaged_pods_follow_drain_unmanaged_pods(policy: str, action: PodAction) -> None:
    assert planned(pod(owner_kind=None), drain(unmanagedPods=policy)) == (action, (PodClass.UNMANAGED,))
    assert planned(pod(owner_kind=None), drain(emptyDir="refuse"))[0] is PodAction.EVICT


def test_a_pod_in_both_data_loss_classes_is_refused_if_either_refuses_and_recorded_in_both() -> None:
    both = pod(owner_kind=None, empty_dir=True)
    assert planned(both) == (PodAction.EVICT, (PodClass.EMPTY_DIR, PodClass.UNMANAGED))
    assert planned(both, drain(unmanagedPods="refuse")) == (
        PodAction.REFUSE,
        (PodClass.UNMANAGED, PodClass.EMPTY_DIR),
    )
    assert planned(both, drain(emptyDir="wait", unmanagedPods="refuse"))[0] is PodAction.REFUSE
    assert planned(both, drain(emptyDir="wait"))[0] is PodAction.WAIT


def test_the_defaults_evict_both_data_loss_classes_on_a_dead_gpu() -> None:
    settings = DrainSettings()
    assert (settings.empty_dir, settings.unmanaged_pods) == ("evict", "evict")
    assert settings.never_drain_namespaces == ("kube-system",)
    assert (settings.delete_after_seconds, settings.skip_wait_for_delete_timeout_seconds) == (600, 60)


def test_the_opt_out_annotation_leaves_the_pod_whatever_its_class() -> None:
    opted = pod(owner_kind=None, empty_dir=True, annotations={SKIP_DRAIN_ANNOTATION: "true"})
    assert planned(opted, drain(emptyDir="refuse")) == (PodAction.LEAVE, (PodClass.OPTED_OUT,))
    assert planned(pod(annotations={SKIP_DRAIN_ANNOTATION: "True"}))[0] is PodAction.LEAVE
    # Any other value is no opt-out.
    assert planned(pod(annotations={SKIP_DRAIN_ANNOTATION: "false"}))[0] is PodAction.EVICT


def test_never_drained_namespaces_are_left_by_name_or_pattern() -> None:
    assert planned(pod(namespace="kube-system", owner_kind=None)) == (
        PodAction.LEAVE,
        (PodClass.NEVER_DRAINED_NAMESPACE,),
    )
    settings = drain(neverDrainNamespaces=["gpu-operator", "*-system", "monitoring-[ab]"])
    for namespace in ("gpu-operator", "nvsentinel-system", "monitoring-a"):
        assert planned(pod(namespace=namespace), settings)[0] is PodAction.LEAVE, namespace
    # Patterns match whole names: "*-system" is not "kube-system-extra".
    for namespace in ("kube-system-extra", "gpu-operator-2", "monitoring-c", "training"):
        assert planned(pod(namespace=namespace), settings)[0] is PodAction.EVICT, namespace
    # An empty list drains kube-system like any other namespace.
    assert planned(pod(namespace="kube-system"), drain(neverDrainNamespaces=[]))[0] is PodAction.EVICT


def test_namespace_patterns_match_whole_names() -> None:
    assert namespace_matches("kube-system", ["kube-*"])
    assert not namespace_matches("my-kube-system", ["kube-*"])
    assert namespace_matches("team-a", ["team-?"]) and not namespace_matches("team-ab", ["team-?"])
    assert not namespace_matches("training", [])


def test_terminating_pods_are_waited_for_on_a_ready_node_however_long() -> None:
    long_ago = STARTED - timedelta(hours=1)
    assert planned(pod(deletion_timestamp=long_ago)) == (PodAction.WAIT, (PodClass.TERMINATING,))


def test_a_pod_stuck_terminating_on_a_not_ready_node_is_no_longer_waited_for() -> None:
    settings = drain(skipWaitForDeleteTimeoutSeconds=60)
    grace_over = STARTED  # deletionTimestamp: the end of the pod's grace period
    terminating = pod(deletion_timestamp=grace_over)
    # Within the bound (kubectl: strictly more than N seconds past deletionTimestamp), still waited for.
    assert planned(terminating, settings, node=NOT_READY, after=60) == (
        PodAction.WAIT,
        (PodClass.TERMINATING,),
    )
    assert planned(terminating, settings, node=NOT_READY, after=61) == (
        PodAction.LEAVE,
        (PodClass.STUCK_TERMINATING,),
    )
    # A grace period not yet over is no sign of a dead kubelet.
    in_grace = pod(deletion_timestamp=STARTED + timedelta(minutes=30))
    assert planned(in_grace, settings, node=NOT_READY, after=120)[0] is PodAction.WAIT
    # 0 turns it off: the drain waits until its timeout, as before.
    assert planned(terminating, drain(skipWaitForDeleteTimeoutSeconds=0), node=NOT_READY, after=3600)[0] is (
        PodAction.WAIT
    )


def test_do_not_disrupt_pods_are_held_then_evicted() -> None:
    held = pod(annotations={"karpenter.sh/do-not-disrupt": "true"})
    settings = drain(doNotDisruptWaitSeconds=300)
    assert planned(held, settings, after=299) == (PodAction.WAIT, (PodClass.DO_NOT_DISRUPT_HELD,))
    assert planned(held, settings, after=300) == (PodAction.EVICT, (PodClass.IMMEDIATE,))


def test_allow_completion_pods_are_waited_for_not_evicted() -> None:
    settings = drain(evictionModes=[{"mode": "allow-completion", "namespaces": ["batch"]}], emptyDir="wait")
    assert planned(pod(namespace="batch"), settings, after=10_000) == (
        PodAction.WAIT,
        (PodClass.ALLOW_COMPLETION,),
    )
    # A data-loss class set to wait is recorded beside the mode that decided.
    assert planned(pod(namespace="batch", empty_dir=True), settings) == (
        PodAction.WAIT,
        (PodClass.ALLOW_COMPLETION, PodClass.EMPTY_DIR),
    )
    assert planned(pod(namespace="training"), settings)[0] is PodAction.EVICT


def test_delete_after_timeout_pods_are_evicted_then_deleted() -> None:
    settings = drain(
        timeoutSeconds=900,
        deleteAfterSeconds=120,
        evictionModes=[{"mode": "delete-after-timeout", "podLabels": {"app": "inference"}}],
    )
    serving = pod(labels={"app": "inference", "tier": "gpu"})
    assert planned(serving, settings, after=119) == (PodAction.EVICT, (PodClass.DELETE_AFTER_TIMEOUT,))
    assert planned(serving, settings, after=120) == (PodAction.DELETE, (PodClass.DELETE_AFTER_TIMEOUT,))
    assert planned(pod(labels={"app": "trainer"}), settings, after=500)[0] is PodAction.EVICT
    # Data-loss policies still apply before a pod is evicted in this mode.
    assert (
        planned(
            pod(labels={"app": "inference"}, empty_dir=True),
            drain(emptyDir="refuse", evictionModes=[{"mode": "delete-after-timeout"}]),
        )[0]
        is PodAction.REFUSE
    )


def test_the_first_matching_rule_decides_the_mode() -> None:
    rules = (
        EvictionModeRule("allow-completion", namespaces=("batch-*",), pod_labels={"app": "etl"}),
        EvictionModeRule("delete-after-timeout", namespaces=("batch-*",)),
        EvictionModeRule("immediate", pod_labels={"app": "etl"}),
        EvictionModeRule("allow-completion"),
    )
    assert eviction_mode(pod(namespace="batch-1", labels={"app": "etl"}), rules) == "allow-completion"
    assert eviction_mode(pod(namespace="batch-1", labels={"app": "web"}), rules) == "delete-after-timeout"
    assert eviction_mode(pod(namespace="web", labels={"app": "etl"}), rules) == "immediate"
    assert eviction_mode(pod(namespace="web"), rules) == "allow-completion"
    assert eviction_mode(pod(), ()) == "immediate"


def test_plan_drain_plans_every_pod_in_order_and_records_classes_bounded() -> None:
    pods = [pod(f"bare-{'x' * 240}-{i}", owner_kind=None) for i in range(40)]
    pods += [pod("ds", owner_kind="DaemonSet"), pod("web-0"), pod("sys", namespace="kube-system")]
    plans = plan_drain(pods, DrainSettings(), READY, STARTED, STARTED)
    assert [plan.pod.name for plan in plans] == [p.name for p in pods]
    record = class_record(plans)
    assert record["unmanaged"]["count"] == 40
    assert len(record["unmanaged"]["pods"]) == MAX_PODS_NAMED_PER_CLASS  # type: ignore[arg-type]
    assert record["daemonSet"] == {"count": 1} and record["immediate"] == {"count": 1}
    assert record["neverDrainedNamespace"] == {"count": 1, "pods": ["kube-system/sys"]}
    assert state_bytes(record) < 4 * 1024


def test_the_drain_remembers_every_class_over_its_rounds() -> None:
    first = {"emptyDir": {"count": 2, "pods": ["ml/a", "ml/b"]}, "immediate": {"count": 3}}
    later = {"terminating": {"count": 1, "pods": ["ml/a"]}, "emptyDir": {"count": 1, "pods": ["ml/c"]}}
    merged = merged_class_record(first, later)
    assert merged == {
        "emptyDir": {"count": 2, "pods": ["ml/a", "ml/b", "ml/c"]},
        "immediate": {"count": 3},
        "terminating": {"count": 1, "pods": ["ml/a"]},
    }
    many = {"unmanaged": {"count": 9, "pods": [f"ml/p{i}" for i in range(5)]}}
    more = {"unmanaged": {"count": 4, "pods": [f"ml/q{i}" for i in range(4)]}}
    assert merged_class_record(many, more)["unmanaged"] == many["unmanaged"]  # still at most five named


# -- adaptive polling --------------------------------------------------------------------------


def test_polling_starts_at_one_second_and_doubles_up_to_the_configured_poll() -> None:
    assert [next_poll_seconds(i, 10) for i in range(6)] == [1, 2, 4, 8, 10, 10]
    assert [next_poll_seconds(i, 1) for i in range(3)] == [1, 1, 1]
    assert next_poll_seconds(10_000, 3600) == 3600
    with pytest.raises(ValueError, match="round_index"):
        next_poll_seconds(-1, 10)
    with pytest.raises(ValueError, match="poll_seconds"):
        next_poll_seconds(0, 0)


# -- settings ----------------------------------------------------------------------------------


def parse(**drain_settings: Any) -> NodeHealConfig:
    return NodeHealConfig.from_cdk_context({"clusters": ["training-on-eks"], "drain": drain_settings})


@pytest.mark.parametrize(
    ("drain_settings", "match"),
    [
        ({"emptyDir": "keep"}, "nodeheal.drain.emptyDir must be one of evict, refuse, wait; got 'keep'"),
        ({"unmanagedPods": "force"}, "nodeheal.drain.unmanagedPods must be one of evict, refuse, wait"),
        (
            {"neverDrainNamespaces": ["Kube System"]},
            re.escape("nodeheal.drain.neverDrainNamespaces has ['Kube System']"),
        ),
        ({"neverDrainNamespaces": "kube-system"}, "must be a list of non-empty strings"),
        (
            {"evictionModes": [{"mode": "gentle"}]},
            re.escape("nodeheal.drain.evictionModes[0].mode must be one of"),
        ),
        ({"evictionModes": [{}]}, re.escape("nodeheal.drain.evictionModes[0].mode is required")),
        (
            {"evictionModes": [{"mode": "immediate", "namespace": ["a"]}]},
            re.escape("nodeheal.drain.evictionModes[0].namespace (did you mean 'namespaces'?)"),
        ),
        (
            {"evictionModes": [{"mode": "immediate", "podLabels": {"app": 3}}]},
            re.escape("nodeheal.drain.evictionModes[0].podLabels maps label keys to string values"),
        ),
        (
            {"evictionModes": [{"mode": "delete-after-timeout"}], "deleteAfterSeconds": 900},
            re.escape(
                "nodeheal.drain.deleteAfterSeconds (900) must be shorter than nodeheal.drain.timeoutSeconds "
                "(900) when a"
            ),
        ),
        ({"skipWaitForDeleteTimeoutSeconds": -1}, "skipWaitForDeleteTimeoutSeconds must be >= 0"),
    ],
)
def test_drain_policy_settings_are_checked_with_the_path(drain_settings: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        parse(**drain_settings)


def test_delete_after_seconds_is_only_checked_when_a_rule_deletes_after_timeout() -> None:
    # A short drain with no such rule keeps the default 600 without an error.
    assert parse(timeoutSeconds=120, doNotDisruptWaitSeconds=60).remediation.drain.delete_after_seconds == 600
    rules = [{"mode": "delete-after-timeout", "namespaces": ["serving"]}]
    settings = parse(timeoutSeconds=900, deleteAfterSeconds=300, evictionModes=rules).remediation.drain
    assert settings.eviction_modes == (EvictionModeRule("delete-after-timeout", namespaces=("serving",)),)
    # The settings travel in the execution's input: they read back the same.
    assert DrainSettings.read(SettingsReader(settings.to_json(), "drain")) == settings


# -- the steps over the plan (in-memory ports) -------------------------------------------------


@dataclass
class PdbBlockedPods:
    """The node's pods, every eviction refused by a PodDisruptionBudget; deletions accepted."""

    pods: list[PodView]
    evictions: list[str] = field(default_factory=list)
    deletions: list[str] = field(default_factory=list)

    def list_on_node(self, node_name: str) -> list[PodView]:
        return list(self.pods)

    def evict(self, pods: Sequence[PodView], *, parallelism: int) -> EvictionReport:
        self.evictions += [p.key for p in pods]
        return EvictionReport(tuple(PodResult(p.key, p.uid, PodOutcome.BLOCKED, 429, "PDB") for p in pods))

    def delete(self, pods: Sequence[PodView], *, grace_seconds: int, parallelism: int) -> DeletionReport:
        self.deletions += [p.key for p in pods]
        return DeletionReport(tuple(PodResult(p.key, p.uid, PodOutcome.DELETED, 200) for p in pods))


def test_force_drain_deletes_only_what_the_plan_still_moved_or_waited_for() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    on_node = [
        pod("trainer-0", owner_kind="Job"),  # blocked by its PDB until the timeout: forced
        pod("nightly-0", "batch", owner_kind="Job"),  # allow-completion, never finished: forced
        pod("coredns-0", "kube-system"),  # never drained
        pod("pinned-0", annotations={SKIP_DRAIN_ANNOTATION: "true"}),  # opted out
        pod("agent-0", owner_kind="DaemonSet"),
    ]
    settings = {"evictionModes": [{"mode": "allow-completion", "namespaces": ["batch"]}]}

    remediation = RemediationSettings.from_json({"drain": settings})
    state = admitted_state(
        node,
        settings=remediation,
        extra={
            "drain": {"startedAt": "2026-11-21T09:40:00.000Z", "rounds": 30, "done": False, "timedOut": True}
        },
    )
    pods = PdbBlockedPods(on_node)

    result = mutations.force_drain(
        state, KubeAccess(FakeNodes({"gpu-a": node}), pods), held_ledger(), NOW, mode=Mode.FULL
    )

    assert pods.deletions == ["training/trainer-0", "batch/nightly-0"]
    assert result["forced"] == 2 and result["done"] is True


def test_a_refusing_round_evicts_nothing_and_says_which_pods_and_why() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    state = admitted_state(node, settings=RemediationSettings.from_json({"drain": {"emptyDir": "refuse"}}))
    pods = PdbBlockedPods([pod("trainer-0"), pod("cache-0", empty_dir=True)])

    result = mutations.drain_round(
        state, KubeAccess(FakeNodes({"gpu-a": node}), pods), held_ledger(), NOW, mode=Mode.FULL
    )

    assert pods.evictions == [] and pods.deletions == []
    assert result["refused"] is True and result["done"] is False and result["timedOut"] is False
    assert "training/cache-0 (drain.emptyDir is refuse)" in result["summary"]
    assert result["classes"]["emptyDir"] == {"count": 1, "pods": ["training/cache-0"]}
    assert result["waitSeconds"] == 1


def test_each_round_returns_its_wait_one_two_four_seconds_up_to_the_poll() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    pods = PdbBlockedPods([pod("trainer-0")])  # blocked by its PDB every round
    kube = KubeAccess(FakeNodes({"gpu-a": node}), pods)
    waits, previous = [], None
    for _ in range(6):
        state = admitted_state(node, extra={"drain": previous} if previous else None)
        previous = mutations.drain_round(state, kube, held_ledger(), NOW, mode=Mode.FULL)
        waits.append(previous["waitSeconds"])
    assert waits == [1, 2, 4, 8, 10, 10]


def test_a_refusal_is_told_on_the_node_as_a_warning() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    result = {
        "rounds": 1,
        "summary": "drain of gpu-a refused: 1 pod(s) ...: training/cache-0 (drain.emptyDir is refuse)",
    }

    (told,) = step_events.drain_refused(admitted_state(node), result, NOW)

    assert (told.reason, told.type, told.action) == ("DrainRefused", EventType.WARNING, "Drain")
    assert told.regarding.name == "gpu-a"
    assert "training/cache-0 (drain.emptyDir is refuse)" in told.note and "stays cordoned" in told.note


# -- issue 24 point 3: refuse is decided over the whole node before any hold -----------------------

DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}
BATCH_ALLOW_COMPLETION = [{"mode": "allow-completion", "namespaces": ["batch"]}]


@pytest.mark.parametrize(
    ("settings", "held", "refused_class"),
    [
        (
            {"emptyDir": "refuse"},
            pod("ckpt-0", empty_dir=True, annotations=DO_NOT_DISRUPT),
            PodClass.EMPTY_DIR,
        ),
        (
            {"unmanagedPods": "refuse"},
            pod("debug-0", owner_kind=None, annotations=DO_NOT_DISRUPT),
            PodClass.UNMANAGED,
        ),
        (
            {"emptyDir": "refuse", "evictionModes": BATCH_ALLOW_COMPLETION},
            pod("nightly-0", "batch", owner_kind="Job", empty_dir=True),
            PodClass.EMPTY_DIR,
        ),
        (
            {"unmanagedPods": "refuse", "evictionModes": BATCH_ALLOW_COMPLETION},
            pod("nightly-0", "batch", owner_kind=None),
            PodClass.UNMANAGED,
        ),
    ],
    ids=[
        "emptyDir-doNotDisrupt",
        "unmanaged-doNotDisrupt",
        "emptyDir-allowCompletion",
        "unmanaged-allowCompletion",
    ],
)
def test_a_refused_pod_is_refused_from_the_first_round_whatever_holds_it(
    settings: dict[str, Any], held: PodView, refused_class: PodClass
) -> None:
    drain_settings = drain(doNotDisruptWaitSeconds=300, **settings)
    # Refused at once, not after the hold, and still refused when the drain times out.
    for after in (0, 299, 300, 900, 10_000):
        action, classes = planned(held, drain_settings, after=after)
        assert (action, classes[0]) == (PodAction.REFUSE, refused_class), after


def test_the_holds_still_apply_to_pods_no_refuse_setting_refuses() -> None:
    settings = drain(emptyDir="refuse", evictionModes=BATCH_ALLOW_COMPLETION)
    assert planned(pod(annotations=DO_NOT_DISRUPT), settings) == (
        PodAction.WAIT,
        (PodClass.DO_NOT_DISRUPT_HELD,),
    )
    assert planned(pod("nightly-0", "batch", owner_kind="Job"), settings) == (
        PodAction.WAIT,
        (PodClass.ALLOW_COMPLETION,),
    )
    # A pod the drain never moves is never refused: it loses nothing to NodeHeal.
    assert planned(pod(empty_dir=True, owner_kind="DaemonSet"), settings)[0] is PodAction.LEAVE
    assert planned(pod("ckpt", "kube-system", empty_dir=True), settings)[0] is PodAction.LEAVE


def test_a_do_not_disrupt_empty_dir_pod_under_refuse_stops_the_first_round_before_any_eviction() -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    remediation = RemediationSettings.from_json({"drain": {"emptyDir": "refuse"}})
    state = admitted_state(node, settings=remediation)
    pods = PdbBlockedPods(
        [pod("trainer-0"), pod("ckpt-0", empty_dir=True, annotations=DO_NOT_DISRUPT), pod("trainer-1")]
    )

    result = mutations.drain_round(
        state, KubeAccess(FakeNodes({"gpu-a": node}), pods), held_ledger(), NOW, mode=Mode.FULL
    )

    assert pods.evictions == [] and pods.deletions == []
    assert result["refused"] is True and result["rounds"] == 1
    assert "training/ckpt-0 (drain.emptyDir is refuse)" in result["summary"]


@pytest.mark.parametrize(
    ("settings", "held"),
    [
        (
            {"emptyDir": "refuse", "evictionModes": BATCH_ALLOW_COMPLETION},
            pod("nightly-0", "batch", owner_kind="Job", empty_dir=True),
        ),
        ({"unmanagedPods": "refuse"}, pod("debug-0", owner_kind=None, annotations=DO_NOT_DISRUPT)),
    ],
    ids=["emptyDir-allowCompletion", "unmanaged-doNotDisrupt"],
)
def test_a_held_pod_under_refuse_is_never_waited_for_nor_forced(
    settings: dict[str, Any], held: PodView
) -> None:
    node = cordoned(live_node(condition=gpu_problem()))
    remediation = RemediationSettings.from_json({"drain": {**settings, "onTimeout": "force"}})
    pods = PdbBlockedPods([pod("trainer-0"), held])

    first = mutations.drain_round(
        admitted_state(node, settings=remediation),
        KubeAccess(FakeNodes({"gpu-a": node}), pods),
        held_ledger(),
        NOW,
        mode=Mode.FULL,
    )
    assert first["refused"] is True and first["done"] is False
    # Even if the state machine reached the force step at drain.timeoutSeconds, nothing is deleted.
    timed_out = admitted_state(
        node,
        settings=remediation,
        extra={
            "drain": {"startedAt": "2026-11-21T09:40:00.000Z", "rounds": 30, "done": False, "timedOut": True}
        },
    )
    with pytest.raises(DrainAbortedError, match=held.key):
        mutations.force_drain(
            timed_out, KubeAccess(FakeNodes({"gpu-a": node}), pods), held_ledger(), NOW, mode=Mode.FULL
        )
    assert pods.evictions == [] and pods.deletions == []


# -- DaemonSet pods as kubectl drain counts them ---------------------------------------------------


def owned_by(*owners: dict[str, Any]) -> PodView:
    raw = make_pod("p-0", "training", "gpu-a")
    raw["metadata"]["ownerReferences"] = [
        {"name": "owner", "uid": f"uid-{index}", **owner} for index, owner in enumerate(owners)
    ]
    return PodView.from_api(raw)


def test_a_daemonset_pod_is_one_whose_controller_is_an_apps_v1_daemonset() -> None:
    # kubectl pkg/drain/filters.go, daemonSetFilter: metav1.GetControllerOf, then isControllerRefDaemonSet.
    daemon_set = {"apiVersion": "apps/v1", "kind": "DaemonSet"}
    assert owned_by({**daemon_set, "controller": True}).is_daemonset_pod
    # An owner reference that is not the controller does not make it one.
    not_controller = owned_by({**daemon_set, "controller": False})
    assert not not_controller.is_daemonset_pod and not_controller.needs_eviction
    assert not owned_by(daemon_set).is_daemonset_pod
    # A DaemonSet owner beside another controller: the controller decides.
    beside = owned_by(daemon_set, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True})
    assert not beside.is_daemonset_pod
    # The first controller reference is the controller (GetControllerOf), matched on kind and apiVersion.
    assert not owned_by(
        {"apiVersion": "extensions/v1beta1", "kind": "DaemonSet", "controller": True}
    ).is_daemonset_pod
    assert not owned_by({"apiVersion": "apps/v1", "kind": "Daemonset", "controller": True}).is_daemonset_pod
    assert not owned_by(
        {"apiVersion": "example.com/v1", "kind": "DaemonSet", "controller": True}
    ).is_daemonset_pod


def test_a_pod_with_a_non_controller_daemonset_owner_is_drained_as_the_pod_it_is() -> None:
    bare = owned_by({"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": False})
    assert planned(bare) == (PodAction.EVICT, (PodClass.UNMANAGED,))
    assert planned(bare, drain(unmanagedPods="refuse")) == (PodAction.REFUSE, (PodClass.UNMANAGED,))
