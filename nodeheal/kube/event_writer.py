"""Writing NodeHeal's Events through ``events.k8s.io/v1``, best effort and bounded in time.

An Event tells people what a step did; it never decides anything. So a write that fails is logged
and counted, never raised, and the writes of one invocation together may take only a small part of
its time:

* each write's connect and read timeouts are short (:data:`EVENT_REQUEST_TIMEOUT`), and every
  write of an invocation together at most :data:`EVENT_BUDGET_SECONDS`;
* a write starts only while :data:`EVENT_RESERVE_SECONDS` of the invocation's deadline would still
  be left after it, answered or not, so the step's own calls and its result never wait for an Event;
* after an answer that says the API server or this identity cannot take Events now (no answer,
  5xx, 429, 401, 403), the invocation's remaining Events are skipped rather than each waiting for
  the same failure. Another 4xx is about that one Event (it is logged) and the next is still sent;
* 409 AlreadyExists is success: the Event's name is derived from what it tells
  (:func:`~nodeheal.kube_event_body.event_name`), so it was written by an earlier run of this step.

The Lambda handler turns :class:`EventTally` into the ``KubernetesEventsFailed`` and
``KubernetesEventsSkipped`` metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from urllib.parse import quote

from nodeheal.deadline import MIN_CALL_SECONDS, UNBOUNDED, Deadline
from nodeheal.errors import DeadlineExceededError, KubernetesApiError, KubernetesApiUnavailableError
from nodeheal.kube.client import JsonResponse, request_json
from nodeheal.kube.transport import KubeTransport, RequestTimeout
from nodeheal.kube_event_body import EventTally, ObjectEvent, event_body

logger = logging.getLogger(__name__)

#: (connect, read) seconds of one Event write. The API server stores an Event without admission
#: webhooks in the way of most clusters' policies; an answer slower than this is an API server in
#: trouble, which the step's own calls will meet soon enough.
EVENT_REQUEST_TIMEOUT: tuple[float, float] = (2.0, 3.0)
#: Seconds all Event writes of one invocation may take together: a drain round tells each evicted
#: pod, and dozens of pods answered in milliseconds fit many times over.
EVENT_BUDGET_SECONDS = 5.0
#: Seconds of the invocation's deadline an Event write must leave, at its worst, for the step.
EVENT_RESERVE_SECONDS = 5.0
#: Answers after which this invocation writes no more Events: the API server is unavailable or
#: throttling, or this identity may not create Events (RBAC, credentials).
_STOP_STATUSES = frozenset({401, 403, 429})


def _events_path(namespace: str) -> str:
    return f"/apis/events.k8s.io/v1/namespaces/{quote(namespace, safe='')}/events"


class EventOperations:
    """The workflow's EventPort over the API server. One per invocation, like the other adapters."""

    def __init__(
        self,
        transport: KubeTransport,
        *,
        deadline: Deadline = UNBOUNDED,
        tally: EventTally | None = None,
        timeout: RequestTimeout = EVENT_REQUEST_TIMEOUT,
        budget_seconds: float = EVENT_BUDGET_SECONDS,
        reserve_seconds: float = EVENT_RESERVE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = transport
        self._deadline = deadline
        self.tally = tally if tally is not None else EventTally()
        self._timeout = timeout
        self._budget = budget_seconds
        self._reserve = reserve_seconds
        self._clock = clock
        self._spent = 0.0
        #: Why this invocation writes no more Events ("" while it still does).
        self._stopped = ""

    def record(self, events: Sequence[ObjectEvent]) -> None:
        """Write each Event in order; failures are logged and counted, never raised."""
        for event in events:
            self._write(event)

    def lost(self, count: int, why: str) -> None:
        """Events the step could not even build (a bug in the story, never the step's business)."""
        logger.error("%d Kubernetes Event(s) not written: %s", count, why)
        self.tally.add(failed=count)

    def _room(self) -> float:
        """Seconds the next write may take: what is left of the budget and of the deadline after
        the reserve."""
        left = self._budget - self._spent
        if self._deadline.bounded:
            left = min(left, self._deadline.remaining() - self._reserve)
        return left

    def _skip(self, event: ObjectEvent, why: str) -> None:
        logger.warning("Event %s about %s not sent: %s", event.reason, event.regarding.name, why)
        self.tally.add(skipped=1)

    def _write(self, event: ObjectEvent) -> None:
        if self._stopped:
            self._skip(event, self._stopped)
            return
        room = self._room()
        if room < MIN_CALL_SECONDS:
            self._skip(event, f"{max(room, 0.0):.1f}s left for Events in this invocation")
            return
        action = f"create Event {event.reason} about {event.regarding.kind} {event.regarding.name}"
        started = self._clock()
        try:
            response = request_json(
                self._api,
                "POST",
                _events_path(event.namespace),
                action=action,
                body=event_body(event),
                timeout=self._timeout,
                deadline=Deadline.after(room, clock=self._clock),
            )
        except (KubernetesApiUnavailableError, KubernetesApiError, DeadlineExceededError) as exc:
            self._failed(event, str(exc), stop=True)
            return
        finally:
            self._spent += self._clock() - started
        self._answered(event, response, action)

    def _answered(self, event: ObjectEvent, response: JsonResponse, action: str) -> None:
        if response.ok:
            self.tally.add(written=1)
            return
        status = response.api_status
        if response.status == 409 and status.reason == "AlreadyExists":
            self.tally.add(already=1)
            return
        stop = response.status in _STOP_STATUSES or response.status >= 500
        self._failed(event, f"{action}: {status.describe()}", stop=stop)

    def _failed(self, event: ObjectEvent, why: str, *, stop: bool) -> None:
        logger.warning("Event %s about %s not written: %s", event.reason, event.regarding.name, why)
        self.tally.add(failed=1)
        if stop:
            self._stopped = f"an earlier Event of this invocation failed ({why})"
