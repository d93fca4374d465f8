"""Plain HTTP to the fake API server, for what the `kubernetes` client hides: exact bodies sent
(unknown fields, malformed times), status codes and ``Warning`` headers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import urllib3

from nodeheal.sim.apiserver import FakeKubeApiServer

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

_HTTP = urllib3.PoolManager(retries=False)


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    warnings: list[str]


def call(
    server: FakeKubeApiServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    raw: bytes | None = None,
) -> Answer:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    response = _HTTP.request(method, f"{server.url}{path}", body=data, headers={"Content-Type": content_type})
    payload = json.loads(response.data) if response.data else None
    return Answer(response.status, payload, list(response.headers.getlist("Warning")))
