"""Fault injection for the fake API server: failing, hanging or slow requests, broken watches.

Rules match on an HTTP method and a regular expression searched in the request path (query
string excluded). Every request is counted per (method, route template) for assertions.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

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
    action: Literal["error", "timeout", "latency"]
    method: str | None
    path: re.Pattern[str] | None
    remaining: int | None
    until: float | None
    status: int = 500
    seconds: float = 0.0
    message: str | None = None

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

    drop: bool = False
    expire: bool = False


@dataclass(frozen=True)
class Decision:
    latency: float
    error: ApiError | None
    hold_seconds: float | None


class FaultInjector:
    def __init__(self, notify: Callable[[], None] | None = None) -> None:
        # Wakes watch streams blocked waiting for store changes so they see a new flag at once.
        self._notify = notify
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        self._paths: list[tuple[str, str]] = []
        self._watches: list[WatchControl] = []

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

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    # ---- watches -----------------------------------------------------------------------------

    def drop_watches(self) -> int:
        """Close every open watch abruptly (no terminating chunk); returns how many were open."""
        return self._flag_watches("drop")

    def expire_watches(self) -> int:
        """Send `ERROR` 410 Expired into every open watch, which then ends as the real one does."""
        return self._flag_watches("expire")

    def _flag_watches(self, flag: Literal["drop", "expire"]) -> int:
        with self._lock:
            watches = list(self._watches)
        for control in watches:
            setattr(control, flag, True)
        if self._notify is not None:
            self._notify()
        return len(watches)

    @property
    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    def register_watch(self) -> WatchControl:
        control = WatchControl()
        with self._lock:
            self._watches.append(control)
        return control

    def unregister_watch(self, control: WatchControl) -> None:
        with self._lock:
            if control in self._watches:
                self._watches.remove(control)

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
            for rule in self._rules:
                if rule.action != "latency" and rule.matches(method, path, now):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    if rule.action == "timeout":
                        return Decision(latency, None, rule.seconds)
                    return Decision(latency, injected_error(rule.status, rule.message), None)
        return Decision(latency, None, None)

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
