"""What one drain round does with each pod on the node: evict, delete, wait, leave, or refuse.

Pure: the pods, the drain settings, the node's readiness and the clock in, one :class:`PodPlan`
per pod out. ``drain_round`` acts on the plan and ``force_drain`` forces only what it waited for,
so the rules below are the whole drain policy, testable without an API server.

The rules, in order; the first that applies decides the pod's action:

====  ===============================================================  =======================  ==========
rule  pod                                                              class                    action
====  ===============================================================  =======================  ==========
1     controller ownerReference is an ``apps/v1`` DaemonSet            daemonSet                leave
2     mirror of a static pod                                           mirror                   leave
3     Succeeded or Failed                                              finished                 leave
4     annotated ``nodeheal.io/skip-drain: "true"``                     optedOut                 leave
5     namespace in ``drain.neverDrainNamespaces``                      neverDrainedNamespace    leave
6     Terminating, past ``drain.skipWaitForDeleteTimeoutSeconds``      stuckTerminating         leave
      after its deletionTimestamp, on a NotReady node
7     Terminating                                                      terminating              wait
8     ``emptyDir`` volume / no controller, and that class's setting    emptyDir / unmanaged     refuse
      (``drain.emptyDir`` / ``drain.unmanagedPods``) is ``refuse``
9     ``karpenter.sh/do-not-disrupt``, within                          doNotDisruptHeld         wait
      ``drain.doNotDisruptWaitSeconds`` of the drain's start
10    selected by an ``allow-completion`` rule                         allowCompletion          wait
11    ``emptyDir`` / no controller, and that class's setting is wait   emptyDir / unmanaged     wait
12    selected by a ``delete-after-timeout`` rule, at or past          deleteAfterTimeout       delete
      ``drain.deleteAfterSeconds``
13    selected by a ``delete-after-timeout`` rule                      deleteAfterTimeout       evict
14    ``emptyDir`` / no controller (the setting is ``evict``)          emptyDir / unmanaged     evict
15    everything else                                                  immediate                evict
====  ===============================================================  =======================  ==========

And over the whole node: one pod refused (rule 8) and the round moves no pod at all, whatever
the others' plans say. ``drain_round`` and ``force_drain`` look for a refusal in the whole plan
before they evict or delete anything, so a refused node loses nothing, in the first round as in
any later one. Refusal (8) comes before the holds (9, 10) because a hold would only delay it:
a held pod whose data a setting protects would be refused when its hold ended, after every
other pod on the node had been evicted, and an ``allow-completion`` pod would never be refused
at all, only forced at ``drain.timeoutSeconds`` with its data. Rules 1 to 7 come first because
those pods lose nothing to NodeHeal: it never moves them.

A pod in both data-loss classes (``emptyDir`` and no controller) is refused when either setting
says ``refuse``, waited for when either says ``wait``, and recorded under both classes; a pod a
mode decides is recorded under any data-loss class it is also in.

The classes follow the tools EKS users already run:

* kubectl drain's filters (``pkg/drain/filters.go`` in kubernetes/kubectl), in its order: pods
  already deleted (``--skip-wait-for-delete-timeout``), DaemonSet pods, mirror pods, pods with
  ``emptyDir`` data (``--delete-emptydir-data``) and pods no controller owns (``--force``).
  kubectl refuses the last two by default; NodeHeal makes each a policy (``drain.emptyDir``,
  ``drain.unmanagedPods``: evict | refuse | wait). Where NodeHeal differs from kubectl, and why,
  is tabled in docs/operations.md, "Drain policy".
* NVSentinel node-drainer's eviction modes per namespace (here also per pod label): immediate,
  allow-completion, delete-after-timeout; its system namespaces that are never drained
  (``drain.neverDrainNamespaces``), and a per-pod opt-out (:data:`SKIP_DRAIN_ANNOTATION`).
* Karpenter's ``karpenter.sh/do-not-disrupt``, held for ``drain.doNotDisruptWaitSeconds``.

Every wait a plan asks for is bounded by ``drain.timeoutSeconds``: past it, ``drain_round``
reports the drain timed out and ``drain.onTimeout`` applies (docs/architecture.md, D5).
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal.config import DrainSettings, EvictionModeRule
from nodeheal.kube_views import LiveNode, PodView

#: ``nodeheal.io/skip-drain: "true"`` on a pod: NodeHeal's drain neither evicts nor waits for it
#: (the pod goes down with the node's reboot or termination).
SKIP_DRAIN_ANNOTATION = "nodeheal.io/skip-drain"
#: Pods named per class in a drain result; the counts are whole (D17: the state stays small).
MAX_PODS_NAMED_PER_CLASS = 5


class PodAction(enum.StrEnum):
    #: Ask the Eviction API (PodDisruptionBudgets respected); the drain waits for the pod to go.
    EVICT = "evict"
    #: Delete it with ``drain.forceGraceSeconds``, past its PodDisruptionBudget.
    DELETE = "delete"
    #: Touch nothing and wait for the pod to go on its own, until ``drain.timeoutSeconds``.
    WAIT = "wait"
    #: Touch nothing and do not wait: the node goes on to its reboot or termination with it.
    LEAVE = "leave"
    #: The drain policy forbids moving this pod: the drain stops, the node stays cordoned.
    REFUSE = "refuse"


#: The actions that keep a drain from being done.
STILL_TO_GO = frozenset({PodAction.EVICT, PodAction.DELETE, PodAction.WAIT})


class PodClass(enum.StrEnum):
    DAEMON_SET = "daemonSet"
    MIRROR = "mirror"
    FINISHED = "finished"
    OPTED_OUT = "optedOut"
    NEVER_DRAINED_NAMESPACE = "neverDrainedNamespace"
    TERMINATING = "terminating"
    STUCK_TERMINATING = "stuckTerminating"
    DO_NOT_DISRUPT_HELD = "doNotDisruptHeld"
    ALLOW_COMPLETION = "allowCompletion"
    DELETE_AFTER_TIMEOUT = "deleteAfterTimeout"
    EMPTY_DIR = "emptyDir"
    UNMANAGED = "unmanaged"
    IMMEDIATE = "immediate"


#: Classes every node has plenty of and nobody needs named: counted, never listed.
_COUNTED_ONLY = frozenset({PodClass.DAEMON_SET, PodClass.MIRROR, PodClass.FINISHED, PodClass.IMMEDIATE})


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the plan needs to know of the node itself."""

    #: Ready is True. A node whose kubelet died is NotReady (False, or Unknown once the node
    #: controller stops hearing from it): nothing on it finishes terminating any more.
    ready: bool

    @classmethod
    def of(cls, node: LiveNode) -> NodeState:
        return cls(ready=node.is_ready)


