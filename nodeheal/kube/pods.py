"""Pod operations for the drain: list a node's pods, evict them, delete them.

Evictions go through ``policy/v1`` Eviction so the API server enforces PodDisruptionBudgets. Each
pod is one request, sent in parallel (bounded) because a p5 node can host dozens of pods and a
drain round must fit in a short Lambda. Every pod gets its own outcome: one pod's failure never
stops the others, and nothing is swallowed — a failure carries the HTTP status and the API server's
message into the report, and the drain loop decides what to do with it on its next round. A round
that runs into the invocation's deadline stops starting requests and reports the pods it did not
get to as ``not-reached``; the drain loop asks for them next round.

Every eviction and deletion names the pod's uid as a precondition. StatefulSet pods keep their
names when recreated, so without it a retried eviction could hit the healthy replacement pod that
was just scheduled on another node.

Answers are told apart by status, reason and the Status ``details``, never by message wording:
429 with a ``DisruptionBudget`` cause is a PodDisruptionBudget's refusal (including "still being
processed", sent with retry-after 10 s while the disruption controller catches up); another 429
is the API server shedding load. A 409 Conflict is a precondition that failed, and only a look at
the pod says which: gone or replaced by a namesake (the uid no longer names it), or, on an
eviction, the server's own resourceVersion check losing a race with a change to the very pod we
meant, which the next round asks again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from nodeheal.deadline import MIN_CALL_SECONDS, Deadline
from nodeheal.errors import DeadlineExceededError, KubernetesApiError, KubernetesApiUnavailableError
from nodeheal.kube.api_errors import ApiStatus, is_retryable_status
from nodeheal.kube.client import (
    ApiOperations,
    JsonResponse,
    expect_success,
)
from nodeheal.kube_views import PodView

#: policyv1.DisruptionBudgetCause: the cause the eviction subresource gives a PDB's 429.
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"


class PodOutcome(enum.StrEnum):
    #: Eviction accepted (201) / deletion accepted (200, 202): the pod is terminating.
    EVICTED = "evicted"
    DELETED = "deleted"
    #: 429 from the eviction subresource with a DisruptionBudget cause: a PodDisruptionBudget
    #: allows no disruption right now (or is still being processed by the server).
    BLOCKED = "blocked"
    #: 404, or the uid precondition failed: the pod we meant no longer exists.
    GONE = "gone"
    #: Anything else (admission webhook refusal, RBAC, server error, timeout).
    FAILED = "failed"
    #: Not sent: the invocation's deadline came first. Nothing happened to the pod; the next
    #: round (or the state machine's retry) asks again.
    NOT_REACHED = "not-reached"


@dataclass(frozen=True, slots=True)
class PodResult:
    pod: str
    """``namespace/name``."""
    uid: str
    outcome: PodOutcome
    #: HTTP status of the answer; None when no answer came (timeout, connection error).
    status: int | None = None
    #: The API server's message (the PDB explanation for BLOCKED), or the transport error.
    message: str = ""
    #: A FAILED answer whose status alone would be final but that asking again can change: a
    #: Conflict on the pod we meant, still there with its uid (the server raced a change to it).
    transient: bool = False

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (PDB, overload, no answer, a race)."""
        if self.outcome in (PodOutcome.BLOCKED, PodOutcome.NOT_REACHED):
            return True
        if self.outcome != PodOutcome.FAILED:
            return False
        return self.transient or self.status is None or is_retryable_status(self.status)

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "outcome": self.outcome.value,
            "status": self.status,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class _Report:
    results: tuple[PodResult, ...] = field(default_factory=tuple)

    def _with(self, outcome: PodOutcome) -> tuple[PodResult, ...]:
        return tuple(r for r in self.results if r.outcome == outcome)

    @property
    def gone(self) -> tuple[PodResult, ...]:
        return self._with(PodOutcome.GONE)

    @property
    def failed(self) -> tuple[PodResult, ...]:
        return self._with(PodOutcome.FAILED)

    @property
    def not_reached(self) -> tuple[PodResult, ...]:
        """Pods no request was sent for, because the deadline was near."""
        return self._with(PodOutcome.NOT_REACHED)

    def to_json(self) -> dict[str, Any]:
        counts = {outcome.value: 0 for outcome in PodOutcome}
        for result in self.results:
            counts[result.outcome.value] += 1
        return {"counts": counts, "results": [r.to_json() for r in self.results]}


