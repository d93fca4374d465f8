"""The counted-signal scenarios through the whole local pipeline (docs/architecture.md, D22):
node-problem-detector's Warning Events as its recorder writes them, shipped by the exporter,
counted per instance by the counting function, and one alert when a window crosses."""

from __future__ import annotations

import pytest

from nodeheal.counted_signals import COUNTED_CONDITION_TYPE
from nodeheal.workflow.records import Outcome

pytestmark = pytest.mark.slow


def test_repeated_xid_92_is_counted_to_one_alert_naming_the_count_and_the_window(play) -> None:
    run = play("xid92-repeated")
    assert run.problems == []
    record = run.only_record(run.subject)
    assert record is not None and record.outcome is Outcome.ALERTED
    assert record.condition["type"] == COUNTED_CONDITION_TYPE
    assert record.instance_id == run.facts["instance"]
    # Each write reached the counting function by the synthesized rule, and its verdict is on the
    # timeline, the last one the crossing.
    matched = run.pipeline.timeline.events("matched", node=run.subject)
    assert len([e for e in matched if e.text.endswith("-> count-signals function")]) == 10, matched
    # (An update the bus delivered after a later one raises no count and is not shown.)
    counted = run.pipeline.timeline.events("counted", node=run.subject)
    crossed = run.pipeline.timeline.events("crossed", node=run.subject)
    assert counted and len(crossed) == 1, (counted, crossed)
    assert {e.source for e in counted + crossed} == {"count-signals"}
    (execution,) = run.pipeline.executions()
    # The name says whose window crossed: the cluster, the node, the signal.
    assert "-xid-92-" in execution["name"]
    (notification,) = run.facts["notifications"]
    assert "seen 10 times within 24h" in notification["message"]
    assert "window from" in notification["message"]
    with run.pipeline.aws.between_invocations():
        window = run.pipeline.ledger.read_signal_window("training-on-eks", run.facts["instance"], "xid-92")
    assert window is not None and window.count_since(0) == 10


def test_the_spam_filters_held_back_occurrences_still_count_through_the_next_write(play) -> None:
    run = play("event-spam")
    assert run.problems == []
    assert run.facts["told"]["xid92 filtered"] == 17
    record = run.only_record(run.subject)
    assert record is not None and record.outcome is Outcome.ALERTED
    assert "seen 30 times within 1h" in record.condition["message"]
    # Xid 13 is no counted signal: its aggregated Event counted for nothing, in no window.
    with run.pipeline.aws.between_invocations():
        windows = [
            run.pipeline.ledger.read_signal_window("training-on-eks", run.facts["instance"], signal)
            for signal in ("xid-92", "xid-94", "xid-63")
        ]
    assert windows[0] is not None and windows[1:] == [None, None]