@dataclass(frozen=True, slots=True)
class PodPlan:
    pod: PodView
    action: PodAction
    #: The class that decided the action first, then any data-loss class the pod is also in
    #: (an ``emptyDir`` pod in a delete-after-timeout namespace is recorded under both).
    classes: tuple[PodClass, ...]
    #: Why, in a few words, for the summary and the refusal.
    reason: str

    @property
    def pod_class(self) -> PodClass:
        return self.classes[0]


def next_poll_seconds(round_index: int, poll_seconds: int) -> int:
    """Seconds to wait after round ``round_index`` (0 for the first): 1, 2, 4, ... up to
    ``drain.pollSeconds``, so pods that stop at once release the node within seconds while a long
    drain still polls at the configured pace."""
    if round_index < 0:
        raise ValueError(f"round_index must not be negative, got {round_index}")
    if poll_seconds < 1:
        raise ValueError(f"poll_seconds must be at least 1, got {poll_seconds}")
    return min(poll_seconds, 1 << min(round_index, 30))


def namespace_matches(namespace: str, patterns: Iterable[str]) -> bool:
    """Whether ``namespace`` is one of ``patterns`` (names or shell-style patterns: ``kube-*``)."""
    return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in patterns)


def eviction_mode(pod: PodView, rules: Sequence[EvictionModeRule]) -> str:
    """The mode of the first rule that selects ``pod`` (``immediate`` when none does)."""
    for rule in rules:
        if rule.namespaces and not namespace_matches(pod.namespace, rule.namespaces):
            continue
        if any(pod.labels.get(key) != value for key, value in rule.pod_labels.items()):
            continue
        return rule.mode
    return "immediate"


