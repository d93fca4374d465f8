"""Warning Node Events through the whole local pipeline (D22): what the exporter puts on the bus
as ``Node Event Observed`` reaches the counting function by the synthesized rule, and is counted
in the instance's window in the local ledger."""

from __future__ import annotations

import uuid

import pytest

from nodeheal.events import DETAIL_TYPE_NODE_EVENT, node_identity
from nodeheal.sim.cluster.layout import ClusterLayout
from nodeheal.sim.local_pipeline.wiring import LocalPipeline, wait_until
from nodeheal.sim.stack.process_templates import synthesized
from nodeheal.timestamps import format_timestamp, utc_now

# a run of the full local pipeline: `make test` runs it, `make check` does not
pytestmark = pytest.mark.slow

XID_92 = "NVRM: Xid (PCI:0000:53:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC error rate"


def test_a_node_event_on_the_local_bus_lands_in_the_instance_s_window() -> None:
    layout = ClusterLayout(gpu_nodes=1, training_workers=0, notebook_gpus=0)
    with LocalPipeline(synthesized(), layout=layout) as pipeline:
        node_name = pipeline.cluster.gpu_nodes[0]
        node = node_identity(pipeline.store.get("nodes", node_name))
        now = format_timestamp(utc_now(), millis=True)
        detail = {
            "schemaVersion": "1.1",
            "cluster": pipeline.cluster_name,
            "node": {
                "name": node.name,
                "uid": node.uid,
                "instanceID": node.instance_id,
                "bootID": node.boot_id,
            },
            "event": {
                "uid": str(uuid.uuid4()),
                "type": "Warning",
                "reason": "GPUInformationalXid",
                "message": XID_92,
                "count": 1,
                "source": "gpu-monitor",
                "firstTimestamp": now,
                "lastTimestamp": now,
            },
            "observedAt": now,
        }
        (entry,) = pipeline.publish(detail, detail_type=DETAIL_TYPE_NODE_EVENT)
        assert "ErrorCode" not in entry, entry

        wait_until(
            lambda: pipeline.timeline.events("counted", node=node_name),
            timeout=30,
            what="the counting function's verdict on the timeline",
        )
        matched = pipeline.timeline.events("matched", node=node_name)
        assert [e for e in matched if e.text.endswith("-> count-signals function")], matched
        (counted,) = pipeline.timeline.events("counted", node=node_name)
        assert counted.source == "count-signals"
        window = pipeline.ledger.read_signal_window(pipeline.cluster_name, node.instance_id, "xid-92")
        assert window is not None
        assert window.instance_id == node.instance_id
        assert window.count_since(0) == 1
