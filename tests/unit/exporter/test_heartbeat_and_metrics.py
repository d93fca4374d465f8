"""Exporter heartbeats end to end (exporter -> ingest metric) and the dashboard's Powertools metrics."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from lambdas.ingest import _heartbeat
from lambdas.record import emit_outcome_metrics
from nodeheal.events import DETAIL_TYPE_EXPORTER_HEARTBEAT, ExporterHeartbeat
from nodeheal.exporter.app import Exporter
from nodeheal.lambda_support import metrics
from nodeheal.workflow.ingest import IngestSettings, heartbeat
from tests.unit.exporter.conftest import RecordingEvents

SETTINGS = IngestSettings(
    clusters=frozenset({"training-on-eks"}),
    stale_after=timedelta(minutes=15),
    event_source="nodeheal.exporter",
)


def beat_event(detail: Any, source: str = "nodeheal.exporter.training-on-eks") -> dict[str, Any]:
    return {"id": "1", "source": source, "detail-type": DETAIL_TYPE_EXPORTER_HEARTBEAT, "detail": detail}


def beat_detail(**overrides: Any) -> dict[str, Any]:
    return {
        "schemaVersion": "1.1",
        "cluster": "training-on-eks",
        "identity": "nodeheal-exporter-0",
        "sentAt": "2026-11-21T10:00:00.000Z",
        "intervalSeconds": 60,
        "queueDepth": 2,
        "sincePrevious": {"published": 5, "publishFailures": 1, "dropped": 0},
        **overrides,
    }


def emf_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def value(raw: Any) -> Any:
    """EMF holds a flushed metric's values as a list and a single metric's as a number."""
    return raw[0] if isinstance(raw, list) and len(raw) == 1 else raw


def test_exporter_sends_heartbeats_with_publisher_counts(
    running: Callable[..., tuple[Exporter, RecordingEvents]],
) -> None:
    exporter, events = running(heartbeat_seconds=0.05)
    deadline = time.monotonic() + 10
    while len(events.details(DETAIL_TYPE_EXPORTER_HEARTBEAT)) < 3:
        assert time.monotonic() < deadline, "no heartbeats published"
        time.sleep(0.02)
    beats = [ExporterHeartbeat.from_detail(d) for d in events.details(DETAIL_TYPE_EXPORTER_HEARTBEAT)]
    assert {b.cluster for b in beats} == {exporter.settings.cluster_name}
    assert beats[0].interval_seconds == 0.05
    # Each heartbeat reports what was published since the one before it, so the counts add up.
    assert sum(b.published for b in beats[1:]) >= 1
    assert all(b.publish_failures == 0 and b.dropped == 0 for b in beats)


def test_heartbeats_are_off_with_zero(running: Callable[..., tuple[Exporter, RecordingEvents]]) -> None:
    exporter, events = running(heartbeat_seconds=0)
    time.sleep(0.2)
    assert events.details(DETAIL_TYPE_EXPORTER_HEARTBEAT) == []
    assert all(worker.name != "heartbeat" for worker in exporter._workers)


def test_ingest_accepts_only_this_deployments_heartbeats() -> None:
    beat = heartbeat(beat_event(beat_detail()), SETTINGS)
    assert beat is not None and (beat.published, beat.publish_failures, beat.queue_depth) == (5, 1, 2)
    assert (
        heartbeat(beat_event(beat_detail(cluster="other"), source="nodeheal.exporter.other"), SETTINGS)
        is None
    )
    assert heartbeat(beat_event(beat_detail(), source="someone.else"), SETTINGS) is None
    assert heartbeat(beat_event(beat_detail(sentAt="yesterday")), SETTINGS) is None
    # An exporter not yet upgraded: contract "1" from the legacy source still counts (until 0.2.0).
    legacy = heartbeat(beat_event(beat_detail(schemaVersion="1"), source="nodeheal.exporter"), SETTINGS)
    assert legacy is not None and legacy.cluster == "training-on-eks"
    assert (
        heartbeat(
            beat_event({"cluster": "training-on-eks", "sentAt": "2026-11-21T10:00:00Z", "queueDepth": -1}),
            SETTINGS,
        )
        is None
    )


def test_ingest_turns_a_heartbeat_into_per_cluster_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    runtime = SimpleNamespace(ingest_settings=SETTINGS)
    assert _heartbeat(beat_event(beat_detail()), runtime) == {
        "status": "heartbeat",
        "cluster": "training-on-eks",
    }  # type: ignore[arg-type]
    capsys.readouterr()
    metrics.flush_metrics()
    (blob,) = emf_lines(capsys.readouterr().out)
    assert blob["cluster"] == "training-on-eks" and blob["service"] == "nodeheal"
    counts = (blob["ExporterHeartbeats"], blob["ExporterPublishFailures"], blob["ExporterQueueDepth"])
    assert tuple(map(value, counts)) == (1.0, 1.0, 2.0)
    other = beat_event(beat_detail(cluster="other"), source="nodeheal.exporter.other")
    ignored = _heartbeat(other, runtime)  # type: ignore[arg-type]
    assert ignored["status"] == "ignored"


def test_defect_9_one_cluster_cannot_send_another_clusters_heartbeat(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The exporter of "inference-eks" keeping training-on-eks's missing-heartbeat alarm quiet.
    forged = beat_event(beat_detail(), source="nodeheal.exporter.inference-eks")
    assert heartbeat(forged, SETTINGS) is None
    assert heartbeat(beat_event(beat_detail(), source="nodeheal.exporter"), SETTINGS) is None  # 1.1 + legacy

    dropped: list[Any] = []
    runtime = SimpleNamespace(
        ingest_settings=SETTINGS,
        ledger=SimpleNamespace(put_dropped_event=dropped.append),
        now=lambda: datetime(2026, 11, 21, 10, 0, 5, tzinfo=UTC),
    )
    result = _heartbeat(forged, runtime)  # type: ignore[arg-type]
    assert result["status"] == "dropped" and result["category"] == "forged"
    assert [(d.category, d.cluster) for d in dropped] == [("forged", "")]
    assert "speaks for cluster 'inference-eks'" in dropped[0].reason
    capsys.readouterr()
    metrics.flush_metrics()
    (blob,) = emf_lines(capsys.readouterr().out)
    assert value(blob["HeartbeatsRefused"]) == 1.0 and "ExporterHeartbeats" not in blob


class FakeState:
    def __init__(self, steps: Mapping[str, Any]) -> None:
        self._steps = steps

    def step(self, key: str) -> Mapping[str, Any] | None:
        return self._steps.get(key)


def test_record_metrics_feed_the_dashboard(capsys: pytest.CaptureFixture[str]) -> None:
    state = FakeState({"admission": {"decision": {"action": "replace"}}, "drain": {"pdbBlocked": 2}})
    result = {"outcome": "replaced", "stageSeconds": {"faultToCordon": 3.5, "faultToInstanceAction": 95.0}}
    capsys.readouterr()
    emit_outcome_metrics(result, state)  # type: ignore[arg-type]
    metrics.flush_metrics()
    blobs = emf_lines(capsys.readouterr().out)

    def dimensions(name: str) -> dict[str, Any]:
        (blob,) = [b for b in blobs if name in b]
        (directive,) = blob["_aws"]["CloudWatchMetrics"]
        return {d: blob[d] for d in directive["Dimensions"][0]} | {"value": value(blob[name])}

    assert dimensions("Remediations") == {"outcome": "replaced", "service": "nodeheal", "value": 1.0}
    assert dimensions("RemediationsByAction") == {"action": "replace", "service": "nodeheal", "value": 1.0}
    assert dimensions("TimeToCordon") == {"service": "nodeheal", "value": 3.5}
    assert dimensions("TimeToInstanceAction") == {"action": "replace", "service": "nodeheal", "value": 95.0}
    assert dimensions("DrainsBlockedByPdb") == {"service": "nodeheal", "value": 1.0}


def test_record_metrics_without_timings_or_pdb(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    emit_outcome_metrics(
        {"outcome": "alerted", "stageSeconds": {}},
        FakeState({"admission": {"decision": {"action": "alert"}}}),
    )  # type: ignore[arg-type]
    metrics.flush_metrics()
    names = {key for blob in emf_lines(capsys.readouterr().out) for key in blob if key[0].isupper()}
    assert names == {"Remediations", "RemediationsByAction"}
