"""Exporter hot-path throughput: raw JSON vs the ``kubernetes`` client's models, in one run.

Replays the status churn of a 5,000-node cluster (every node posts a status update every 10 s,
each a ~15 KB Node; 1% of updates flip a GPU condition) through the exporter's transition and
publish path (tracker -> bounded queue -> batching publisher with an in-memory EventBridge) and
reports, per path, node updates processed per second of CPU time on one core and peak RSS. Each
path runs in its own process so the peak RSS of one does not hide the other's.

Node Events ship too, as they do by default: Warning Events about the Nodes arrive at a stated
rate, by default one per node per minute (``--events-per-node-minute``; 83 a second on 5,000
nodes, one for every six node updates), as watch lines of ~1.3 KB core/v1 Events through the
exporter's NodeEventShipper (dedup, the instance looked up in the Node watch's cache, the detail
built and bounded) into the same queue and publisher. That rate is heavy: client-go's recorder,
which NPD uses, lets one source send a burst of 25 Events about a Node and then one every 300 s
(``defaultSpamBurst``, ``defaultSpamQPS`` in k8s.io/client-go tools/record/events_cache.go), so a
sustained one a minute takes five sources all reporting at their ceiling. Each node has three
Event objects (reasons); an occurrence is the first write of one or a ``count`` +1 of it, as the
recorder aggregates. The CPU time counted is the whole of both; the throughput stated is node
updates per second of it.

    .venv/bin/python benchmarks/exporter_throughput.py            # both paths, table
    .venv/bin/python benchmarks/exporter_throughput.py --path raw --json
    .venv/bin/python benchmarks/exporter_throughput.py --events-per-node-minute 0   # Nodes only

Targets (issue 3, and issue 31 with Events on): >= 5,000 updates/s on one core (10x the churn of
a 5,000-node cluster) and < 150 MB RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.node_events import NodeEventShipper
from nodeheal.exporter.pipeline import Pipeline
from nodeheal.exporter.publisher import EventPublisher
from nodeheal.exporter.queue import EventQueue
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.sim.apiserver.objects import make_event, make_node

NODES = 5_000
TARGET_BYTES = 16_000
FLIP_EVERY = 100  # 1% of updates flip GPUProblem
TEMPLATES = 50  # distinct node shapes; names/uids are substituted so memory stays the exporter's
DRAIN_EVERY = 500
STATUS_SECONDS = 10  # the kubelet's nodeStatusUpdateFrequency: one update per node per 10 s
EVENTS_PER_NODE_MINUTE = 1.0
#: Event objects per node (one per reason): their occurrences are count patches of these.
EVENT_REASONS = ("GPUInformationalXid", "NvidiaXID92Warning", "DCGMHealthWarning")


class NullEvents:
    """EventBridge that accepts everything, so the publish path runs without a network."""

    def __init__(self) -> None:
        self.entries = 0

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803 - boto3 casing
        self.entries += len(Entries)
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "x"} for _ in Entries]}


def _template(index: int, bad: bool) -> bytes:
    """A watch event line for a realistic Node, padded with images as real GPU nodes carry them."""
    node = make_node("__NAME__", instance_id=f"i-{index:017x}")
    node["metadata"]["uid"] = "__UID__"
    node["metadata"]["resourceVersion"] = "__RV__"
    images = node["status"]["images"]
    n = 0
    while len(json.dumps(node)) < TARGET_BYTES:
        images.append(
            {
                "names": [
                    f"123456789012.dkr.ecr.us-west-2.amazonaws.com/training/image-{index}-{n}@sha256:{n:064x}",
                    f"123456789012.dkr.ecr.us-west-2.amazonaws.com/training/image-{index}-{n}:v{n}",
                ],
                "sizeBytes": 1_000_000_000 + n,
            }
        )
        n += 1
    for condition in node["status"]["conditions"]:
        if condition["type"] == "GPUProblem" and bad:
            condition.update(
                {
                    "status": "True",
                    "reason": "GPUHardwareError",
                    "message": "NVRM: Xid (PCI:0000:3b:00): 79, pid=2731, GPU has fallen off the bus.",
                }
            )
    return json.dumps({"type": "MODIFIED", "object": node}, separators=(",", ":")).encode()


def _line(templates: list[tuple[bytes, bytes]], i: int, bad: bool, rv: int) -> bytes:
    raw = templates[i % TEMPLATES][1 if bad else 0]
    return (
        raw.replace(b"__NAME__", f"ip-10-0-{i // 250}-{i % 250}.us-west-2.compute.internal".encode())
        .replace(b"__UID__", f"00000000-0000-0000-0000-{i:012d}".encode())
        .replace(b"__RV__", str(rv).encode())
    )


def _event_template(reason: str) -> bytes:
    """A watch line of a core/v1 Warning Event about a Node, as NPD's recorder leaves it."""
    node = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "__NAME__", "uid": "__UID__"}}
    event = make_event(
        "__NAME__.__EUID__",
        "default",
        involved=node,
        reason=reason,
        message=(
            "NVRM: Xid (PCI:0000:53:00): 92, pid=2731, name=python3, High single-bit ECC error rate "
            "(SBE count 1024 in the last 60 s on GPU 3, serial 1652823000000)"
        ),
        component="custom-plugin-monitor",
        count=1,
    )
    event["metadata"].update(
        {
            "uid": "__EUID__",
            "resourceVersion": "__RV__",
            "creationTimestamp": "2026-11-21T10:00:00Z",
            # What the API server returns with every Event (server-side apply's bookkeeping).
            "managedFields": [
                {
                    "manager": "node-problem-detector",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-21T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:count": {},
                        "f:firstTimestamp": {},
                        "f:involvedObject": {},
                        "f:lastTimestamp": {},
                        "f:message": {},
                        "f:reason": {},
                        "f:reportingComponent": {},
                        "f:source": {"f:component": {}, "f:host": {}},
                        "f:type": {},
                    },
                }
            ],
        }
    )
    event["firstTimestamp"] = "2026-11-21T10:00:00Z"
    event["lastTimestamp"] = "__LAST__"
    event["count"] = "__COUNT__"
    text = json.dumps({"type": "__TYPE__", "object": event}, separators=(",", ":"))
    return text.replace('"__COUNT__"', "__COUNT__").encode()


