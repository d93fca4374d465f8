"""Count the Kubernetes requests and AWS calls NodeHeal's own functions make, per invocation.

These counts are what NodeHeal sends: the same against real AWS and a real API server, unlike
timings, which include the local harness.

Attribution rests on how the local pipeline runs Lambdas: every invocation goes through
``LocalAws.call_handler`` and invocations take turns under ``LocalAws._invocation_lock``. The
counter wraps ``call_handler`` (holding the same re-entrant lock first, so the invocation it marks
is the one running) and records:

* an AWS call when it is made from the invocation's own thread. The simulated cluster's
  controllers and moto's Step Functions workers call AWS from other threads, so they never count;
* a Kubernetes request when NodeHeal's HTTP transport sends it from the invocation's thread or
  from the pool of threads the pod operations start while it runs (``nodeheal-pod``). The exporter
  uses the same transport from its own threads, so it never counts; the simulated cluster and the
  test setup write the fake API server's store directly.

After each invocation its calls go to the execution the payload names, or, for ingest (which runs
before any execution exists), to the node the event is about.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from botocore.client import BaseClient

from nodeheal.kube.transport import HttpTransport
from nodeheal.sim.local_aws import LocalAws

#: Threads the pod operations start for evictions and deletions (nodeheal.kube.pods).
POD_THREAD_PREFIX = "nodeheal-pod"


@dataclass(slots=True)
class Calls:
    """What one execution (or one node's ingest invocations) sent."""

    kubernetes: Counter[str] = field(default_factory=Counter)
    aws: Counter[str] = field(default_factory=Counter)

    def add(self, other: Calls) -> None:
        self.kubernetes.update(other.kubernetes)
        self.aws.update(other.aws)

    def summary(self) -> dict[str, Any]:
        dynamodb = {op: n for op, n in self.aws.items() if op.startswith("dynamodb:")}
        return {
            "kubernetesRequests": sum(self.kubernetes.values()),
            "kubernetesByRequest": dict(sorted(self.kubernetes.items())),
            "dynamodbCalls": sum(dynamodb.values()),
            "dynamodbByOperation": {op.removeprefix("dynamodb:"): n for op, n in sorted(dynamodb.items())},
            "awsByOperation": dict(sorted(self.aws.items())),
        }


@dataclass(slots=True)
class CallCounter:
    """Calls per execution name and, for ingest, per node name."""

    by_execution: dict[str, Calls] = field(default_factory=dict)
    ingest_by_node: dict[str, Calls] = field(default_factory=dict)
    _current: Calls | None = None
    _thread: int | None = None

    def _owns_current_thread(self, *, pod_threads: bool) -> bool:
        if self._current is None:
            return False
        thread = threading.current_thread()
        if thread.ident == self._thread:
            return True
        return pod_threads and thread.name.startswith(POD_THREAD_PREFIX)

    def _record_kubernetes(self, method: str, path: str) -> None:
        if self._current is not None and self._owns_current_thread(pod_threads=True):
            self._current.kubernetes[f"{method.upper()} {path}"] += 1

    def _record_aws(self, service: str, operation: str) -> None:
        if self._current is not None and self._owns_current_thread(pod_threads=False):
            self._current.aws[f"{service}:{operation}"] += 1

    def _attribute(self, payload: Any, calls: Calls) -> None:
        body = payload if isinstance(payload, Mapping) else {}
        execution = body.get("execution")
        name = str(execution.get("name", "")) if isinstance(execution, Mapping) else ""
        if name:
            self.by_execution.setdefault(name, Calls()).add(calls)
            return
        detail = body.get("detail", body.get("event"))
        node = detail.get("node") if isinstance(detail, Mapping) else None
        node_name = str(node.get("name", "")) if isinstance(node, Mapping) else ""
        self.ingest_by_node.setdefault(node_name, Calls()).add(calls)

    @contextmanager
    def counting(self, aws: LocalAws) -> Iterator[CallCounter]:
        counter = self
        original_call_handler = aws.call_handler
        original_request = HttpTransport.request
        original_api_call = BaseClient._make_api_call

        def call_handler(logical_id: str, payload: Any) -> Any:
            # The same re-entrant lock call_handler takes: the invocation marked is the one running.
            with aws._invocation_lock:
                calls = Calls()
                counter._current, counter._thread = calls, threading.get_ident()
                try:
                    return original_call_handler(logical_id, payload)
                finally:
                    counter._current, counter._thread = None, None
                    counter._attribute(payload, calls)

        def request(transport: HttpTransport, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            counter._record_kubernetes(method, path)
            return original_request(transport, method, path, *args, **kwargs)

        def make_api_call(client: BaseClient, operation: str, params: Any) -> Any:
            counter._record_aws(client.meta.service_model.endpoint_prefix, operation)
            return original_api_call(client, operation, params)

        with (
            mock.patch.object(aws, "call_handler", call_handler),
            mock.patch.object(HttpTransport, "request", request),
            mock.patch.object(BaseClient, "_make_api_call", make_api_call),
        ):
            yield self
