"""Two exporters, one Lease: exactly one ships; when the leader dies the other takes over without
losing a transition, including one the dead leader observed but never managed to publish."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeheal.exporter.app import Exporter
from nodeheal.exporter.kubeclient import ApiException, KubeJsonClient
from nodeheal.exporter.leader import LeaderElector, LeaseConfig
from nodeheal.sim.apiserver import FakeKubeApiServer
from tests.unit.exporter.conftest import RecordingEvents, brief, exporter_settings, wait_for
from tests.unit.exporter.helpers import node


def start(server: FakeKubeApiServer, identity: str, **settings: Any) -> tuple[Exporter, RecordingEvents]:
    events = RecordingEvents()
    exporter = Exporter(
        exporter_settings(leader_election=True, identity=identity, **settings), server.api_client(), events
    )
    exporter.start(serve_http=False)
    return exporter, events


def transitions(events: RecordingEvents) -> list[tuple[Any, ...]]:
    return [brief(d) for d in events.details() if not d["resync"]]


def test_one_ships_and_the_standby_takes_over_without_losing_a_transition(server: FakeKubeApiServer) -> None:
    server.store.add(
        node("gpu-a", instance="i-0aaa1234567890aaa"), node("gpu-b", instance="i-0bbb1234567890bbb")
    )
    first, first_events = start(server, "exporter-1")
    wait_for(lambda: first.pipeline.leading, what="a leader")
    second, second_events = start(server, "exporter-2")
    try:
        wait_for(lambda: second.health.ready, what="the standby's first list")
        assert not second.pipeline.leading

        server.store.set_node_condition("gpu-a", "GPUProblem", "True", "GPUFellOffBus", "Xid 79")
        wait_for(lambda: len(transitions(first_events)) == 1, what="the leader to ship")
        time.sleep(0.3)
        assert second_events.entries == []

        # EventBridge fails for the leader, which sees gpu-b break but cannot ship it, then dies
        # without releasing the Lease; gpu-a recovers while nobody leads.
        first_events.down = True
        server.store.set_node_condition("gpu-b", "GPUProblem", "True", "NVLinkError", "Xid 74")
        wait_for(lambda: first_events.calls >= 2, what="the leader's failing attempts")
        first.stop(release_lease=False)
        server.store.set_node_condition("gpu-a", "GPUProblem", "False", "GPUHealthy", "ok")

        wait_for(lambda: second.pipeline.leading, timeout=10, what="the takeover")
        expected = {
            ("gpu-b", "GPUProblem", "True", "NVLinkError", ("False", "GPUHealthy"), False),
            ("gpu-a", "GPUProblem", "False", "GPUHealthy", ("True", "GPUFellOffBus"), False),
        }
        wait_for(lambda: expected <= set(transitions(second_events)), what="the replayed transitions")
        shipped = transitions(second_events)
        # Per-node order: gpu-a broke (shipped by the first leader) before it recovered.
        assert shipped.index(
            ("gpu-a", "GPUProblem", "True", "GPUFellOffBus", ("False", "GPUHealthy"), False)
        ) < (shipped.index(("gpu-a", "GPUProblem", "False", "GPUHealthy", ("True", "GPUFellOffBus"), False)))
        resynced = [brief(d) for d in second_events.details() if d["resync"]]
        assert ("gpu-b", "GPUProblem", "True", "NVLinkError", ("True", "NVLinkError"), True) in resynced
        assert second.metrics.value("is_leader") == 1.0
        lease = server.store.get("leases", "nodeheal-exporter", "nodeheal")
        assert lease["spec"]["holderIdentity"] == "exporter-2"
        assert lease["spec"]["leaseTransitions"] == 1
    finally:
        first.stop(release_lease=False)
        second.stop()


def test_clean_shutdown_releases_the_lease_for_an_immediate_takeover(server: FakeKubeApiServer) -> None:
    # A Lease that would stay valid for an hour: expiry cannot explain a takeover, only the release
    # can, so the test needs no wall-clock bound (one failed at 1.09 s on a loaded machine).
    held_for_an_hour = {"lease_duration_seconds": 3600.0, "renew_deadline_seconds": 0.6}
    server.store.add(node("gpu-a", instance="i-0aaa1234567890aaa"))
    first, _ = start(server, "exporter-1", **held_for_an_hour)
    wait_for(lambda: first.pipeline.leading, what="a leader")
    second, _ = start(server, "exporter-2", **held_for_an_hour)
    try:
        wait_for(lambda: second.health.ready, what="the standby's first list")
        assert not second.pipeline.leading
        first.stop(release_lease=True)
        wait_for(lambda: second.pipeline.leading, timeout=30.0, what="the takeover")
        spec = server.store.get("leases", "nodeheal-exporter", "nodeheal")["spec"]
        assert spec["holderIdentity"] == "exporter-2"
        assert spec["leaseTransitions"] == 1
    finally:
        second.stop()


class _RecordingClient(KubeJsonClient):
    """The exporter's client, noting every refusal the API server answers."""

    def __init__(self, api_client: Any) -> None:
        super().__init__(api_client)
        self.refusals: list[tuple[str, int]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return super().request(method, path, **kwargs)
        except ApiException as exc:
            self.refusals.append((method, int(exc.status)))
            raise


def test_lease_writes_meet_the_real_lease_rules(server: FakeKubeApiServer) -> None:
    """Every write the elector makes is one a real API server accepts: an update names the
    resourceVersion it read (leaseStrategy.AllowUnconditionalUpdate is false, a bare PUT is 422:
    https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/coordination/lease/strategy.go)
    and renewTime/acquireTime have exactly six fractional digits, also at a whole second, where
    ``isoformat()`` would drop them and MicroTime.UnmarshalJSON refuses the body (400:
    https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/apis/meta/v1/micro_time.go)."""
    ticks = itertools.count()
    client = _RecordingClient(server.api_client())
    elector = LeaderElector(
        client,
        LeaseConfig("lock", "nodeheal", "exporter-1", retry_period_seconds=0.02),
        on_started_leading=lambda: None,
        on_stopped_leading=lambda: None,
        wall_clock=lambda: datetime(2026, 11, 21, 10, 0, tzinfo=UTC) + timedelta(seconds=next(ticks)),
    )
    runner = threading.Thread(target=elector.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: elector.is_leader, what="the lease to be acquired")
        wait_for(lambda: server.faults.count("PUT", "/leases/lock$") >= 3, what="renewals")
    finally:
        elector.stop(release=True)
        runner.join(timeout=5)

    # The one refusal is the first read of a Lease that did not exist yet.
    assert client.refusals == [("GET", 404)]
    lease = server.store.get("leases", "lock", "nodeheal")
    assert lease["spec"]["holderIdentity"] == ""
    assert lease["spec"]["renewTime"].endswith(".000000Z")
    assert lease["spec"]["acquireTime"] == "2026-11-21T10:00:00.000000Z"


def test_a_flood_of_node_events_does_not_push_a_transition_out_of_the_standbys_replay() -> None:
    """A standby keeps what it saw for the next leader to replay, in bounded buffers. Node Events
    have a buffer of their own: a noisy fleet's Warnings (far more than its transitions) must not
    evict the "GPU broke" a dead leader may never have shipped."""
    from nodeheal.exporter.metrics import Metrics
    from nodeheal.exporter.pipeline import Pipeline
    from nodeheal.exporter.queue import EventQueue, QueuedEvent
    from nodeheal.exporter.transitions import TransitionTracker
    from tests.unit.exporter.helpers import with_condition

    ticks = itertools.count()
    queue = EventQueue(10_000)
    pipeline = Pipeline(
        TransitionTracker("training-on-eks", lambda _: True),
        queue,
        Metrics(),
        leading=False,
        replay_seconds=300,
        replay_capacity=100,
        clock=lambda: float(next(ticks)) / 1000,
    )
    gpu_a = node("gpu-a", instance="i-0aaa1234567890aaa")
    pipeline.begin_list()
    pipeline.list_page([gpu_a])
    pipeline.end_list()

    def event(n: int) -> QueuedEvent:
        return QueuedEvent(
            key="event/gpu-b",
            detail_type="Node Event Observed",
            detail=str(n),
            healthy_direction=False,
            node_event=True,
        )

    pipeline.submit([event(0)])
    pipeline.node_changed(with_condition(gpu_a, "GPUProblem", "True", "GPUFellOffBus", "Xid 79"))
    pipeline.submit(event(n) for n in range(1, 1000))
    pipeline.start_leading()
    replayed = []
    while batch := queue.take_batch(10, 256 * 1024, timeout=0):
        replayed.extend(batch)
    broke = [e for e in replayed if e.detail_type == "Node Condition Changed" and not e.resync]
    assert len(broke) == 1
    assert [e.detail for e in replayed if e.node_event] == [str(n) for n in range(900, 1000)]
