"""`metav1.Status` bodies and the error type the fake API server raises internally.

The messages, reasons and `details` mirror k8s.io/apimachinery/pkg/api/errors so clients that
branch on `reason` or parse `details.causes` behave exactly as they would against a real cluster.
"""

from __future__ import annotations

from typing import Any

from nodeheal.sim.apiserver import messages
from nodeheal.sim.apiserver.messages import (
    INTERNAL_ERROR,
    TOO_LARGE_RESOURCE_VERSION,
    TOO_LARGE_RESOURCE_VERSION_CAUSE,
)

JSON = dict[str, Any]


def status_body(
    code: int,
    reason: str,
    message: str,
    details: JSON | None = None,
) -> JSON:
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details if details is not None else {},
        "code": code,
    }
    return body


def success_status(code: int, details: JSON | None = None) -> JSON:
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details is not None:
        body["details"] = details
    return body


class ApiError(Exception):
    """An error answered to the client as an HTTP status plus a `Status` body."""

    def __init__(self, body: JSON, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.body = body
        self.code = int(body["code"])
        self.headers = headers or {}


def qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(resource: str, group: str, name: str) -> JSON:
    details: JSON = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        status_body(
            404,
            "NotFound",
            f'{qualified(resource, group)} "{name}" not found',
            _details(resource, group, name),
        )
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        status_body(
            409,
            "AlreadyExists",
            f'{qualified(resource, group)} "{name}" already exists',
            _details(resource, group, name),
        )
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        status_body(
            409,
            "Conflict",
            messages.CONFLICT.format(resource=qualified(resource, group), name=name, why=why),
            _details(resource, group, name),
        )
    )


STALE_OBJECT = messages.OBJECT_MODIFIED


def bad_request(message: str) -> ApiError:
    return ApiError(status_body(400, "BadRequest", message))


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 as produced by `errors.NewInvalid`; each cause is (cause type, field path, detail)."""
    rendered = ", ".join(f"{field}: {msg}" for _, field, msg in causes)
    qualified_kind = f"{kind}.{group}" if group else kind
    details: JSON = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": typ, "message": msg, "field": field} for typ, field, msg in causes]
    return ApiError(status_body(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {rendered}', details))


def unprocessable_patch(message: str) -> ApiError:
    # JSON patch application failures come back from the real server as a generic 422.
    return ApiError(
        status_body(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
            {"causes": [{"reason": "FieldValueInvalid", "message": message}]},
        )
    )


def not_found_path() -> ApiError:
    return ApiError(status_body(404, "NotFound", "the server could not find the requested resource"))


def method_not_allowed() -> ApiError:
    return ApiError(
        status_body(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )
    )


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        status_body(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{', '.join(accepted)}",
        )
    )


def internal_error(message: str) -> ApiError:
    return ApiError(
        status_body(500, "InternalError", INTERNAL_ERROR.format(message), {"causes": [{"message": message}]})
    )


def service_unavailable(message: str = "the server is currently unable to handle the request") -> ApiError:
    return ApiError(status_body(503, "ServiceUnavailable", message))


def too_many_requests(message: str, causes: list[JSON], retry_after_seconds: int = 0) -> ApiError:
    details: JSON = {"causes": causes}
    headers: dict[str, str] = {}
    if retry_after_seconds:
        details["retryAfterSeconds"] = retry_after_seconds
        headers["Retry-After"] = str(retry_after_seconds)
    return ApiError(status_body(429, "TooManyRequests", message, details), headers)


def expired(message: str, continue_token: str = "") -> JSON:
    """``errors.NewResourceExpired``: 410 with no details (the field is omitted, not empty), and the
    fresh continue token in ``metadata`` when etcd's paging error handler made one."""
    body = status_body(410, "Expired", message)
    del body["details"]
    if continue_token:
        body["metadata"] = {"continue": continue_token}
    return body


def too_large_resource_version(requested: int, current: int) -> JSON:
    """``storage.NewTooLargeResourceVersionError`` with the watch cache's one-second retry hint
    (``resourceVersionTooHighRetrySeconds`` in pkg/storage/cacher/watch_cache.go)."""
    return status_body(
        504,
        "Timeout",
        TOO_LARGE_RESOURCE_VERSION.format(requested=requested, current=current),
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": TOO_LARGE_RESOURCE_VERSION_CAUSE}],
            "retryAfterSeconds": 1,
        },
    )
