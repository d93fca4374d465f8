"""The remediation workflow under failing dependencies: Kubernetes API, EC2, a crashed execution's lock.

Each test runs the synthesized state machine in moto against the fake API server (see
``tests/workflow``) and checks that every remediation ends in a defined, recorded state, that
retries stay bounded, and that no instance is ever terminated twice.
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodeheal.actions import Action
from nodeheal.sim.apiserver.request_faults import Decision, injected_error
from nodeheal.timestamps import utc_now
from nodeheal.workflow.locks import LockClaim
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import CLUSTER, XID_48, XID_79, Pipeline, wait_until

#: Outcomes a remediation may end in when its dependencies fail: each is recorded and explained.
DEFINED_OUTCOMES = {Outcome.REPLACED, Outcome.FAILED, Outcome.SKIPPED, Outcome.REBOOTED, Outcome.REFUSED}


class TerminateCounter:
    """Counts TerminateInstances calls per instance as EC2 received them."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        pipeline.aws.on_instances_terminated.append(self._terminated)

    def _terminated(self, instance_ids: list[str]) -> None:
        with self._lock:
            for instance_id in instance_ids:
                self.calls[instance_id] = self.calls.get(instance_id, 0) + 1


def _flaky_kubernetes(pipeline: Pipeline, rate: float, seed: int) -> dict[str, int]:
    """``rate`` of the API server's requests answer 500 (half) or hang and drop (half)."""
    faults = pipeline.server.faults
    original = faults.decide
    rng = random.Random(seed)
    lock = threading.Lock()
    injected = {"500": 0, "timeout": 0, "requests": 0}

    def decide(method: str, path: str, route: str) -> Decision:
        decision = original(method, path, route)
        with lock:
            injected["requests"] += 1
            roll = rng.random()
        if roll < rate / 2:
            injected["500"] += 1
            return Decision(decision.latency, injected_error(500), None)
        if roll < rate:
            injected["timeout"] += 1
            return Decision(decision.latency, None, 0.2)
        return decision

    faults.decide = decide  # type: ignore[method-assign]
    return injected


def test_kubernetes_api_failing_10_percent_of_requests(pipeline: Pipeline) -> None:
    nodes = [f"gpu-{index}" for index in range(4)]
    for name in nodes:
        pipeline.add_gpu_node(name)
    terminations = TerminateCounter(pipeline)
    injected = _flaky_kubernetes(pipeline, rate=0.10, seed=20261121)

    arns = []
    for name in nodes[:2]:
        result = pipeline.deliver(pipeline.fault(name, "GPUProblem", "True", "GPUHardwareError", XID_79))
        assert result["status"] == "started"
        arns.append(result["executionArn"])
    executions = [pipeline.aws.wait_for_execution(arn, timeout=120) for arn in arns]

    assert injected["500"] + injected["timeout"] > 0, injected
    for name, execution in zip(nodes[:2], executions, strict=True):
        assert execution["status"] in ("SUCCEEDED", "FAILED")
        record = pipeline.only_record(name)
        assert record.outcome in DEFINED_OUTCOMES, record.summary
        assert pipeline.lock_holder(name) is None, "a failed remediation must release its lock"
        if record.outcome is Outcome.FAILED:
            # Which step ran out of retries depends on where the injected faults land: a failure
            # before or during cordon leaves the node as it was, a later one leaves it cordoned,
            # and the record says which.
            node = pipeline.node(name)
            assert node is not None
            cordoned = bool(node["spec"].get("unschedulable"))
            if "node left cordoned for a person" in record.summary:
                assert cordoned, "failed after cordon: the node stays cordoned"
            else:
                assert "node was not cordoned" in record.summary, record.summary
        # Retries are bounded by the definition: each task at most 1 + retry.maxAttempts (2) tries
        # for transient errors, plus Lambda service retries that never fire here.
        history = pipeline.aws.history(execution["executionArn"])
        tries: dict[str, int] = {}
        current = ""
        for event in history:
            if event["type"] == "TaskStateEntered":
                current = event["stateEnteredEventDetails"]["name"]
            elif event["type"] == "LambdaFunctionScheduled":
                tries[current] = tries.get(current, 0) + 1
        drain_rounds = max(1, tries.get("Evict pods", 0))
        for state, count in tries.items():
            limit = (1 + 2) * drain_rounds if state == "Evict pods" else 1 + 2 + 6
            assert count <= limit, f"{state} tried {count} times"
    assert all(count == 1 for count in terminations.calls.values()), terminations.calls
    untouched = [pipeline.aws.instance_state(pipeline.instances[name]) for name in nodes[2:]]
    assert untouched == ["running", "running"]


