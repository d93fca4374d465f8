"""Defect 7: every call a Lambda makes is bounded by the invocation's remaining time.

A slow API server must end a step with a named, retried ``DeadlineExceededError`` in about the time
the invocation had left, never by running into the Lambda timeout (``Sandbox.Timedout``), and an
eviction round that runs out of time must say which pods it did not get to.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from nodeheal.deadline import LAMBDA_RESERVE_SECONDS, UNBOUNDED, Deadline, applied, current
from nodeheal.errors import DeadlineExceededError
from nodeheal.kube.client import DEFAULT_REQUEST_TIMEOUT, StaticClientProvider
from nodeheal.kube.nodes import NodeOperations
from nodeheal.kube.pods import PodOperations, PodOutcome
from nodeheal.kube.transport import JSON, HttpTransport, RawResponse, RequestTimeout
from nodeheal.lambda_support import workflow_handler
from nodeheal.runtime import (
    AWS_CONNECT_TIMEOUT_SECONDS,
    AWS_MAX_ATTEMPTS,
    AWS_READ_TIMEOUT_SECONDS,
    LambdaEnvironment,
    Runtime,
    aws_client_factory,
    using_runtime,
)
from nodeheal.sim.apiserver.objects import make_node, make_pod
from nodeheal.sim.apiserver.server import FakeKubeApiServer
from nodeheal.workflow.state import WorkflowState
from tests.unit.workflow.fakes import live_node, workflow_state

NODE = "ip-10-0-158-235.us-west-2.compute.internal"
#: Far below the configured read timeout (30 s), far above 2 s on a loaded machine.
GENEROUS_UPPER_BOUND = 10.0


def _transport(kube: FakeKubeApiServer) -> HttpTransport:
    return StaticClientProvider(kube.url, token="sim").transport("sim")


def _add_pods(kube: FakeKubeApiServer, count: int) -> None:
    kube.store.add(
        *(make_pod(f"w-{i:02d}", "ml", NODE, owner_kind="ReplicaSet", owner_name="w") for i in range(count))
    )


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class ClockAdvancingTransport:
    """The real transport, with each eviction taking ``seconds`` on a fake clock."""

    inner: HttpTransport
    clock: FakeClock
    seconds: float

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        timeout: RequestTimeout = DEFAULT_REQUEST_TIMEOUT,
        deadline: Deadline = UNBOUNDED,
    ) -> RawResponse:
        response = self.inner.request(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
            deadline=deadline,
        )
        if path.endswith("/eviction"):
            self.clock.now += self.seconds
        return response


@pytest.mark.slow  # waits on a real timeout: `make test` runs it, `make check` does not
def test_defect_7_a_call_with_2s_left_fails_as_deadline_exceeded_in_about_2s(kube: FakeKubeApiServer) -> None:
    kube.store.add(make_node(NODE, instance_id="i-0abc1234567890def"))
    kube.faults.add_latency(60.0, method="GET", path=r"/api/v1/nodes/")
    assert sum(DEFAULT_REQUEST_TIMEOUT) > 3 * GENEROUS_UPPER_BOUND

    started = time.monotonic()
    nodes = NodeOperations(_transport(kube), deadline=Deadline.after(2.0))
    with pytest.raises(DeadlineExceededError, match=f"get node {NODE}: no answer within"):
        nodes.get(NODE)
    elapsed = time.monotonic() - started

    assert 2.0 <= elapsed < GENEROUS_UPPER_BOUND


def test_defect_7_without_a_deadline_the_same_request_waits_for_the_answer(kube: FakeKubeApiServer) -> None:
    kube.store.add(make_node(NODE, instance_id="i-0abc1234567890def"))
    kube.faults.add_latency(1.0, method="GET", path=r"/api/v1/nodes/", count=1)

    node = NodeOperations(_transport(kube), deadline=Deadline.after(60.0)).get(NODE)

    assert node is not None and node.name == NODE


def test_defect_7_no_request_starts_with_less_than_a_second_left(kube: FakeKubeApiServer) -> None:
    kube.store.add(make_node(NODE, instance_id="i-0abc1234567890def"))
    kube.faults.reset_counts()

    with pytest.raises(DeadlineExceededError, match="not started"):
        NodeOperations(_transport(kube), deadline=Deadline.after(0.5)).get(NODE)

    assert kube.faults.count() == 0


def test_defect_7_an_eviction_round_near_its_deadline_stops_and_reports_the_pods_not_reached(
    kube: FakeKubeApiServer,
) -> None:
    _add_pods(kube, 5)
    clock = FakeClock()
    listed = PodOperations(_transport(kube)).list_on_node(NODE)
    kube.faults.reset_counts()
    # Each eviction takes 2.5 s of the 5 s left: the third would start with nothing left.
    transport = ClockAdvancingTransport(_transport(kube), clock, seconds=2.5)
    pods = PodOperations(transport, deadline=Deadline.after(5.0, clock=clock))

    report = pods.evict(listed, parallelism=1)

    assert [r.pod for r in report.evicted] == ["ml/w-00", "ml/w-01"]
    assert [r.pod for r in report.not_reached] == ["ml/w-02", "ml/w-03", "ml/w-04"]
    assert all(r.retryable and r.status is None for r in report.not_reached)
    assert "not sent" in report.not_reached[0].message
    assert report.to_json()["counts"]["not-reached"] == 3
    assert kube.faults.count("POST", r"/eviction$") == 2
    untouched = [kube.store.get("pods", f"w-{i:02d}", "ml") for i in (2, 3, 4)]
    assert all(not pod["metadata"].get("deletionTimestamp") for pod in untouched)


@pytest.mark.slow  # waits on a real timeout: `make test` runs it, `make check` does not
def test_defect_7_a_parallel_round_stops_starting_evictions_at_its_deadline(kube: FakeKubeApiServer) -> None:
    _add_pods(kube, 12)
    listed = PodOperations(_transport(kube)).list_on_node(NODE)
    kube.faults.reset_counts()
    # Two at a time, 1.5 s each, 3.5 s left: a third wave could start only with 0.5 s left.
    kube.faults.add_latency(1.5, method="POST", path=r"/eviction$")

    started = time.monotonic()
    report = PodOperations(_transport(kube), deadline=Deadline.after(3.5)).evict(listed, parallelism=2)
    elapsed = time.monotonic() - started

    assert [r.pod for r in report.results] == [p.key for p in listed]
    assert len(report.not_reached) >= 8
    assert kube.faults.count("POST", r"/eviction$") == 12 - len(report.not_reached)
    assert elapsed < 3.5 + 2.5


def test_defect_7_forced_deletion_near_its_deadline_reports_the_pods_not_reached(
    kube: FakeKubeApiServer,
) -> None:
    _add_pods(kube, 3)
    listed = PodOperations(_transport(kube)).list_on_node(NODE)
    kube.faults.reset_counts()

    report = PodOperations(_transport(kube), deadline=Deadline.after(0.5)).delete(
        listed, grace_seconds=0, parallelism=3
    )

    assert [r.outcome for r in report.results] == [PodOutcome.NOT_REACHED] * 3
    assert kube.faults.count() == 0


# -- where the deadline comes from ----------------------------------------------------------------


@dataclass
class FakeLambdaContext:
    remaining_ms: int
    function_name: str = "NodeHeal-probe"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-west-2:123456789012:function:NodeHeal-probe"
    aws_request_id: str = "request-1"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_defect_7_the_deadline_is_the_lambda_remaining_time_minus_the_reserve() -> None:
    clock = FakeClock(now=50.0)
    deadline = Deadline.from_lambda_context(FakeLambdaContext(remaining_ms=12_000), clock=clock)
    assert deadline.expires_at == 50.0 + 12.0 - LAMBDA_RESERVE_SECONDS
    # Less time left than the reserve: nothing may start.
    assert Deadline.from_lambda_context(FakeLambdaContext(remaining_ms=1_000), clock=clock).remaining() == 0.0


def test_defect_7_each_handler_invocation_gets_its_own_deadline_from_its_context() -> None:
    received: list[tuple[float, float]] = []

    def step(state: WorkflowState, rt: Runtime, deadline: Deadline) -> dict[str, Any]:
        received.append((deadline.remaining(), current().remaining()))
        return {"ok": True}

    handler = workflow_handler("probe", step)
    event = dict(workflow_state(live_node()).raw)
    rt = Runtime(LambdaEnvironment(region="us-west-2"), client_factory=lambda service: None)
    with using_runtime(rt):
        handler(event, FakeLambdaContext(remaining_ms=20_000))  # type: ignore[arg-type]
        handler(event, FakeLambdaContext(remaining_ms=8_000))  # type: ignore[arg-type]

    (first, first_aws), (second, second_aws) = received
    assert 20.0 - LAMBDA_RESERVE_SECONDS - 1.0 < first <= 20.0 - LAMBDA_RESERVE_SECONDS
    assert 8.0 - LAMBDA_RESERVE_SECONDS - 1.0 < second <= 8.0 - LAMBDA_RESERVE_SECONDS
    # AWS calls see the same deadline; outside the invocation there is none.
    assert abs(first - first_aws) < 1.0 and abs(second - second_aws) < 1.0
    assert current() is UNBOUNDED


def test_defect_7_aws_calls_are_not_attempted_when_they_could_outlast_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    dynamodb = aws_client_factory("us-west-2")("dynamodb")
    assert dynamodb.meta.config.connect_timeout == AWS_CONNECT_TIMEOUT_SECONDS
    assert dynamodb.meta.config.read_timeout == AWS_READ_TIMEOUT_SECONDS
    assert dynamodb.meta.config.retries == {"mode": "standard", "total_max_attempts": AWS_MAX_ATTEMPTS}

    # One attempt may take connect + read seconds; with less left, none is sent (sockets to AWS
    # are disabled in unit tests, so an attempt would fail differently).
    with (
        applied(Deadline.after(AWS_CONNECT_TIMEOUT_SECONDS + AWS_READ_TIMEOUT_SECONDS - 1.0)),
        pytest.raises(DeadlineExceededError, match="not sent"),
    ):
        dynamodb.get_item(TableName="ledger", Key={"pk": {"S": "x"}, "sk": {"S": "y"}})
