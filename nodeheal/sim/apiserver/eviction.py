"""The pods/eviction subresource, check for check in the order of the real registry.

Mirrors ``EvictionREST.Create`` of kubernetes/kubernetes v1.33
(https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/pod/storage/eviction.go):

1. The name in the URL must be the Eviction's (400).
2. In a retry loop on conflicts (``EvictionsRetry``: 20 attempts, 0.5 s apart with 10% jitter,
   about 10 s in all), read the pod; a pod that is Pending, finished or already terminating may be
   deleted without consulting any PodDisruptionBudget, so it is deleted there, with the pod's
   resourceVersion as a precondition when it is not finished or terminating. A conflict (the pod
   changed, or the uid precondition names an earlier pod of that name) is retried; the last one is
   answered (409) when the attempts run out. A caller's own resourceVersion precondition turns the
   retries off.
3. Otherwise the pod's budgets are checked: more than one is a 500; an unready pod is let through
   without using the budget under ``unhealthyPodEvictionPolicy: AlwaysAllow``, or under the default
   ``IfHealthyBudget`` while the budget's healthy pods meet its desired count; any other pod
   needs the budget to allow a disruption, which the eviction then uses up (429 when none is left,
   or retry-after 10 s while the disruption controller has not observed the PDB's generation).
4. The pod gets the ``DisruptionTarget`` condition and is deleted. If the unready pod changed after
   it was let through, the conflict is answered as 429 "still being processed", so clients retry.

The retry's pauses are real wall-clock time by default, multiplied by the store's ``time_scale``
(and made through an injectable ``sleep``) so simulations and tests need not wait them out.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from nodeheal.sim.apiserver import messages
from nodeheal.sim.apiserver.codec import copy_json
from nodeheal.sim.apiserver.pdb import is_pod_ready
from nodeheal.sim.apiserver.status import (
    ApiError,
    bad_request,
    status_body,
    success_status,
    too_many_requests,
)


class EvictionStore(Protocol):
    """What eviction needs of the store (:class:`~nodeheal.sim.apiserver.store.ClusterStore`,
    which builds this REST and so cannot be imported here)."""

    time_scale: float

    def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]: ...
    def budgets_for(self, pod: dict[str, Any]) -> list[dict[str, Any]]: ...
    def check_and_decrement(self, budget: dict[str, Any], pod: dict[str, Any], *, dry_run: bool) -> None: ...
    def mark_disruption_target(self, namespace: str, name: str, preconditions: dict[str, Any]) -> str: ...
    def delete(
        self, resource: str, name: str, namespace: str | None = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...
    def evicted(self, pod: dict[str, Any]) -> None: ...


JSON = dict[str, Any]

ALWAYS_ALLOW = "AlwaysAllow"


@dataclass(frozen=True)
class Backoff:
    """wait.Backoff without a cap: ``steps`` attempts, each pause ``duration`` (times ``factor``
    after each step) plus up to ``jitter`` of it at random.
    https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/util/wait/backoff.go"""

    steps: int
    duration: float
    factor: float
    jitter: float

    def pauses(self, rng: random.Random) -> Iterator[float]:
        """The pauses between attempts, as ExponentialBackoff sleeps them: one fewer than steps."""
        duration = self.duration
        for _ in range(self.steps - 1):
            yield duration + (rng.random() * self.jitter * duration if self.jitter > 0 else 0.0)
            if self.factor:
                duration *= self.factor


#: eviction.go's ``EvictionsRetry``: Steps 20, Duration 500 ms, Factor 1.0, Jitter 0.1.
EVICTIONS_RETRY = Backoff(steps=20, duration=0.5, factor=1.0, jitter=0.1)


def _is_conflict(err: ApiError) -> bool:
    return err.code == 409 and err.body.get("reason") == "Conflict"


def _resource_version_unset(options: JSON) -> bool:
    """eviction.go resourceVersionIsUnset: no preconditions, or no resourceVersion among them."""
    return (options.get("preconditions") or {}).get("resourceVersion") is None


def _with_resource_version(options: JSON, resource_version: str) -> JSON:
    """eviction.go setPreconditionsResourceVersion, on a copy."""
    out = copy_json(options)
    out["preconditions"] = {**(out.get("preconditions") or {}), "resourceVersion": resource_version}
    return out


def _can_ignore_budget(pod: JSON) -> bool:
    """eviction.go canIgnorePDB."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))


