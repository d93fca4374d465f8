"""Workflow tests: the synthesized state machine executed by moto, Lambda tasks dispatched to the
real handlers in-process, against the fake Kubernetes API server and moto EC2/DynamoDB/SNS."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeheal.conditions import Condition
from nodeheal.events import DEFAULT_SOURCE, NodeConditionEvent, PreviousState, cluster_source, node_identity
from nodeheal.sim.apiserver.authorizer import FunctionCredentials, RbacAuthorizer, nodeheal_authorizer
from nodeheal.sim.apiserver.objects import make_node, make_pdb, make_pod
from nodeheal.sim.apiserver.server import FakeKubeApiServer
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.cluster import simulated_cluster as sim_cluster
from nodeheal.sim.local_aws import LocalAws
from nodeheal.sim.local_pipeline.wiring import wait_until

# Tiny waits (FAST_CONTEXT) and the template cache are shared with the end-to-end scenarios.
from nodeheal.sim.stack.context import CLUSTER
from nodeheal.sim.stack.process_templates import synthesized
from nodeheal.timestamps import utc_now
from nodeheal.workflow.records import RemediationRecord

__all__ = ["CLUSTER", "XID_13", "XID_48", "XID_79", "Pipeline", "wait_until"]

SOURCE = cluster_source(DEFAULT_SOURCE, CLUSTER)
XID_79 = sim_cluster.XID_79.message
XID_48 = sim_cluster.XID_48.message
XID_13 = sim_cluster.XID_13.message


@dataclass
class Pipeline:
    aws: LocalAws
    server: FakeKubeApiServer
    store: ClusterStore
    authorizer: RbacAuthorizer
    instances: dict[str, str] = field(default_factory=dict)

    # -- cluster ---------------------------------------------------------------------------------

    def add_gpu_node(
        self, name: str, *, owned: bool = True, pool: str = "gpu", workload_pods: int = 2
    ) -> str:
        instance_id = self.aws.run_instance(cluster=CLUSTER, node_pool=pool, owned=owned)
        self.instances[name] = instance_id
        self.store.add(make_node(name, instance_id=instance_id, node_pool=pool, cluster=CLUSTER))
        self.store.add(
            make_pod(
                f"nvidia-device-plugin-{name}",
                "kube-system",
                name,
                owner_kind="DaemonSet",
                labels={"app": "nvidia-device-plugin"},
            )
        )
        for index in range(workload_pods):
            self.store.add(
                make_pod(
                    f"trainer-{name}-{index}",
                    "training",
                    name,
                    owner_kind="Job",
                    gpus=4,
                    labels={"app": "trainer", "node": name},
                )
            )
        return instance_id

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            return self.store.get("nodes", name)
        except Exception:
            return None

    def pods_on(self, name: str) -> list[dict[str, Any]]:
        items, _ = self.store.list_objects("pods")
        return [p for p in items if p.get("spec", {}).get("nodeName") == name]

    def block_with_pdb(self, name: str) -> None:
        self.store.add(make_pdb(f"trainer-{name}", "training", {"node": name}, min_available="100%"))

    def start_blocked_drain(self, name: str = "gpu-a") -> tuple[str, str]:
        """A replace of ``name`` whose evictions a PDB refuses: (instance, execution ARN), returned
        once the drain loop runs, so a test decides what happens mid-drain."""
        instance = self.add_gpu_node(name)
        self.block_with_pdb(name)
        started = self.deliver(self.fault(name, "GPUProblem", "True", "GPUHardwareError", XID_79))
        arn = str(started["executionArn"])
        wait_until(
            lambda: "Wait between eviction rounds" in self.aws.state_names(arn),
            timeout=60,
            what="the drain loop running",
        )
        return instance, arn

    # -- faults and events -----------------------------------------------------------------------

    def fault(self, name: str, condition_type: str, status: str, reason: str, message: str) -> dict[str, Any]:
        """Set the condition as a detector would and return the event the exporter would send."""
        before = self._condition(name, condition_type)
        self.store.set_node_condition(name, condition_type, status, reason, message)
        return self.event_for(name, condition_type, previous=before)

    def _condition(self, name: str, condition_type: str) -> dict[str, Any] | None:
        node = self.node(name)
        for condition in (node or {}).get("status", {}).get("conditions", []):
            if condition["type"] == condition_type:
                return dict(condition)
        return None

    def event_for(
        self,
        name: str,
        condition_type: str,
        *,
        previous: Mapping[str, Any] | None = None,
        cluster: str = CLUSTER,
    ) -> dict[str, Any]:
        node = self.node(name)
        assert node is not None
        condition = self._condition(name, condition_type)
        assert condition is not None
        event = NodeConditionEvent(
            cluster=cluster,
            node=node_identity(node),
            condition=Condition.from_api(condition),
            observed_at=utc_now(),
            previous=(
                PreviousState(status=previous["status"], reason=previous.get("reason", ""))
                if previous
                else None
            ),
        )
        return event.to_detail()

    def deliver(self, detail: Mapping[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self.aws.deliver(
            self.aws.event_envelope(detail, source=SOURCE, event_id=event_id)
        )
        return result

    def run(self, detail: Mapping[str, Any], timeout: float = 90.0) -> dict[str, Any]:
        """Deliver the event and wait for the execution it started."""
        result = self.deliver(detail)
        assert result["status"] == "started", result
        return self.aws.wait_for_execution(result["executionArn"], timeout=timeout)

    # -- ledger ----------------------------------------------------------------------------------

    def records(self, name: str) -> list[RemediationRecord]:
        ledger = self.aws.runtime_for(self.aws.function_logical_id("lambdas.record.handler")).ledger
        return ledger.node_records(CLUSTER, name, since=utc_now().replace(year=2000))

    def only_record(self, name: str) -> RemediationRecord:
        records = self.records(name)
        assert len(records) == 1, [r.summary for r in records]
        return records[0]

    def lock_holder(self, name: str) -> str | None:
        ledger = self.aws.runtime_for(self.aws.function_logical_id("lambdas.record.handler")).ledger
        return ledger.node_lock_holder(CLUSTER, name)


def open_pipeline(
    overrides: Mapping[str, Any] | None = None, *, authorizer: RbacAuthorizer | None = None
) -> Iterator[Pipeline]:
    """Every function calls the fake API server as itself, under its own RBAC role (docs/architecture.md, D8):
    a request its role does not allow is a 403. Pass ``authorizer`` to collect what several
    pipelines used."""
    app = synthesized(overrides)
    # Graceful pod deletion runs at 1/1000 speed: a 30 s grace period takes 30 ms.
    store = ClusterStore(time_scale=0.001)
    authorizer = authorizer if authorizer is not None else nodeheal_authorizer()
    server = FakeKubeApiServer(store, authorizer=authorizer)
    server.start()
    try:
        credentials = FunctionCredentials(server.url, authorizer, CLUSTER)
        with LocalAws(app, kube_provider_factory=credentials) as aws:
            yield Pipeline(aws=aws, server=server, store=store, authorizer=authorizer)
    finally:
        server.stop()


@pytest.fixture
def pipeline(request: pytest.FixtureRequest) -> Iterator[Pipeline]:
    marker = request.node.get_closest_marker("nodeheal_config")
    overrides = marker.args[0] if marker else {}
    yield from open_pipeline(overrides)
