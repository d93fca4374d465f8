"""Fault injection for the fake API server: failing, hanging or slow requests, broken watches.

Rules match on an HTTP method and a regular expression searched in the request path (query
string excluded). Every request is counted per (method, route template) for assertions, and
every open watch and every answered request is reported, so a test waits for the exact moment
it needs (:meth:`FaultInjector.wait_for`) instead of for a while.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from nodeheal.sim.apiserver.status import (
    ApiError,
    internal_error,
    service_unavailable,
    status_body,
    too_many_requests,
)

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Gone",
    502: "InternalError",
    504: "Timeout",
}


def injected_error(status: int, message: str | None = None) -> ApiError:
    """The Status the real server sends for `status`, as an injected failure."""
    if status == 500:
        return internal_error(message or "injected fault")
    if status == 503:
        return service_unavailable(message or "the server is currently unable to handle the request")
    if status == 429:
        return too_many_requests(
            message or "the server has received too many requests and has asked us to try again later",
            [],
            retry_after_seconds=1,
        )
    return ApiError(
        status_body(status, _REASONS.get(status, "Unknown"), message or f"injected HTTP {status}")
    )


@dataclass
class _Rule:
    action: Literal["error", "timeout", "latency", "throttle", "call"]
    method: str | None
    path: re.Pattern[str] | None
    remaining: int | None
    until: float | None
    status: int = 500
    seconds: float = 0.0
    message: str | None = None
    # Matching requests let through untouched before the rule applies.
    skip: int = 0
    call: Callable[[], None] | None = None

    def matches(self, method: str, path: str, now: float) -> bool:
        if self.until is not None and now > self.until:
            return False
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        return self.path is None or self.path.search(path) is not None


@dataclass(eq=False)
class WatchControl:
    """Flags one open watch stream checks between events."""

    path: str = ""
    drop: bool = False
    expire: bool = False
    # A Status to send as an ERROR event, after which the stream ends.
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class Decision:
    latency: float
    error: ApiError | None
    hold_seconds: float | None
    # API Priority and Fairness rejected the request; the Retry-After seconds it answers.
    throttle_retry_after: int | None = None
    # Actions to run just before the request is handled.
    calls: tuple[Callable[[], None], ...] = ()


class FaultInjector:
    def __init__(self, notify: Callable[[], None] | None = None) -> None:
        # Wakes watch streams blocked waiting for store changes so they see a new flag at once.
        self._notify = notify
        # Reentrant, so a predicate given to wait_for may read the counts under the condition.
        self._lock = threading.RLock()
        self._reported = threading.Condition(self._lock)
        self._rules: list[_Rule] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        self._paths: list[tuple[str, str]] = []
        self._served: list[tuple[str, str, bool]] = []
        self._watches: list[WatchControl] = []
        self._watches_started: list[str] = []

    # ---- configuring faults ------------------------------------------------------------------

    def _add(self, rule: _Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    @staticmethod
    def _regex(path: str | None) -> re.Pattern[str] | None:
        return re.compile(path) if path is not None else None

    def fail_next(
        self,
        count: int = 1,
        *,
        status: int = 500,
        method: str | None = None,
        path: str | None = None,
        message: str | None = None,
    ) -> None:
        """The next `count` matching requests answer `status` with the real server's Status body."""
        self._add(_Rule("error", method, self._regex(path), count, None, status=status, message=message))

    def fail_for(
        self,
        seconds: float,
        *,
        status: int = 503,
        method: str | None = None,
        path: str | None = None,
        message: str | None = None,
    ) -> None:
        """Every matching request fails for the next `seconds` (an outage window)."""
        until = time.monotonic() + seconds
        self._add(_Rule("error", method, self._regex(path), None, until, status=status, message=message))

    def timeout_next(
        self,
        count: int = 1,
        *,
        hold_seconds: float = 5.0,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """The next `count` matching requests get no answer: the connection is held, then closed."""
        self._add(_Rule("timeout", method, self._regex(path), count, None, seconds=hold_seconds))

    def add_latency(
        self,
        seconds: float,
        *,
        method: str | None = None,
        path: str | None = None,
        count: int | None = None,
        duration: float | None = None,
    ) -> None:
        """Delay matching requests (all of them, the next `count`, or for `duration` seconds)."""
        until = time.monotonic() + duration if duration is not None else None
        self._add(_Rule("latency", method, self._regex(path), count, until, seconds=seconds))

    def throttle_next(
        self,
        count: int = 1,
        *,
        retry_after: int = 1,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """The next `count` matching requests are rejected by API Priority and Fairness: 429 with
        a plain-text body and ``Retry-After`` (``tooManyRequests`` in priority-and-fairness.go)."""
        self._add(_Rule("throttle", method, self._regex(path), count, None, seconds=float(retry_after)))

    def call_before(
        self,
        action: Callable[[], None],
        *,
        skip: int = 0,
        count: int = 1,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Run `action` just before the server handles a matching request, once `skip` matching
        requests have gone by: e.g. compact the store between the first and second page of a list."""
        self._add(_Rule("call", method, self._regex(path), count, None, skip=skip, call=action))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    # ---- watches -----------------------------------------------------------------------------

    def drop_watches(self, *, path: str | None = None) -> int:
        """Close every open watch abruptly (no terminating chunk); returns how many were open."""
        return self._flag_watches(path, lambda control: setattr(control, "drop", True))

    def expire_watches(self, *, path: str | None = None) -> int:
        """Send `ERROR` 410 Expired into every open watch, which then ends as the real one does."""
        return self._flag_watches(path, lambda control: setattr(control, "expire", True))

    def error_watches(self, status: int = 500, message: str | None = None, *, path: str | None = None) -> int:
        """Send an `ERROR` event carrying the Status the real server sends for `status` into every
        open watch (whose path matches the regex `path`), which then ends.

        A 500 is how an etcd failure under a watch reaches the client (``transformErrorToEvent``
        in k8s.io/apiserver pkg/storage/etcd3/watcher.go turns it into an InternalError Status);
        other codes exercise a client's handling of whatever else a stream may carry."""
        body = injected_error(status, message).body
        return self._flag_watches(path, lambda control: setattr(control, "error", body))

    def _flag_watches(self, path: str | None, flag: Callable[[WatchControl], None]) -> int:
        regex = self._regex(path)
        with self._lock:
            watches = [w for w in self._watches if regex is None or regex.search(w.path)]
        for control in watches:
            flag(control)
        if self._notify is not None:
            self._notify()
        return len(watches)

    @property
    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    def watching(self, path: str | None = None) -> int:
        """Watches open now whose path matches the regex `path`."""
        regex = self._regex(path)
        with self._lock:
            return sum(1 for w in self._watches if regex is None or regex.search(w.path))

    def watches_started(self, path: str | None = None) -> int:
        """Watches opened so far (open or ended) whose path matches the regex `path`."""
        regex = self._regex(path)
        with self._lock:
            return sum(1 for p in self._watches_started if regex is None or regex.search(p))

    def register_watch(self, path: str = "") -> WatchControl:
        """Called by the server once a watch's stream is open and about to be served."""
        control = WatchControl(path)
        with self._lock:
            self._watches.append(control)
            self._watches_started.append(path)
            self._reported.notify_all()
        return control

    def unregister_watch(self, control: WatchControl) -> None:
        with self._lock:
            if control in self._watches:
                self._watches.remove(control)
            self._reported.notify_all()

    # ---- waiting on what the server reports ---------------------------------------------------

    def wait_for(self, predicate: Callable[[], bool], *, timeout: float = 30.0, what: str = "") -> None:
        """Block until `predicate()` holds; it is re-checked each time a watch opens or ends and
        each time a request has been answered. `timeout` only bounds a test that would hang;
        raises TimeoutError naming `what`."""
        deadline = time.monotonic() + timeout
        with self._reported:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"timed out waiting for {what or 'the fake API server'}")
                self._reported.wait(remaining)

    def wait_for_watch(
        self, path: str | None = None, *, started_after: int | None = None, timeout: float = 30.0
    ) -> None:
        """Block until a watch whose path matches the regex `path` is open. With `started_after`
        (a :meth:`watches_started` count taken earlier), until a newer one has been opened, which
        may have ended by then (a watch that answers 410 at once)."""
        if started_after is None:
            self.wait_for(lambda: self.watching(path) > 0, timeout=timeout, what=f"a watch of {path} to open")
        else:
            after = started_after
            self.wait_for(
                lambda: self.watches_started(path) > after,
                timeout=timeout,
                what=f"a new watch of {path} to open",
            )

    def record_served(self, method: str, path: str, *, watch: bool) -> None:
        """Called by the server when it has finished answering a request."""
        with self._lock:
            self._served.append((method, path, watch))
            self._reported.notify_all()

    def served(self, method: str | None = None, path: str | None = None, *, watch: bool = False) -> int:
        """Requests answered so far whose method matches and whose path matches the regex
        `path`; watches (ended streams) when `watch` is true, every other request otherwise."""
        regex = self._regex(path)
        with self._lock:
            return sum(
                1
                for m, p, w in self._served
                if w == watch
                and (method is None or m == method.upper())
                and (regex is None or regex.search(p))
            )

    # ---- request accounting ------------------------------------------------------------------

    def decide(self, method: str, path: str, route: str) -> Decision:
        """Count the request and consume the rules that apply to it."""
        now = time.monotonic()
        latency = 0.0
        with self._lock:
            self._counts[(method, route)] += 1
            self._paths.append((method, path))
            for rule in self._rules:
                if rule.action == "latency" and rule.matches(method, path, now):
                    latency += rule.seconds
                    if rule.remaining is not None:
                        rule.remaining -= 1
            calls: list[Callable[[], None]] = []
            for rule in self._rules:
                if rule.action == "call" and rule.matches(method, path, now):
                    if rule.skip > 0:
                        rule.skip -= 1
                        continue
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    if rule.call is not None:
                        calls.append(rule.call)
            for rule in self._rules:
                if rule.action not in ("latency", "call") and rule.matches(method, path, now):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    if rule.action == "timeout":
                        return Decision(latency, None, rule.seconds, calls=tuple(calls))
                    if rule.action == "throttle":
                        return Decision(
                            latency, None, None, throttle_retry_after=int(rule.seconds), calls=tuple(calls)
                        )
                    return Decision(
                        latency, injected_error(rule.status, rule.message), None, calls=tuple(calls)
                    )
        return Decision(latency, None, None, calls=tuple(calls))

    def count(self, method: str | None = None, path: str | None = None) -> int:
        """Requests seen whose method matches and whose path matches the regex `path`."""
        regex = self._regex(path)
        with self._lock:
            return sum(
                1
                for m, p in self._paths
                if (method is None or m == method.upper()) and (regex is None or regex.search(p))
            )

    @property
    def counts(self) -> dict[tuple[str, str], int]:
        """Requests per (method, route template), e.g. ("PATCH", "/api/v1/nodes/{name}")."""
        with self._lock:
            return dict(self._counts)

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()
            self._paths.clear()
            self._served.clear()
            self._watches_started.clear()
