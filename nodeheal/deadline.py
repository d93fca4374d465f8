"""How long an invocation may still talk to the outside world.

Lambda kills a function at its timeout, and Step Functions reports the kill as ``Sandbox.Timedout``
or ``Lambda.Unknown``, with no result and no log line saying which call was slow. A
:class:`Deadline` is taken from the Lambda context when the invocation starts, minus
:data:`LAMBDA_RESERVE_SECONDS`, and is passed to every Kubernetes call the invocation makes: each
request's connect and read timeouts become ``min(configured, time left)``, connect retries stop
when the next attempt would not fit, and a call the deadline cut short raises
:class:`~nodeheal.errors.DeadlineExceededError`, which the state machine retries by name.

The deadline is an object passed in: the handler builds it from its context (the local
pipeline's fake context counts down from the function's configured timeout), tests build it from a
fake clock, and the CLI, which has no deadline, uses :data:`UNBOUNDED`. The Kubernetes adapters are
built per invocation and take it as an argument. The boto3 clients are built once per container
and botocore has no per-call timeout, so for AWS calls the handler also sets the deadline in a
context variable for the invocation (:func:`applied`), which a botocore hook reads before each
attempt (:mod:`nodeheal.runtime`); the pods' worker threads make no AWS calls, so they need not
see it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from nodeheal.errors import DeadlineExceededError

#: Seconds kept back from the Lambda timeout: enough to build the result (or raise the named error),
#: write the log line and flush the metrics (EMF to stdout), which take milliseconds; the rest
#: absorbs a clock read late on a busy host and Lambda's own freeze/thaw of the sandbox.
LAMBDA_RESERVE_SECONDS = 3.0

#: A call is not started with less than this many seconds left: it could hardly be answered, and
#: a write sent but not answered only leaves its outcome unknown to the next attempt.
MIN_CALL_SECONDS = 1.0


class RemainingTime(Protocol):
    """The part of the Lambda context object a deadline reads."""

    def get_remaining_time_in_millis(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Deadline:
    """A point on ``clock`` (seconds, monotonic) by which this invocation's calls must be done."""

    expires_at: float
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    @classmethod
    def after(cls, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    @classmethod
    def from_lambda_context(
        cls,
        context: RemainingTime,
        *,
        reserve_seconds: float = LAMBDA_RESERVE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> Deadline:
        """The function's remaining time minus ``reserve_seconds`` (never negative)."""
        remaining = context.get_remaining_time_in_millis() / 1000.0
        return cls.after(max(0.0, remaining - reserve_seconds), clock=clock)

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.expires_at)

    def remaining(self) -> float:
        """Seconds left; negative once passed, infinite for :data:`UNBOUNDED`."""
        return self.expires_at - self.clock() if self.bounded else math.inf

    def allows(self, seconds: float) -> bool:
        """Whether a call that needs ``seconds`` may still start."""
        return self.remaining() >= seconds

    def cap(self, seconds: float) -> float:
        """``seconds``, or the time left if that is shorter (never below zero)."""
        return max(0.0, min(seconds, self.remaining()))

    def check(self, action: str) -> float:
        """The time left, or :class:`DeadlineExceededError` if a call should not start any more."""
        remaining = self.remaining()
        if remaining < MIN_CALL_SECONDS:
            raise DeadlineExceededError(
                f"{action}: not started, {max(remaining, 0.0):.1f}s of this invocation's time left"
            )
        return remaining

    def exceeded(self, action: str, cause: BaseException) -> DeadlineExceededError:
        """The error for a call that failed because the deadline cut its timeout short."""
        return DeadlineExceededError(
            f"{action}: no answer within this invocation's remaining time ({type(cause).__name__}: {cause})"
        )

    def cut_short(self) -> bool:
        """Whether a call that just failed ran into the deadline (too little time left to go on)."""
        return self.remaining() < MIN_CALL_SECONDS


#: No deadline: the CLI and tools run until their calls' own timeouts.
UNBOUNDED = Deadline(math.inf)

_current: ContextVar[Deadline] = ContextVar("nodeheal_deadline", default=UNBOUNDED)


def current() -> Deadline:
    """The deadline of the invocation running in this context; :data:`UNBOUNDED` outside one."""
    return _current.get()


@contextmanager
def applied(deadline: Deadline) -> Iterator[Deadline]:
    """Make ``deadline`` :func:`current` for the enclosed block (this thread/context only)."""
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)
