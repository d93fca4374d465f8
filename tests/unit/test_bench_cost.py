"""The cost model `make bench` prints: each remediation path and the idle fleet, priced by hand here."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.run_all import FLEET_NODES, PRICES, STATUS_UPDATES_PER_NODE_DAY, cost_model, cost_rows

TRANSITION, GB_SECOND, REQUEST, EVENT = (
    PRICES[key][0]
    for key in (
        "stepFunctionsPerTransition",
        "lambdaPerGbSecond",
        "lambdaPerRequest",
        "eventBridgePerCustomEvent",
    )
)


def _inputs(published: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    paths = {
        "speed": 10.0,
        "paths": {
            "replace": {
                "title": "Xid 79 -> cordon, drain, terminate",
                "transitions": 21,
                "lambdaInvocations": 8,
                "lambdaSeconds": 2.0,
                "lambdaGbSeconds": 0.5,
            }
        },
    }
    cold = {"handlers": {"lambdas.ingest.handler": {"firstInvokeMs": 200.0, "memoryMb": 256}}}
    exporter = {"raw": {"updates": 100_000, "published": published}}
    return paths, cold, exporter


def test_a_path_is_priced_with_its_ingest_call_and_event() -> None:
    cost = cost_model(*_inputs(published=1000))
    ingest_gb_seconds = 0.2 * 256 / 1024
    expected = 21 * TRANSITION + (0.5 + ingest_gb_seconds) * GB_SECOND + (8 + 1) * REQUEST + EVENT
    assert cost["paths"]["replace"]["dollars"] == pytest.approx(expected)
    assert cost["paths"]["replace"]["transitions"] == 21


def test_idle_fleet_pays_only_for_what_heartbeats_alone_publish() -> None:
    # 1,000 flips in 100,000 updates were published, and nothing else: heartbeats cost nothing.
    assert cost_model(*_inputs(published=1000))["idleDollarsPerMonth"] == 0.0
    # 10 more events than flips: heartbeats leaked through at 1 in 10,000 updates.
    leaky = cost_model(*_inputs(published=1010))
    per_day = 10 / 100_000 * FLEET_NODES * STATUS_UPDATES_PER_NODE_DAY
    assert leaky["heartbeatEventsPerDay5000Nodes"] == pytest.approx(per_day)
    assert leaky["idleDollarsPerMonth"] == pytest.approx(per_day * 30 * EVENT)


def test_the_node_events_the_exporter_bench_ships_are_not_counted_as_heartbeats() -> None:
    paths, cold, exporter = _inputs(published=1000 + 16_667)
    exporter["raw"]["node_events_shipped"] = 16_667  # one Warning per node per minute
    assert cost_model(paths, cold, exporter)["idleDollarsPerMonth"] == 0.0


def test_every_path_gets_a_verdict_against_one_cent() -> None:
    paths, cold, exporter = _inputs(published=1000)
    paths["paths"]["pdb"] = {**paths["paths"]["replace"], "title": "pdb", "transitions": 500}
    verdicts = {name: verdict for name, _, _, verdict in cost_rows(cost_model(paths, cold, exporter))}
    # 500 transitions alone are $0.0125: over the target.
    assert verdicts == {
        "cost: Xid 79 -> cordon, drain, terminate": "met",
        "cost: pdb": "NOT met",
        "EventBridge events/day, 5,000 idle nodes": "",
        "$ / month idle (AWS side)": "met",
    }
