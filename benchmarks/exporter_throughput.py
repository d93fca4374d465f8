"""Exporter hot-path throughput: raw JSON vs the ``kubernetes`` client's models, in one run.

Replays the status churn of a 5,000-node cluster (every node posts a status update every 10 s,
each a ~15 KB Node; 1% of updates flip a GPU condition) through the exporter's transition and
publish path (tracker -> bounded queue -> batching publisher with an in-memory EventBridge) and
reports, per path, node updates processed per second of CPU time on one core and peak RSS. Each
path runs in its own process so the peak RSS of one does not hide the other's.

    .venv/bin/python benchmarks/exporter_throughput.py            # both paths, table
    .venv/bin/python benchmarks/exporter_throughput.py --path raw --json

Targets (issue 3): >= 5,000 updates/s on one core (10x the churn of a 5,000-node cluster) and
< 150 MB RSS.
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
from nodeheal.exporter.pipeline import Pipeline
from nodeheal.exporter.publisher import EventPublisher
from nodeheal.exporter.queue import EventQueue
from nodeheal.exporter.settings import ExporterSettings
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.sim.apiserver.objects import make_node

NODES = 5_000
TARGET_BYTES = 16_000
FLIP_EVERY = 100  # 1% of updates flip GPUProblem
TEMPLATES = 50  # distinct node shapes; names/uids are substituted so memory stays the exporter's
DRAIN_EVERY = 500


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


def run(path: str, rounds: int) -> dict[str, Any]:
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
    rv = 2
    for _ in range(rounds):
        for i in range(NODES):
            rv += 1
            if rv % FLIP_EVERY == 0:
                bad[i] = not bad[i]
            line = _line(templates, i, bad[i], rv)  # generation is not the exporter's cost
            c0, w0 = time.process_time(), time.perf_counter()
            event = json.loads(line)
            obj = event["object"] if path == "raw" else _model_view(api_client, event["object"])
            pipeline.node_changed(obj)
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
        "published": sink.entries,
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
    parser.add_argument("--json", action="store_true", help="print one JSON object per path")
    args = parser.parse_args()
    if args.path != "both":
        result = run(args.path, args.rounds)
        print(json.dumps(result) if args.json else result)
        return 0
    results = []
    for path in ("raw", "models"):
        out = subprocess.run(
            [sys.executable, __file__, "--path", path, "--rounds", str(args.rounds), "--json"],
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
        f"{args.rounds} updates per node, 1% flips"
    )
    print(f"{'path':<8}{'updates':>9}{'published':>11}{'updates/s/core':>16}{'peak RSS MB':>13}")
    for r in results:
        print(
            f"{r['path']:<8}{r['updates']:>9}{r['published']:>11}{r['updates_per_cpu_second']:>16}{r['peak_rss_mb']:>13}"
        )
    raw, models = results
    print(f"raw JSON is {raw['updates_per_cpu_second'] / models['updates_per_cpu_second']:.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