class FlakyEc2:
    """The workflow's EC2 client, with scripted errors in front of TerminateInstances/RebootInstances."""

    def __init__(self, real: Any, errors: dict[str, list[str]]) -> None:
        self._real = real
        self._errors = {operation: list(codes) for operation, codes in errors.items()}
        self.attempts: dict[str, int] = {}

    def _maybe_fail(self, operation: str) -> None:
        self.attempts[operation] = self.attempts.get(operation, 0) + 1
        pending = self._errors.get(operation) or []
        if pending:
            code = pending.pop(0)
            raise ClientError({"Error": {"Code": code, "Message": f"injected {code}"}}, operation)

    def terminate_instances(self, **kwargs: Any) -> Any:
        self._maybe_fail("TerminateInstances")
        return self._real.terminate_instances(**kwargs)

    def reboot_instances(self, **kwargs: Any) -> Any:
        self._maybe_fail("RebootInstances")
        return self._real.reboot_instances(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _install_flaky_ec2(pipeline: Pipeline, errors: dict[str, list[str]]) -> FlakyEc2:
    real_client = pipeline.aws.client
    flaky = FlakyEc2(real_client("ec2"), errors)

    def client(service: str) -> Any:
        return flaky if service == "ec2" else real_client(service)

    # Runtimes are built on first use with this factory, so every task sees the flaky client.
    pipeline.aws.client = client  # type: ignore[method-assign]
    return flaky


def test_terminate_throttled_then_succeeds(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    flaky = _install_flaky_ec2(pipeline, {"TerminateInstances": ["RequestLimitExceeded", "Throttling"]})
    terminations = TerminateCounter(pipeline)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    assert pipeline.only_record("gpu-a").outcome is Outcome.REPLACED
    assert flaky.attempts["TerminateInstances"] == 3  # two throttled, one accepted
    assert terminations.calls == {instance: 1}


def test_terminate_throttled_beyond_the_retry_budget_is_recorded_as_failed(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    flaky = _install_flaky_ec2(pipeline, {"TerminateInstances": ["RequestLimitExceeded"] * 10})

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "FAILED"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.FAILED and record.error == "Ec2ThrottledError"
    assert flaky.attempts["TerminateInstances"] == 3  # 1 + retry.maxAttempts (2)
    assert pipeline.aws.instance_state(instance) == "running"
    node = pipeline.node("gpu-a")
    assert node is not None and node["spec"]["unschedulable"] is True  # left cordoned for a person
    assert pipeline.lock_holder("gpu-a") is None


def test_reboot_refused_while_the_instance_is_in_a_transition_is_retried(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    flaky = _install_flaky_ec2(pipeline, {"RebootInstances": ["IncorrectInstanceState"]})

    def rebooted(instance_ids: list[str]) -> None:
        if instance in instance_ids:
            pipeline.store.reboot_node("gpu-a")
            pipeline.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "GPUs healthy")

    pipeline.aws.on_instances_rebooted.append(rebooted)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_48))

    assert execution["status"] == "SUCCEEDED"
    assert pipeline.only_record("gpu-a").outcome is Outcome.REBOOTED
    assert flaky.attempts["RebootInstances"] == 2


def _ledger(pipeline: Pipeline) -> Any:
    return pipeline.aws.runtime_for(pipeline.aws.function_logical_id("lambdas.record.handler")).ledger


def test_lock_of_a_crashed_execution_expires_and_the_node_heals(pipeline: Pipeline) -> None:
    instance = pipeline.add_gpu_node("gpu-a")
    ledger = _ledger(pipeline)
    # An execution took the lock 20 minutes ago with a 10-minute TTL and never came back.
    crashed_at = utc_now() - timedelta(minutes=20)
    original_clock = ledger._clock
    ledger._clock = lambda: crashed_at
    try:
        claim = LockClaim("gpu-a", "GPUProblem", Action.REPLACE, crashed_at)
        assert ledger.acquire_lock(
            CLUSTER, instance, "crashed-execution", timedelta(minutes=10), claim
        ).acquired
    finally:
        ledger._clock = original_clock
    # An expired lock has no holder, even before anything overwrites it.
    assert pipeline.lock_holder("gpu-a") is None

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "SUCCEEDED"
    assert pipeline.only_record("gpu-a").outcome is Outcome.REPLACED
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    assert pipeline.lock_holder("gpu-a") is None


def test_defect_3_a_fault_behind_a_live_lock_waits_and_acts_when_the_holder_ends(pipeline: Pipeline) -> None:
    """A holder that mutated and is as severe is never run beside, and never dropped behind."""
    instance = pipeline.add_gpu_node("gpu-a")
    ledger = _ledger(pipeline)
    claim = LockClaim("gpu-a", "KernelDeadlock", Action.REPLACE, utc_now())
    assert ledger.acquire_lock(CLUSTER, instance, "running-execution", timedelta(minutes=10), claim).acquired
    ledger.claim_mutation(CLUSTER, instance, "running-execution", step="cordon", busy_for=timedelta(0))

    started = pipeline.deliver(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))
    arn = started["executionArn"]
    wait_until(
        lambda: pipeline.aws.state_names(arn).count("Wait for the node's lock") >= 2,
        timeout=60,
        what="the newcomer waiting behind the holder",
    )
    assert pipeline.aws.instance_state(instance) == "running", "nothing acts beside the holder"
    assert ledger.release_lock(CLUSTER, instance, "running-execution")  # the holder ends, not acting

    execution = pipeline.aws.wait_for_execution(arn, timeout=90)
    assert execution["status"] == "SUCCEEDED"
    assert pipeline.only_record("gpu-a").outcome is Outcome.REPLACED
    assert pipeline.aws.instance_state(instance) in ("shutting-down", "terminated")
    assert pipeline.lock_holder("gpu-a") is None


@pytest.mark.parametrize("seed", [1, 2])
def test_kubernetes_api_outage_during_admit_ends_recorded(pipeline: Pipeline, seed: int) -> None:
    """Every request fails: the remediation still ends in a record, nothing was terminated."""
    instance = pipeline.add_gpu_node("gpu-a")
    _flaky_kubernetes(pipeline, rate=1.0, seed=seed)

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    assert execution["status"] == "FAILED"
    record = pipeline.only_record("gpu-a")
    assert record.outcome is Outcome.FAILED and record.error == "KubernetesApiUnavailableError"
    assert pipeline.aws.instance_state(instance) == "running"
    assert pipeline.lock_holder("gpu-a") is None
