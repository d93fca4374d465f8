"""The benchmark's call counter gives each invocation's calls to its execution, or to ingest's node."""

from __future__ import annotations

import threading
from typing import Any, cast

import boto3
from moto import mock_aws

from benchmarks.call_counts import CallCounter
from nodeheal.sim.local_aws import LocalAws


class _FakeAws:
    """Just what the counter wraps: a handler call taken in turns under one re-entrant lock."""

    def __init__(self, handler: Any) -> None:
        self._invocation_lock = threading.RLock()
        self._handler = handler

    def call_handler(self, logical_id: str, payload: Any) -> Any:
        with self._invocation_lock:
            return self._handler(payload)


def test_calls_go_to_the_invocation_that_made_them_and_nowhere_else() -> None:
    with mock_aws():
        _check_attribution()


def _check_attribution() -> None:
    dynamodb = boto3.client("dynamodb", region_name="us-west-2")

    def outside_call() -> None:
        dynamodb.list_tables()

    def handler(payload: Any) -> str:
        dynamodb.list_tables()
        # Another thread's call while the handler runs (the simulated cluster's, moto's) is not its.
        bystander = threading.Thread(target=outside_call)
        bystander.start()
        bystander.join()
        return "ok"

    fake = _FakeAws(handler)
    counter = CallCounter()
    with counter.counting(cast(LocalAws, fake)):
        fake.call_handler("Step", {"execution": {"name": "exec-1"}})
        fake.call_handler("Step", {"execution": {"name": "exec-1"}})
        fake.call_handler("Ingest", {"detail": {"node": {"name": "node-a"}}})
        dynamodb.list_tables()  # the test's own call, outside any invocation

    assert counter.by_execution["exec-1"].summary()["dynamodbByOperation"] == {"ListTables": 2}
    assert counter.ingest_by_node["node-a"].summary()["dynamodbCalls"] == 1
    assert set(counter.by_execution) == {"exec-1"}