def _data_loss_classes(pod: PodView) -> tuple[PodClass, ...]:
    """The classes whose pods kubectl drain refuses by default, in kubectl's order."""
    classes = []
    if pod.empty_dir_volumes:
        classes.append(PodClass.EMPTY_DIR)
    if not pod.has_controller:
        classes.append(PodClass.UNMANAGED)
    return tuple(classes)


def _class_policy(pod_class: PodClass, settings: DrainSettings) -> str:
    return settings.empty_dir if pod_class is PodClass.EMPTY_DIR else settings.unmanaged_pods


def _setting_of(pod_class: PodClass) -> str:
    return "drain.emptyDir" if pod_class is PodClass.EMPTY_DIR else "drain.unmanagedPods"


def plan_pod(
    pod: PodView, settings: DrainSettings, node_state: NodeState, now: datetime, drain_started: datetime
) -> PodPlan:
    """One pod's plan: the module docstring's rules 1 to 15, in their order. Refusing the whole
    node when one pod is refused is the caller's part (see the module docstring)."""
    elapsed = (now - drain_started).total_seconds()

    def plan(action: PodAction, reason: str, *classes: PodClass) -> PodPlan:
        return PodPlan(pod=pod, action=action, classes=classes, reason=reason)

    # Pods a drain never moves: recreated on the node, owned by the kubelet, or holding nothing.
    if pod.is_daemonset_pod:
        return plan(PodAction.LEAVE, "DaemonSet pod", PodClass.DAEMON_SET)
    if pod.is_mirror_pod:
        return plan(PodAction.LEAVE, "mirror pod of a static pod", PodClass.MIRROR)
    if pod.is_finished:
        return plan(PodAction.LEAVE, f"finished ({pod.phase})", PodClass.FINISHED)
    if pod.annotations.get(SKIP_DRAIN_ANNOTATION, "").lower() == "true":
        return plan(PodAction.LEAVE, f"annotated {SKIP_DRAIN_ANNOTATION}=true", PodClass.OPTED_OUT)
    if namespace_matches(pod.namespace, settings.never_drain_namespaces):
        return plan(
            PodAction.LEAVE,
            "namespace listed in drain.neverDrainNamespaces",
            PodClass.NEVER_DRAINED_NAMESPACE,
        )
    if pod.deletion_requested:
        skip = settings.skip_wait_for_delete_timeout_seconds
        overdue = (
            (now - pod.deletion_timestamp).total_seconds() if pod.deletion_timestamp is not None else 0.0
        )
        if not node_state.ready and skip > 0 and overdue > skip:
            return plan(
                PodAction.LEAVE,
                f"Terminating {overdue:.0f}s past its grace period on a NotReady node "
                f"(drain.skipWaitForDeleteTimeoutSeconds {skip})",
                PodClass.STUCK_TERMINATING,
            )
        return plan(PodAction.WAIT, "Terminating", PodClass.TERMINATING)
    # Rule 8 before the holds: a pod a refuse setting protects is refused from the first round,
    # so drain_round moves nothing on the node (not even the pods no setting protects).
    data_loss = _data_loss_classes(pod)
    for data_class in data_loss:
        if _class_policy(data_class, settings) == "refuse":
            others = tuple(c for c in data_loss if c is not data_class)
            return plan(PodAction.REFUSE, f"{_setting_of(data_class)} is refuse", data_class, *others)
    if pod.do_not_disrupt and elapsed < settings.do_not_disrupt_wait_seconds:
        return plan(
            PodAction.WAIT,
            f"karpenter.sh/do-not-disrupt held for drain.doNotDisruptWaitSeconds "
            f"{settings.do_not_disrupt_wait_seconds}",
            PodClass.DO_NOT_DISRUPT_HELD,
        )
    mode = eviction_mode(pod, settings.eviction_modes)
    if mode == "allow-completion":
        # Never evicted, so no data is lost by NodeHeal before the drain timeout.
        return plan(
            PodAction.WAIT,
            "allow-completion: left to finish on its own",
            PodClass.ALLOW_COMPLETION,
            *data_loss,
        )
    for data_class in data_loss:
        if _class_policy(data_class, settings) == "wait":
            others = tuple(c for c in data_loss if c is not data_class)
            return plan(PodAction.WAIT, f"{_setting_of(data_class)} is wait", data_class, *others)
    if mode == "delete-after-timeout":
        if elapsed >= settings.delete_after_seconds:
            return plan(
                PodAction.DELETE,
                f"delete-after-timeout: still there {settings.delete_after_seconds}s into the drain",
                PodClass.DELETE_AFTER_TIMEOUT,
                *data_loss,
            )
        return plan(
            PodAction.EVICT, "delete-after-timeout: evicted", PodClass.DELETE_AFTER_TIMEOUT, *data_loss
        )
    if data_loss:
        return plan(PodAction.EVICT, "evicted", *data_loss)
    return plan(PodAction.EVICT, "evicted", PodClass.IMMEDIATE)