@dataclass(frozen=True, slots=True)
class EvictionReport(_Report):
    @property
    def evicted(self) -> tuple[PodResult, ...]:
        return self._with(PodOutcome.EVICTED)

    @property
    def blocked(self) -> tuple[PodResult, ...]:
        return self._with(PodOutcome.BLOCKED)


@dataclass(frozen=True, slots=True)
class DeletionReport(_Report):
    @property
    def deleted(self) -> tuple[PodResult, ...]:
        return self._with(PodOutcome.DELETED)


def _pod_path(pod: PodView) -> str:
    return f"/api/v1/namespaces/{quote(pod.namespace, safe='')}/pods/{quote(pod.name, safe='')}"


def _fan_out(
    pods: Sequence[PodView],
    parallelism: int,
    call: Callable[[PodView], PodResult],
    deadline: Deadline,
) -> list[PodResult]:
    """``call`` for each pod, ``parallelism`` at a time; no new request starts once the deadline
    leaves less than :data:`~nodeheal.deadline.MIN_CALL_SECONDS`, and those pods are reported
    :attr:`PodOutcome.NOT_REACHED` rather than dropped."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be at least 1, got {parallelism}")

    def call_in_time(pod: PodView) -> PodResult:
        if not deadline.allows(MIN_CALL_SECONDS):
            return PodResult(
                pod=pod.key,
                uid=pod.uid,
                outcome=PodOutcome.NOT_REACHED,
                message=f"not sent: {max(deadline.remaining(), 0.0):.1f}s of this invocation's time left",
            )
        return call(pod)

    if not pods:
        return []
    if parallelism == 1 or len(pods) == 1:
        return [call_in_time(pod) for pod in pods]
    with ThreadPoolExecutor(
        max_workers=min(parallelism, len(pods)), thread_name_prefix="nodeheal-pod"
    ) as pool:
        # map keeps the input order, so reports read in the order the pods were listed.
        return list(pool.map(call_in_time, pods))


class PodOperations(ApiOperations):
    def list_on_node(self, node_name: str) -> list[PodView]:
        """Every pod bound to the node, in all namespaces (finished and DaemonSet pods included;
        :attr:`PodView.needs_eviction` says which ones a drain must move), as one consistent
        list (see ``ApiOperations._list``)."""
        items = self._list(
            "/api/v1/pods",
            action=f"list pods on node {node_name}",
            query=[("fieldSelector", f"spec.nodeName={node_name}")],
        )
        return [PodView.from_api(item) for item in items]

    # -- eviction --------------------------------------------------------------------------------

    def evict(self, pods: Sequence[PodView], *, parallelism: int) -> EvictionReport:
        return EvictionReport(results=tuple(_fan_out(pods, parallelism, self._evict_one, self._deadline)))

    def _evict_one(self, pod: PodView) -> PodResult:
        action = f"evict pod {pod.key}"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}} if pod.uid else {},
        }
        try:
            response = self._request("POST", f"{_pod_path(pod)}/eviction", action=action, body=body)
        except (KubernetesApiUnavailableError, KubernetesApiError, DeadlineExceededError) as exc:
            return PodResult(pod=pod.key, uid=pod.uid, outcome=PodOutcome.FAILED, message=str(exc))
        status = response.api_status
        if response.status == 429 and DISRUPTION_BUDGET_CAUSE in status.cause_reasons:
            return PodResult(
                pod=pod.key,
                uid=pod.uid,
                outcome=PodOutcome.BLOCKED,
                status=429,
                message=status.explanation,
            )
        return self._result(pod, response, action, success=PodOutcome.EVICTED)

    # -- deletion --------------------------------------------------------------------------------

    def delete(self, pods: Sequence[PodView], *, grace_seconds: int, parallelism: int) -> DeletionReport:
        """Delete pods directly (PDBs are not consulted): the drain policy's ``force`` step."""
        if grace_seconds < 0:
            raise ValueError(f"grace_seconds must not be negative, got {grace_seconds}")

        def delete_one(pod: PodView) -> PodResult:
            return self._delete_one(pod, grace_seconds)

        return DeletionReport(results=tuple(_fan_out(pods, parallelism, delete_one, self._deadline)))

    def _delete_one(self, pod: PodView, grace_seconds: int) -> PodResult:
        action = f"delete pod {pod.key}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": grace_seconds,
        }
        if pod.uid:
            body["preconditions"] = {"uid": pod.uid}
        try:
            response = self._request("DELETE", _pod_path(pod), action=action, body=body)
        except (KubernetesApiUnavailableError, KubernetesApiError, DeadlineExceededError) as exc:
            return PodResult(pod=pod.key, uid=pod.uid, outcome=PodOutcome.FAILED, message=str(exc))
        return self._result(pod, response, action, success=PodOutcome.DELETED)

    def _result(self, pod: PodView, response: JsonResponse, action: str, *, success: PodOutcome) -> PodResult:
        """Classify an eviction's or deletion's answer: accepted, the pod is gone, or failed."""
        status = response.api_status
        if response.ok:
            return PodResult(pod=pod.key, uid=pod.uid, outcome=success, status=response.status)
        if response.status == 404:
            return PodResult(
                pod=pod.key,
                uid=pod.uid,
                outcome=PodOutcome.GONE,
                status=response.status,
                message=status.message,
            )
        if response.status == 409 and status.reason == "Conflict":
            return self._after_conflict(pod, status, action)
        return PodResult(
            pod=pod.key,
            uid=pod.uid,
            outcome=PodOutcome.FAILED,
            status=response.status,
            message=f"{action}: {status.describe()}",
        )

    def _after_conflict(self, pod: PodView, status: ApiStatus, action: str) -> PodResult:
        """A precondition failed: GONE if the pod's uid no longer names a pod (a namesake took the
        name, or it was deleted), otherwise a transient failure to ask about next round."""
        try:
            current = self._uid_now(pod)
        except (KubernetesApiUnavailableError, KubernetesApiError, DeadlineExceededError) as exc:
            return PodResult(
                pod=pod.key,
                uid=pod.uid,
                outcome=PodOutcome.FAILED,
                status=status.code,
                message=f"{action}: {status.describe()}; could not look at the pod: {exc}",
                transient=True,
            )
        if pod.uid and current != pod.uid:
            return PodResult(
                pod=pod.key, uid=pod.uid, outcome=PodOutcome.GONE, status=status.code, message=status.message
            )
        return PodResult(
            pod=pod.key,
            uid=pod.uid,
            outcome=PodOutcome.FAILED,
            status=status.code,
            message=f"{action}: {status.describe()} (the pod is still there; asking again next round)",
            transient=True,
        )

    def _uid_now(self, pod: PodView) -> str | None:
        """The uid of the pod now called ``pod.name`` (None: there is none). A list by name, not
        a get, so the drain's permission to list pods is all it needs."""
        action = f"look up pod {pod.key}"
        response = self._request(
            "GET",
            f"/api/v1/namespaces/{quote(pod.namespace, safe='')}/pods",
            action=action,
            query=[("fieldSelector", f"metadata.name={pod.name}")],
        )
        items = [item for item in expect_success(response, action=action).get("items") or [] if item]
        return str((items[0].get("metadata") or {}).get("uid", "")) if items else None
