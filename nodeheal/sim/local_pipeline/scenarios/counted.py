"""Counted signals: Warning Events that call for nothing alone, counted per instance until a window
crosses (docs/architecture.md, D22; docs/operations.md, "Counted signals").

node-problem-detector records each occurrence through client-go's legacy recorder
(:mod:`nodeheal.sim.cluster.npd_events`), so the API server holds what a real one would: one Event
whose ``count`` rises, the spam filter's silence, an aggregated Event. The exporter watches and ships
them, the counting function counts them in the ledger, and a crossing runs the workflow.

NPD's clock starts in the past: the story of an hour on the node (the spam filter refills one Event
per 300 s) is told in seconds, every Event still inside the counting window.
"""

from __future__ import annotations

import time
from collections import Counter

from nodeheal.actions import Action
from nodeheal.counted_signals import DEFINITIONS
from nodeheal.sim.cluster.layout import ClusterLayout
from nodeheal.sim.cluster.npd_events import NpdOnNodes
from nodeheal.sim.event_recorder import Action as Written
from nodeheal.sim.event_recorder import NanoClock
from nodeheal.sim.local_pipeline.scenarios.play import Scenario, ScenarioRun
from nodeheal.sim.timeline import short_node
from nodeheal.workflow.records import Outcome

XID_92 = "NVRM: Xid (PCI:0000:53:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC error rate"
#: An application's fault: never counted, but it spends the GPU monitor's spam-filter tokens.
XID_13 = "NVRM: Xid (PCI:0000:53:00): 13, pid={pid}, name=python3, Graphics SM Warp Exception"
#: The spam-filter story's threshold: reachable only because the filter's held-back occurrences
#: ride in on the next write's count (25 + 12 x 1 h = 37 writes at most in an hour).
SPAM_THRESHOLD = 30
#: The nodes joined two hours ago: NPD's Events of the last hour are about these very Node objects,
#: which the exporter proves by their creationTimestamp (NPD v1.35 records no Node UID, D10).
RUNNING_FOR_HOURS = ClusterLayout(node_age_seconds=2 * 3600)


def _npd_in_the_past(run: ScenarioRun, minutes_ago: int) -> tuple[NpdOnNodes, NanoClock]:
    clock = NanoClock(now_ns=time.time_ns() - minutes_ago * 60 * 1_000_000_000)
    return NpdOnNodes(run.pipeline.cluster.store, clock), clock


def _subject(run: ScenarioRun) -> str:
    node = run.subject = run.pipeline.cluster.gpu_nodes[0]
    run.facts["instance"] = run.pipeline.cluster.instance_of(node)
    run.facts["pods"] = sorted(p["metadata"]["name"] for p in run.pipeline.cluster.pods_on(node))
    run.pipeline.timeline.mark_origin()
    return node


def _xid92_play(run: ScenarioRun) -> None:
    node = _subject(run)
    rule = DEFINITIONS["xid-92"].default
    npd, clock = _npd_in_the_past(run, 50)
    written = Counter[str]()
    # The driver logs the same line each time (no process to name), so the recorder patches one
    # Event: count 1, 2, ... rule.count, five minutes apart, each write shipped and counted.
    for _ in range(rule.count):
        run.pipeline.timeline.emit("fault", "fault", f"NPD records Xid 92 on {short_node(node)}", node=node)
        written[npd.record(node, "GPUInformationalXid", XID_92).action.value] += 1
        clock.advance(seconds=300)
    run.facts["written"] = dict(written)
    run.await_records(1, node, timeout=90)


def _xid92_check(run: ScenarioRun) -> None:
    rule = DEFINITIONS["xid-92"].default
    _expect_alert(run, "xid-92", rule.count, rule.window_hours)
    run.expect(
        run.facts["written"] == {Written.CREATED.value: 1, Written.PATCHED.value: rule.count - 1},
        f"NPD wrote {run.facts['written']}, expected one Event patched {rule.count - 1} times",
    )