def _event_line(templates: list[bytes], node: int, reason: int, count: int, rv: int) -> bytes:
    name = f"ip-10-0-{node // 250}-{node % 250}.us-west-2.compute.internal".encode()
    return (
        templates[reason]
        .replace(b"__TYPE__", b"ADDED" if count == 1 else b"MODIFIED")
        .replace(b"__NAME__", name)
        .replace(b"__UID__", f"00000000-0000-0000-0000-{node:012d}".encode())
        .replace(b"__EUID__", f"e0000000-0000-0000-{reason:04d}-{node:012d}".encode())
        .replace(b"__RV__", str(rv).encode())
        .replace(b"__LAST__", f"2026-11-21T{10 + count // 60:02d}:{count % 60:02d}:00Z".encode())
        .replace(b"__COUNT__", str(count).encode())
    )


def _model_view(api_client: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """What `watch.Watch().stream(list_node)` does per event (re-serialise, deserialize into
    V1Node), then the minimal dict the tracker needs, read from the model."""
    from kubernetes.client.models import V1Node

    node = api_client.deserialize(json.dumps(obj), V1Node, "application/json")
    conditions = [
        {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "lastTransitionTime": c.last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ")
            if c.last_transition_time
            else None,
        }
        for c in (node.status.conditions or [])
    ]
    return {
        "metadata": {"name": node.metadata.name, "uid": node.metadata.uid, "labels": node.metadata.labels},
        "spec": {"providerID": node.spec.provider_id},
        "status": {"conditions": conditions},
    }


def run(path: str, rounds: int, events_per_node_minute: float = EVENTS_PER_NODE_MINUTE) -> dict[str, Any]:
    import kubernetes

    api_client = kubernetes.client.ApiClient()
    settings = ExporterSettings(cluster_name="bench")
    metrics = Metrics()
    queue = EventQueue(settings.queue_capacity)
    tracker = TransitionTracker(settings.cluster_name, settings.watches)
    pipeline = Pipeline(tracker, queue, metrics, leading=True, replay_seconds=300, replay_capacity=10_000)
    sink = NullEvents()
    publisher = EventPublisher(
        sink, event_bus="bus", source="nodeheal.exporter", queue=queue, metrics=metrics
    )
    shipper = NodeEventShipper(settings.cluster_name, pipeline.submit, metrics, pipeline.cached_node)
    shipper.begin_list()
    shipper.end_list()  # no Events before the run: every one that arrives is news
    event_templates = [_event_template(reason) for reason in EVENT_REASONS]
    # Node updates per Event: each node updates every STATUS_SECONDS and sends
    # events_per_node_minute Events a minute.
    events_per_update = events_per_node_minute * STATUS_SECONDS / 60
    event_counts = [[0] * len(EVENT_REASONS) for _ in range(NODES)]
    templates = [(_template(i, False), _template(i, True)) for i in range(TEMPLATES)]
    bad = [False] * NODES

    # The initial list (not timed): the tracker's baseline.
    pipeline.begin_list()
    for start in range(0, NODES, 500):
        pipeline.list_page(
            [json.loads(_line(templates, i, False, 1))["object"] for i in range(start, start + 500)]
        )
    pipeline.end_list()

    def drain() -> None:
        while batch := queue.take_batch(10, 256 * 1024, timeout=0):
            publisher.publish(batch)

    cpu = 0.0
    wall = 0.0
    updates = 0
    node_events = 0
    owed = 0.0
    rv = 2
    for _ in range(rounds):
        for i in range(NODES):
            rv += 1
            if rv % FLIP_EVERY == 0:
                bad[i] = not bad[i]
            line = _line(templates, i, bad[i], rv)  # generation is not the exporter's cost
            # The Events due by now, about nodes spread over the cluster (a stride coprime to
            # NODES), each the next occurrence of one of that node's Event objects. Their
            # resourceVersions do not touch rv, which paces the 1% flips of node updates.
            owed += events_per_update
            event_lines = []
            while owed >= 1:
                owed -= 1
                about = (node_events * 7919) % NODES
                reason = node_events % len(EVENT_REASONS)
                event_counts[about][reason] += 1
                event_lines.append(
                    _event_line(event_templates, about, reason, event_counts[about][reason], node_events)
                )
                node_events += 1
            c0, w0 = time.process_time(), time.perf_counter()
            event = json.loads(line)
            obj = event["object"] if path == "raw" else _model_view(api_client, event["object"])
            pipeline.node_changed(obj)
            for raw in event_lines:
                watched = json.loads(raw)
                shipper.on_event(watched["type"], watched["object"])
            updates += 1
            if updates % DRAIN_EVERY == 0:
                drain()
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
    c0 = time.process_time()
    drain()
    cpu += time.process_time() - c0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "path": path,
        "updates": updates,
        "node_bytes": len(templates[0][0]),
        "events_per_node_minute": events_per_node_minute,
        "node_events": node_events,
        "node_events_shipped": int(metrics.value("node_events_seen_total", outcome="shipped")),
        "node_events_unattributed": int(metrics.value("node_events_unattributed_total")),
        "event_bytes": len(_event_line(event_templates, 0, 0, 1, 1)),
        "published": sink.entries,
        "dropped": int(metrics.total("events_dropped_total")),
        "cpu_seconds": round(cpu, 3),
        "updates_per_cpu_second": round(updates / cpu),
        "peak_rss_mb": round(peak_kib / 1024, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--path", choices=("raw", "models", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=3, help="status updates per node (default 3)")
    parser.add_argument(
        "--events-per-node-minute",
        type=float,
        default=EVENTS_PER_NODE_MINUTE,
        help=f"Warning Events about each node per minute (default {EVENTS_PER_NODE_MINUTE:g}; 0: none)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per path")
    args = parser.parse_args()
    if args.path != "both":
        result = run(args.path, args.rounds, args.events_per_node_minute)
        print(json.dumps(result) if args.json else result)
        return 0
    results = []
    for path in ("raw", "models"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--path",
                path,
                "--rounds",
                str(args.rounds),
                "--events-per-node-minute",
                str(args.events_per_node_minute),
                "--json",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(out.stdout))
    if args.json:
        for result in results:
            print(json.dumps(result))
        return 0
    print(
        f"{NODES} nodes, ~{results[0]['node_bytes'] // 1000} KB each, "
        f"{args.rounds} updates per node, 1% flips; "
        f"{args.events_per_node_minute:g} Warning Event(s) per node per minute "
        f"(~{results[0]['event_bytes'] / 1000:.1f} KB each) shipped as Node Events"
    )
    print(
        f"{'path':<8}{'updates':>9}{'events':>8}{'published':>11}{'dropped':>9}"
        f"{'updates/s/core':>16}{'peak RSS MB':>13}"
    )
    for r in results:
        print(
            f"{r['path']:<8}{r['updates']:>9}{r['node_events_shipped']:>8}{r['published']:>11}"
            f"{r['dropped']:>9}{r['updates_per_cpu_second']:>16}{r['peak_rss_mb']:>13}"
        )
    raw, models = results
    print(f"raw JSON is {raw['updates_per_cpu_second'] / models['updates_per_cpu_second']:.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
