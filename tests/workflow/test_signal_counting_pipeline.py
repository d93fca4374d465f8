"""Counted signals through the deployed path (D22): a ``Node Event Observed`` put on the local bus
is matched by the synthesized counting rule, delivered to the counting function with the
environment the template gives it, counted in the moto ledger, and a crossing starts the deployed
state machine, whose Admit proves the window."""

from __future__ import annotations

import json
import uuid
from typing import Any

from nodeheal.actions import Action
from nodeheal.cdk.workflow_tasks import COUNT_SIGNALS_TASK
from nodeheal.events import DEFAULT_SOURCE, DETAIL_TYPE_NODE_EVENT, cluster_source
from nodeheal.sim.stack.rule_targets import Delivery
from nodeheal.timestamps import format_timestamp, utc_now
from tests.workflow.conftest import CLUSTER, Pipeline, wait_until

XID_92 = "NVRM: Xid (PCI:0000:53:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC error rate"


def node_event(
    pipeline: Pipeline, node_name: str, *, count: int, event_uid: str, event_type: str = "Warning"
) -> dict[str, Any]:
    """The exporter's PutEvents entry for one NPD Event about ``node_name`` (attached, D10)."""
    node = pipeline.node(node_name) or {}
    now = format_timestamp(utc_now(), millis=True)
    detail = {
        "schemaVersion": "1.1",
        "cluster": CLUSTER,
        "node": {
            "name": node_name,
            "uid": node["metadata"]["uid"],
            "instanceID": pipeline.instances[node_name],
            "bootID": node["status"]["nodeInfo"]["bootID"],
        },
        "event": {
            "uid": event_uid,
            "type": event_type,
            "reason": "GPUInformationalXid",
            "message": XID_92,
            "count": count,
            "source": "gpu-monitor",
            "firstTimestamp": now,
            "lastTimestamp": now,
        },
        "observedAt": now,
    }
    return {
        "Source": cluster_source(DEFAULT_SOURCE, CLUSTER),
        "DetailType": DETAIL_TYPE_NODE_EVENT,
        "Detail": json.dumps(detail),
    }


def counted(pipeline: Pipeline, deliveries: int) -> list[Delivery]:
    pump = pipeline.aws.start_rule_targets()
    wait_until(
        lambda: len([d for d in pump.deliveries if d.envelope.get("detail-type") == DETAIL_TYPE_NODE_EVENT])
        >= deliveries,
        timeout=30,
        what=f"{deliveries} Node Event(s) delivered to the counting function",
    )
    return [d for d in pump.deliveries if d.envelope.get("detail-type") == DETAIL_TYPE_NODE_EVENT]


def test_a_warning_node_event_on_the_bus_is_counted_in_the_instance_s_window(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a", workload_pods=0)
    instance = pipeline.instances["gpu-a"]
    event_uid = str(uuid.uuid4())
    pipeline.aws.start_rule_targets()

    # A Normal Event counts for nothing: the rule does not even route it.
    normal = node_event(pipeline, "gpu-a", count=1, event_uid=str(uuid.uuid4()), event_type="Normal")
    warning = node_event(pipeline, "gpu-a", count=1, event_uid=event_uid)
    assert all("ErrorCode" not in entry for entry in pipeline.aws.put_events(normal, warning))

    (delivery,) = counted(pipeline, 1)
    assert pipeline.aws.rule_targets[delivery.rule] == pipeline.aws.function_logical_id(
        COUNT_SIGNALS_TASK.handler
    )
    assert not delivery.error, delivery.error
    assert delivery.result["status"] == "counted", delivery.result
    assert delivery.result["signal"] == "xid-92"
    assert delivery.result["instanceId"] == instance
    ledger = pipeline.aws.runtime_for(pipeline.aws.function_logical_id(COUNT_SIGNALS_TASK.handler)).ledger
    window = ledger.read_signal_window(CLUSTER, instance, "xid-92")
    assert window is not None
    assert window.instance_id == instance
    assert window.count_since(0) == 1


def test_a_crossing_starts_the_deployed_state_machine_and_admit_proves_the_window(pipeline: Pipeline) -> None:
    pipeline.add_gpu_node("gpu-a", workload_pods=0)
    instance = pipeline.instances["gpu-a"]
    event_uid = str(uuid.uuid4())
    pipeline.aws.start_rule_targets()
    pipeline.aws.put_events(node_event(pipeline, "gpu-a", count=1, event_uid=event_uid))
    counted(pipeline, 1)
    # client-go's aggregation: the same Event patched to count 12, past Xid 92's 10 in 24 h.
    pipeline.aws.put_events(node_event(pipeline, "gpu-a", count=12, event_uid=event_uid))
    crossing = counted(pipeline, 2)[-1]

    assert crossing.result["status"] == "crossed", crossing.result
    # The window keeps no more occurrence times than its rule needs (a bounded item).
    assert crossing.result["count"] >= 10
    execution = pipeline.aws.wait_for_execution(crossing.result["executionArn"], timeout=90)
    assert execution["status"] == "SUCCEEDED", execution
    record = pipeline.only_record("gpu-a")
    # Xid 92's default is an alert: a person decides on the RMA; nothing was cordoned.
    assert record.action is Action.ALERT, record
    assert record.instance_id == instance
    assert not (pipeline.node("gpu-a") or {}).get("spec", {}).get("unschedulable")
