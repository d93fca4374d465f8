"""What several benchmarks share: the deployed stack in moto, the fake cluster, node and event helpers.

The benchmarks assemble the same pieces as the workflow tests (``tests/workflow``): the state
machine synthesized from the CDK stack executed by moto, Lambda tasks dispatched to the real
handlers, and the fake Kubernetes API server. Only the cluster contents differ per benchmark.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from nodeheal.conditions import Condition
from nodeheal.events import DEFAULT_SOURCE, NodeConditionEvent, PreviousState, cluster_source, node_identity
from nodeheal.kube.client import StaticClientProvider
from nodeheal.sim.apiserver.objects import make_node, make_pod
from nodeheal.sim.apiserver.server import FakeKubeApiServer
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.local_aws import LocalAws
from nodeheal.sim.stack.context import CLUSTER
from nodeheal.sim.stack.synthesized_app import SynthesizedApp
from nodeheal.timestamps import utc_now

# Set before any handler module is imported (Powertools reads them then): what the stack and the
# test suite give every function: fake credentials
# (moto), the metrics namespace Powertools requires, quiet handler logs, no jsii banner.
for _key, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-west-2",
    "AWS_REGION": "us-west-2",
    "POWERTOOLS_METRICS_NAMESPACE": "NodeHeal",
    "POWERTOOLS_SERVICE_NAME": "nodeheal",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
}.items():
    os.environ.setdefault(_key, _value)
os.environ.pop("AWS_PROFILE", None)

ROOT = Path(__file__).resolve().parents[1]
#: What the cluster's own exporter sends (contract 1.1): ingest drops other sources as forged.
SOURCE = cluster_source(DEFAULT_SOURCE, CLUSTER)
XID_79 = "NVRM: Xid (PCI:0000:53:00): 79, pid=2411, name=python3, GPU has fallen off the bus."
XID_48 = (
    "NVRM: Xid (PCI:0000:a8:00): 48, pid=2411, name=python3, An uncorrectable double bit error (DBE) "
    "has been detected on GPU in the framebuffer at partition 6, subpartition 0."
)
XID_13 = (
    "NVRM: Xid (PCI:0000:53:00): 13, pid=2411, name=python3, Graphics SM Warp Exception on "
    "(GPC 1, TPC 0, SM 1): Out Of Range Address"
)


def production_context() -> dict[str, Any]:
    """The ``nodeheal`` context of cdk.json, in ``full`` mode: the configuration a deployment runs
    with once it remediates. The shipped file says ``dry-run`` (a first deployment changes nothing),
    and the benchmarks measure remediations, so they choose ``full`` here."""
    context: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text())["context"]["nodeheal"]
    context["mode"] = "full"
    return context


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p95 of 20 runs is the 19th smallest): no interpolation between runs."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class Stack:
    aws: LocalAws
    server: FakeKubeApiServer
    store: ClusterStore

    def add_gpu_node(self, name: str, *, pool: str = "gpu", workload_pods: int = 2) -> str:
        instance_id = self.aws.run_instance(cluster=CLUSTER, node_pool=pool)
        self.store.add(make_node(name, instance_id=instance_id, node_pool=pool, cluster=CLUSTER))
        for index in range(workload_pods):
            self.store.add(make_pod(f"trainer-{name}-{index}", "training", name, owner_kind="Job", gpus=1))
        return instance_id

    def node(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.store.get("nodes", name)
        return found

    def condition(self, name: str, condition_type: str) -> dict[str, Any] | None:
        for condition in self.node(name).get("status", {}).get("conditions", []):
            if condition["type"] == condition_type:
                return dict(condition)
        return None

    def fault(self, name: str, condition_type: str, status: str, reason: str, message: str) -> dict[str, Any]:
        """Set the condition as a detector would; return the detail the exporter would publish."""
        before = self.condition(name, condition_type)
        self.store.set_node_condition(name, condition_type, status, reason, message)
        current = self.condition(name, condition_type)
        assert current is not None
        event = NodeConditionEvent(
            cluster=CLUSTER,
            node=node_identity(self.node(name)),
            condition=Condition.from_api(current),
            observed_at=utc_now(),
            previous=PreviousState(status=before["status"], reason=before.get("reason", ""))
            if before
            else None,
        )
        return event.to_detail()

    def envelope(self, detail: Mapping[str, Any]) -> dict[str, Any]:
        return self.aws.event_envelope(detail, source=SOURCE)


_templates: dict[str, SynthesizedApp] = {}


def synthesized(context: Mapping[str, Any]) -> SynthesizedApp:
    key = json.dumps(context, sort_keys=True)
    if key not in _templates:
        _templates[key] = SynthesizedApp.synthesize(context)
    return _templates[key]


@contextmanager
def open_stack(context: Mapping[str, Any], *, time_scale: float = 1.0) -> Iterator[Stack]:
    app = synthesized(context)
    store = ClusterStore(time_scale=time_scale)
    server = FakeKubeApiServer(store)
    server.start()
    try:
        with LocalAws(app, kube_provider_factory=lambda _function: StaticClientProvider(server.url)) as aws:
            yield Stack(aws=aws, server=server, store=store)
    finally:
        server.stop()
