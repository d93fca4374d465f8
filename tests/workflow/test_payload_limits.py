"""Defect 4 (issue 10), D17: the largest event the contract allows runs the whole workflow with every
state under 64 KiB, and a state over 256 KiB fails the execution as Step Functions fails it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from nodeheal.events import MAX_LABELS_BYTES
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.payload import MAX_MESSAGE_BYTES, STATE_BUDGET_BYTES, STATE_LIMIT_BYTES, json_bytes
from nodeheal.sim.apiserver.objects import make_node, make_pdb, make_pod
from nodeheal.workflow.records import Outcome
from tests.workflow.conftest import CLUSTER, Pipeline

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731, name=python3, GPU has fallen off the bus."
XID_154 = (
    "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) "
    "to 0x2 (Node Reboot Required)"
)
#: The longest a Node name can be (a DNS subdomain: 253 characters).
LONG_NODE = ".".join(["ip-10-0-1-1", *(["a" * 61] * 3), "z" * (253 - 12 - 3 * 62)])
#: The longest label: a 253-character prefix, "/", a 63-character name; values are 63 characters.
LONG_LABELS = {f"{'p' * 240}.example.{i:04d}/{'n' * 63}": "v" * 63 for i in range(200)}


def kernel_noise(lines: int) -> str:
    return "".join(
        f"kernel: nvidia-nvswitch2: link {i:05d} training retried, state ok ...\n" for i in range(lines)
    )


def payload_sizes(history: list[dict[str, Any]]) -> Iterator[tuple[str, int]]:
    """(event type, bytes) of every state input/output and task payload in an execution history."""
    for event in history:
        for key, details in event.items():
            if not key.endswith("EventDetails") or not isinstance(details, dict):
                continue
            for field in ("input", "output", "parameters"):
                if isinstance(details.get(field), str):
                    yield event["type"], len(details[field].encode("utf-8"))


def add_maximal_node(pipeline: Pipeline) -> None:
    """A GPU node with the longest name, 200 of the longest labels, and 12 pods with the longest
    names that a PodDisruptionBudget keeps from being evicted (so the drain results fill up)."""
    instance = pipeline.aws.run_instance(cluster=CLUSTER)
    pipeline.instances[LONG_NODE] = instance
    # The hostname label is a label value (at most 63 characters), so it cannot be the 253-character
    # name; a kubelet's hostname never is one either (Linux caps it at 64).
    labels = {**LONG_LABELS, "kubernetes.io/hostname": LONG_NODE[:63]}
    pipeline.store.add(make_node(LONG_NODE, instance_id=instance, cluster=CLUSTER, extra_labels=labels))
    namespace = "t" * 63
    for index in range(12):
        pipeline.store.add(
            make_pod(
                f"{'trainer-' * 30}{index:05d}"[:253],
                namespace,
                LONG_NODE,
                owner_kind="Job",
                gpus=4,
                labels={"app": "trainer"},
            )
        )
    pipeline.store.add(make_pdb("trainer", namespace, {"app": "trainer"}, min_available="100%"))


def test_defect_4_the_largest_event_runs_the_whole_workflow_under_64_kib(
    pipeline: Pipeline, record_property: Any
) -> None:
    add_maximal_node(pipeline)
    # A detector writes a ~254 KB message (the Xid line in the middle) and a 20 KB reason.
    message = f"{kernel_noise(1900)}{XID_79}\n{kernel_noise(1900)}"
    assert len(message.encode()) > 250_000
    pipeline.store.set_node_condition(LONG_NODE, "GPUProblem", "True", "GPUHardwareError" * 1250, message)
    # The exporter's own code turns the Node into the event it ships.
    tracker = TransitionTracker(CLUSTER, ExporterSettings(cluster_name=CLUSTER).watches)
    node = pipeline.node(LONG_NODE)
    assert node is not None
    (event,) = tracker.observe(node)
    shipped = json.loads(event.to_json())
    assert json_bytes(shipped["condition"]["message"]) <= MAX_MESSAGE_BYTES
    assert len(json.dumps(shipped["node"]["labels"], separators=(",", ":"))) <= MAX_LABELS_BYTES
    # By the time admit reads the node the detector has written another maximal message, so the
    # state carries two different messages: the event's and the live one admit classified.
    pipeline.store.set_node_condition(
        LONG_NODE, "GPUProblem", "True", "GPUHardwareError" * 1250, f"{kernel_noise(3800)}{XID_154}\n{XID_79}"
    )

    execution = pipeline.run(shipped, timeout=120)

    assert execution["status"] == "SUCCEEDED", execution
    record = pipeline.only_record(LONG_NODE)
    assert record.outcome is Outcome.REPLACED and record.xid == 79
    assert record.pdb_blocked >= 12 and record.pods_forced == 12
    assert XID_154 in record.condition["message"] and XID_79 in record.condition["message"]
    history = pipeline.aws.history(execution["executionArn"])
    largest = max(size for _, size in payload_sizes(history))
    record_property("largest_state_bytes", largest)
    assert largest < STATE_BUDGET_BYTES, f"largest state {largest} bytes"
    drain = next(
        json.loads(e["stateExitedEventDetails"]["output"])["drain"]
        for e in reversed(history)
        if e.get("stateExitedEventDetails", {}).get("name") == "Force-delete remaining pods"
    )
    assert len(drain["lastBlocked"]) == 10  # the drain results were at their largest too
    (notification,) = pipeline.aws.notifications()
    assert "Xid 79" in notification["message"] and XID_154 in notification["message"]


@pytest.mark.parametrize(
    "oversize",
    [300 * 1024, STATE_LIMIT_BYTES - 4 * 1024],
    ids=["task-result-over-256-kib", "state-over-256-kib-after-result-path"],
)
def test_defect_4_the_harness_fails_a_state_over_256_kib_with_data_limit_exceeded(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, oversize: int
) -> None:
    import lambdas.cordon

    real_cordon = lambdas.cordon.handler

    def oversized_cordon(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {**real_cordon(event, context), "padding": "x" * oversize}

    monkeypatch.setattr(lambdas.cordon, "handler", oversized_cordon)
    pipeline.add_gpu_node("gpu-a")

    execution = pipeline.run(pipeline.fault("gpu-a", "GPUProblem", "True", "GPUHardwareError", XID_79))

    # As in AWS: States.DataLimitExceeded is terminal, the "States.ALL" Catch never runs, so no
    # Record failure, no record, no notification, and the lock waits for its TTL. D17 exists
    # so that NodeHeal's own states never come near this.
    assert execution["status"] == "FAILED"
    assert execution.get("error") == "States.DataLimitExceeded"
    states = pipeline.aws.state_names(execution["executionArn"])
    assert "Cordon" in states and "Record failure" not in states
    assert pipeline.records("gpu-a") == []
    assert pipeline.lock_holder("gpu-a") == execution["name"]
