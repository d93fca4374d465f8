"""Two exporters, one Lease: exactly one ships; when the leader dies the other takes over without
losing a transition, including one the dead leader observed but never managed to publish."""

from __future__ import annotations

import time
from typing import Any

from nodeheal.exporter.app import Exporter
from nodeheal.sim.apiserver import FakeKubeApiServer
from tests.unit.exporter.conftest import RecordingEvents, brief, exporter_settings, wait_for
from tests.unit.exporter.helpers import node


def start(server: FakeKubeApiServer, identity: str) -> tuple[Exporter, RecordingEvents]:
    events = RecordingEvents()
    exporter = Exporter(
        exporter_settings(leader_election=True, identity=identity), server.api_client(), events
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
    server.store.add(node("gpu-a", instance="i-0aaa1234567890aaa"))
    first, _ = start(server, "exporter-1")
    wait_for(lambda: first.pipeline.leading, what="a leader")
    second, _ = start(server, "exporter-2")
    try:
        wait_for(lambda: second.health.ready, what="the standby's first list")
        # Let the standby observe the held Lease first, so only the release can explain a fast takeover.
        time.sleep(0.3)
        released_at = time.monotonic()
        first.stop(release_lease=True)
        wait_for(lambda: second.pipeline.leading, timeout=5.0, what="the takeover")
        # Well within the 1 s lease duration a crash would cost (plus retry periods).
        assert time.monotonic() - released_at < 0.8
        assert (
            server.store.get("leases", "nodeheal-exporter", "nodeheal")["spec"]["holderIdentity"]
            == "exporter-2"
        )
    finally:
        second.stop()
