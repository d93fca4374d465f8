"""The fake API server's sense of time, injectable so tests can move it instead of waiting.

The real server's history windows are measured in minutes: the watch cache keeps about 75 s of
events, etcd is compacted every 5 minutes, a watch ends after its ``timeoutSeconds``. The store
and the watch streams read the time from one :class:`Clock`; the default is the process's
monotonic clock (real durations), and a test passes a :class:`ManualClock` and advances it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (only differences mean anything)."""
        ...

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever the time jumps (never, for a clock that just runs)."""
        ...


class MonotonicClock:
    """Real time: what a production server lives by."""

    def now(self) -> float:
        return time.monotonic()

    def on_advance(self, callback: Callable[[], None]) -> None:
        # Real time does not jump; waiters use their own timeouts.
        return


class ManualClock:
    """Time that moves only when a test says so; waiters are woken at each jump."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"time does not go back: {seconds}")
        with self._lock:
            self._now += seconds
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    def on_advance(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)