def plan_drain(
    pods: Sequence[PodView],
    settings: DrainSettings,
    node_state: NodeState,
    now: datetime,
    drain_started: datetime,
) -> list[PodPlan]:
    """One :class:`PodPlan` per pod, in the order the pods were listed."""
    return [plan_pod(pod, settings, node_state, now, drain_started) for pod in pods]


def with_action(plans: Iterable[PodPlan], *actions: PodAction) -> list[PodPlan]:
    return [plan for plan in plans if plan.action in actions]


def class_record(plans: Iterable[PodPlan]) -> dict[str, dict[str, object]]:
    """For a drain result: per class, how many pods fell in it and (except the everyday classes)
    the first few by name, so a person sees which pods were evicted with their ``emptyDir`` data
    or left behind without reading the API server's history."""
    counts: dict[PodClass, int] = {}
    named: dict[PodClass, list[str]] = {}
    for plan in plans:
        for pod_class in plan.classes:
            counts[pod_class] = counts.get(pod_class, 0) + 1
            if pod_class in _COUNTED_ONLY:
                continue
            names = named.setdefault(pod_class, [])
            if len(names) < MAX_PODS_NAMED_PER_CLASS:
                names.append(plan.pod.key)
    record: dict[str, dict[str, object]] = {}
    for pod_class in PodClass:
        if pod_class in counts:
            entry: dict[str, object] = {"count": counts[pod_class]}
            if pod_class in named:
                entry["pods"] = named[pod_class]
            record[pod_class.value] = entry
    return record


def merged_class_record(earlier: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, dict[str, object]]:
    """The drain's classes over all its rounds so far: per class the most pods seen in it in any
    round, and the first pods named (still at most :data:`MAX_PODS_NAMED_PER_CLASS`). Pods leave
    the node as the drain goes on, so the last round alone would forget which pods were evicted."""
    merged: dict[str, dict[str, object]] = {}
    for name in [*earlier, *(key for key in now if key not in earlier)]:
        before, after = earlier.get(name) or {}, now.get(name) or {}
        entry: dict[str, object] = {"count": max(int(before.get("count", 0)), int(after.get("count", 0)))}
        pods = list(dict.fromkeys([*(before.get("pods") or []), *(after.get("pods") or [])]))
        if pods:
            entry["pods"] = pods[:MAX_PODS_NAMED_PER_CLASS]
        merged[name] = entry
    return merged


def action_counts(plans: Iterable[PodPlan]) -> Mapping[PodAction, int]:
    counts = dict.fromkeys(PodAction, 0)
    for plan in plans:
        counts[plan.action] += 1
    return counts