def _spam_play(run: ScenarioRun) -> None:
    node = _subject(run)
    npd, clock = _npd_in_the_past(run, 40)
    told = Counter[str]()
    # A training job trips Xid 13 in a loop: twelve lines, each with its own pid. From the tenth
    # distinct message in ten minutes the recorder merges them into one Event; all twelve spend
    # tokens of the gpu-monitor's spam filter, which Xid 92 shares (reason is not in its key).
    for pid in range(4100, 4112):
        told[f"xid13 {npd.record(node, 'GPUApplicationXid', XID_13.format(pid=pid)).action.value}"] += 1
        clock.advance(seconds=1)
    # Then thirty Xid 92 in thirty seconds: the 13 tokens left are written, 17 held back. The
    # recorder still raised its count for each held-back one.
    for _ in range(30):
        told[f"xid92 {npd.record(node, 'GPUInformationalXid', XID_92).action.value}"] += 1
        clock.advance(seconds=1)
    # Five minutes on, one more gets a token: its PATCH carries count 31, all of them.
    clock.advance(seconds=300)
    told[f"xid92 {npd.record(node, 'GPUInformationalXid', XID_92).action.value}"] += 1
    run.facts["told"] = dict(told)
    run.await_records(1, node, timeout=90)


def _spam_check(run: ScenarioRun) -> None:
    told = run.facts["told"]
    expected = {
        "xid13 created": 10,  # nine distinct lines, then the aggregate Event
        "xid13 patched": 2,  # the aggregate's count rises for the eleventh and twelfth
        "xid92 created": 1,
        "xid92 patched": 13,  # twelve in the burst, and the one five minutes later
        "xid92 filtered": 17,
    }
    run.expect(told == expected, f"NPD's recorder did {told}, expected {expected}")
    _expect_alert(run, "xid-92", SPAM_THRESHOLD, 1)
    aggregated = [
        e
        for e in run.pipeline.cluster.store.list_objects("events")[0]
        if str(e.get("message", "")).startswith("(combined from similar events): ")
    ]
    run.expect(len(aggregated) == 1, f"{len(aggregated)} aggregated Events, expected the Xid 13 one")


def _expect_alert(run: ScenarioRun, signal: str, count: int, window_hours: int) -> None:
    node, instance = run.subject, run.facts["instance"]
    record = run.only_record(node)
    run.expect_executions(1)
    if record is None:
        return
    run.expected = (
        f"expected for {DEFINITIONS[signal].title} counted past its threshold: an alert naming the "
        f"count ({count}) and the window ({window_hours} h), the node untouched"
    )
    run.expect(
        record.signal == f"counted:{signal}", f"decided by {record.signal!r}, expected counted:{signal}"
    )
    run.expect(record.action is Action.ALERT, f"action {record.action.value}, expected alert")
    run.expect_outcome(record, Outcome.ALERTED)
    run.expect_untouched(node, instance)
    messages = run.expect_notifications(["action-required"])
    run.facts["notifications"] = messages  # read once: the subscriber queue is drained
    text = " ".join(str(m.get("message", "")) for m in messages)
    named = f"{count} times within {window_hours}h"
    run.expect(named in text, f"the notification does not name {named!r}: {text[:400]}")
    pods = sorted(p["metadata"]["name"] for p in run.pipeline.cluster.pods_on(node))
    run.expect(
        pods == run.facts["pods"], f"pods on {short_node(node)} changed: {run.facts['pods']} -> {pods}"
    )


COUNTED_SCENARIOS = (
    Scenario(
        "xid92-repeated",
        "Xid 92 ten times on one GPU node -> counted per instance, an alert naming the count and window",
        _xid92_play,
        _xid92_check,
        layout=RUNNING_FOR_HOURS,
    ),
    Scenario(
        "event-spam",
        "Xid 13 floods the GPU monitor, then Xid 92: spam filter holds some back, a later count has them",
        _spam_play,
        _spam_check,
        layout=RUNNING_FOR_HOURS,
        context={
            "policy": {
                "countedSignals": {"xid-92": {"count": SPAM_THRESHOLD, "windowHours": 1, "action": "alert"}}
            }
        },
    ),
)
