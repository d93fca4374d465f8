"""Translate Kubernetes API failures into NodeHeal's domain errors.

The split follows what a retry can fix. The API server being overloaded (5xx, 429 from API Priority
and Fairness), a timeout or a dropped connection is :class:`KubernetesApiUnavailableError`, which
the state machine retries with backoff. A refusal (401/403 from authentication or RBAC, 409/422
from admission or validation, 400...) is :class:`KubernetesApiError`, which it does not: repeating
the same request gets the same answer. The message always names the request, the status, the
reason and the API server's own message, because that is what a person reads in the console.

Eviction's 429 (a PodDisruptionBudget said no) is an expected answer, not an error: the pod
adapter classifies it before anything here is consulted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import urllib3.exceptions

from nodeheal.errors import KubernetesApiError, KubernetesApiUnavailableError, NodeHealError
from nodeheal.kube.transport import ApiServerUnreachableError


@dataclass(frozen=True, slots=True)
class ApiStatus:
    """The useful part of a ``Status`` object (or of a non-JSON error body)."""

    code: int
    reason: str
    message: str
    #: ``details.causes[].message``: where the specifics live (which PDB, which field was invalid).
    causes: tuple[str, ...] = ()
    #: ``details.causes[].reason`` (a StatusCause's type): what the causes are about, e.g.
    #: ``DisruptionBudget`` on an eviction's 429, as opposed to API Priority and Fairness's 429.
    cause_reasons: tuple[str, ...] = ()

    @property
    def explanation(self) -> str:
        """The message followed by any causes that add to it."""
        extra = [c for c in self.causes if c and c not in self.message]
        if not extra:
            return self.message
        return f"{self.message} ({'; '.join(extra)})" if self.message else "; ".join(extra)

    def describe(self) -> str:
        parts = [f"HTTP {self.code}"]
        if self.reason:
            parts.append(self.reason)
        text = " ".join(parts)
        explanation = self.explanation
        return f"{text}: {explanation}" if explanation else text


def status_from_body(code: int, body: Any, http_reason: str = "") -> ApiStatus:
    """Read ``reason``/``message`` from a ``Status`` body (dict, JSON text or bytes).

    A proxy or load balancer in front of the API server answers with HTML or plain text; that text
    (shortened) is still the best explanation available, so it becomes the message.
    """
    parsed = body
    if isinstance(body, bytes | bytearray):
        body = bytes(body).decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:
            return ApiStatus(code=code, reason=http_reason, message=body.strip()[:500])
    if isinstance(parsed, dict):
        details = parsed.get("details")
        raw_causes = details.get("causes") if isinstance(details, dict) else None
        cause_list = [cause for cause in raw_causes or [] if isinstance(cause, dict)]
        return ApiStatus(
            code=code,
            reason=str(parsed.get("reason") or http_reason or ""),
            message=str(parsed.get("message") or ""),
            causes=tuple(str(cause["message"]) for cause in cause_list if cause.get("message")),
            cause_reasons=tuple(str(cause["reason"]) for cause in cause_list if cause.get("reason")),
        )
    return ApiStatus(code=code, reason=http_reason, message="")


def is_retryable_status(code: int) -> bool:
    return code == 429 or code >= 500


def error_for_status(status: ApiStatus, *, action: str) -> NodeHealError:
    """The domain error for a failed response to ``action`` (e.g. ``"patch node ip-10-0-1-2"``)."""
    text = f"{action}: {status.describe()}"
    if is_retryable_status(status.code):
        return KubernetesApiUnavailableError(text)
    return KubernetesApiError(text)


def error_for_exception(exc: BaseException, *, action: str) -> NodeHealError:
    """The domain error for an exception raised while talking to the API server.

    Covers urllib3's connection, TLS, timeout and protocol errors, OS-level socket errors, and a
    transport's own report that no HTTP answer came back. Anything else is a programming error and
    is not passed through here.
    """
    if isinstance(exc, ApiServerUnreachableError):
        return KubernetesApiUnavailableError(f"{action}: could not talk to the API server: {exc}")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return KubernetesApiUnavailableError(
            f"{action}: API server unreachable ({type(exc).__name__}: {exc})"
        )
    raise TypeError(f"not a transport error: {type(exc).__name__}") from exc


#: Exceptions that mean "the request did not get a usable HTTP answer".
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    ApiServerUnreachableError,
    urllib3.exceptions.HTTPError,
    OSError,
)