def _should_enforce_resource_version(pod: JSON) -> bool:
    """eviction.go shouldEnforceResourceVersion: not for finished or terminating pods."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def still_being_processed(budget_name: str) -> ApiError:
    """eviction.go createTooManyRequestsError: 429 with retry-after 10 s."""
    return too_many_requests(
        messages.EVICTION_BUDGET_VIOLATION,
        [
            {
                "reason": messages.DISRUPTION_BUDGET_CAUSE,
                "message": messages.EVICTION_BUDGET_PROCESSING.format(name=budget_name),
            }
        ],
        retry_after_seconds=messages.EVICTION_RETRY_AFTER_SECONDS,
    )


def _multiple_budgets() -> ApiError:
    # A Status returned as the result, not an error: the handler answers it with its own code and
    # no reason or details (finisher.go turns a non-success Status into the error response).
    body = status_body(500, "", messages.EVICTION_MULTIPLE_BUDGETS)
    body.pop("reason")
    body.pop("details")
    return ApiError(body)


class EvictionRest:
    """``EvictionREST`` over the store; see the module docstring for the order."""

    def __init__(
        self,
        store: EvictionStore,
        *,
        retry: Backoff = EVICTIONS_RETRY,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self.retry = retry
        self.sleep = sleep
        self._rng = rng or random.Random()

    def create(self, namespace: str, name: str, eviction: JSON) -> JSON:
        if (eviction.get("metadata") or {}).get("name") != name:
            raise bad_request(messages.EVICTION_NAME_MISMATCH)
        options: JSON = copy_json(eviction.get("deleteOptions") or {})
        pod, deleted = self._delete_unless_budgeted(namespace, name, options)
        if not deleted:
            self._delete_within_budget(namespace, name, pod, options)
        if not options.get("dryRun"):
            self._store.evicted(pod)
        return success_status(201)

    # -- the retry loop: pods whose budget does not matter --------------------------------------

    def _delete_unless_budgeted(self, namespace: str, name: str, options: JSON) -> tuple[JSON, bool]:
        """retry.OnError(EvictionsRetry, ...): returns the pod read last and whether it was deleted."""
        retry_conflicts = _resource_version_unset(options)
        pauses = self.retry.pauses(self._rng)
        while True:
            try:
                return self._attempt(namespace, name, options)
            except ApiError as err:
                if not (retry_conflicts and _is_conflict(err)):
                    raise
                pause = next(pauses, None)
                if pause is None:
                    # The attempts are spent: OnError answers the last conflict.
                    raise
                self.sleep(pause * self._store.time_scale)

    def _attempt(self, namespace: str, name: str, options: JSON) -> tuple[JSON, bool]:
        pod = self._store.get("pods", name, namespace)
        if not _can_ignore_budget(pod):
            return pod, False
        delete_options = options
        if _should_enforce_resource_version(pod) and _resource_version_unset(options):
            # Not racing another budget-affecting change: the pod must still be the one just read.
            delete_options = _with_resource_version(options, pod["metadata"]["resourceVersion"])
        self._add_condition_and_delete(namespace, name, delete_options)
        return pod, True

    # -- the budget ------------------------------------------------------------------------------

    def _delete_within_budget(self, namespace: str, name: str, pod: JSON, options: JSON) -> None:
        budgets = self._store.budgets_for(pod)
        if len(budgets) > 1:
            raise _multiple_budgets()
        budget_name = ""
        let_through_unready = False
        if budgets:
            budget = budgets[0]
            budget_name = budget["metadata"]["name"]
            status = budget.get("status") or {}
            if not is_pod_ready(pod):
                policy = (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy")
                desired = int(status.get("desiredHealthy", 0))
                if policy == ALWAYS_ALLOW or int(status.get("currentHealthy", 0)) >= desired > 0:
                    # An unready pod counts toward neither side of the budget: it goes without
                    # using a disruption.
                    let_through_unready = True
            if not let_through_unready:
                self._store.check_and_decrement(budget, pod, dry_run=bool(options.get("dryRun")))
        delete_options = options
        if let_through_unready:
            # ...as long as it has not become ready since it was read.
            delete_options = _with_resource_version(options, pod["metadata"]["resourceVersion"])
        try:
            self._add_condition_and_delete(namespace, name, delete_options)
        except ApiError as err:
            if _is_conflict(err) and let_through_unready and _resource_version_unset(options):
                raise still_being_processed(budget_name) from err
            raise

    # -- the delete ------------------------------------------------------------------------------

    def _add_condition_and_delete(self, namespace: str, name: str, options: JSON) -> None:
        """eviction.go addConditionAndDeletePod: DisruptionTarget first (not on a dry run), then
        the delete, whose resourceVersion precondition follows the condition's own write."""
        if not options.get("dryRun"):
            version = self._store.mark_disruption_target(namespace, name, options.get("preconditions") or {})
            if not _resource_version_unset(options):
                options = _with_resource_version(options, version)
        self._store.delete("pods", name, namespace, options)
