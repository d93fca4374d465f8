"""Timestamps as Kubernetes and EventBridge write them (RFC 3339, UTC)."""

from __future__ import annotations

from datetime import UTC, datetime

from nodeheal.errors import InvalidEventError


def utc_now() -> datetime:
    return datetime.now(UTC)


def parse_timestamp(value: object, field: str) -> datetime:
    """Parse an RFC 3339 timestamp; naive values are rejected because they are ambiguous."""
    if not isinstance(value, str) or not value:
        raise InvalidEventError(f"{field} must be an RFC 3339 timestamp string")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidEventError(f"{field} is not an RFC 3339 timestamp: {value!r}") from exc
    if parsed.tzinfo is None:
        raise InvalidEventError(f"{field} must carry a time zone (for example a trailing Z): {value!r}")
    return parsed.astimezone(UTC)


def format_timestamp(value: datetime, *, millis: bool = False) -> str:
    """Format as Kubernetes does (``2026-11-21T10:00:00Z``), optionally with milliseconds."""
    value = value.astimezone(UTC)
    if millis:
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(value: datetime) -> str:
    """A ``metav1.MicroTime`` as the API server reads it: UTC with exactly six fractional digits
    (``RFC3339Micro`` in k8s.io/apimachinery pkg/apis/meta/v1/micro_time.go), the form an Event's
    ``eventTime`` must take."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
