"""Every timeline line about a node says which node and which EC2 instance behind its name; lines
about nothing in particular (the workload, the operator) leave the column empty, aligned."""

from __future__ import annotations

import io

from nodeheal.sim.timeline import NO_NODE_YET, NODE_COLUMN, Timeline, TimelinePrinter, node_column

FAULTED = "ip-10-0-136-45.us-west-2.compute.internal"
REPLACEMENT = "ip-10-0-104-185.us-west-2.compute.internal"
OLD, NEW = "i-02ca8a8a67913ca50", "i-8d9c6d2c22ca3e992"


def test_an_event_about_a_node_carries_the_instance_the_node_was_registered_with() -> None:
    timeline = Timeline()
    timeline.note_instance(FAULTED, OLD)
    event = timeline.emit("fault", "fault", "Xid 79", node=FAULTED)
    assert event.instance == OLD
    assert node_column(event) == f"ip-10-0-136-45 {OLD}"


def test_an_instance_the_event_names_wins_over_the_registered_one() -> None:
    # A forged or stale event names an instance of its own: the line shows what the event says.
    timeline = Timeline()
    timeline.note_instance(FAULTED, OLD)
    event = timeline.emit("ingest", "started", "started execution x", node=FAULTED, instance="i-0forged")
    assert event.instance == "i-0forged"


def test_a_new_instance_without_a_node_and_a_line_about_no_node() -> None:
    timeline = Timeline()
    launched = timeline.emit("karpenter", "instance-launched", "launched", instance=NEW)
    assert node_column(launched) == f"{NO_NODE_YET} {NEW}"
    unknown = timeline.emit("scheduler", "pod-bound", "bound", node="gpu-a")
    assert node_column(unknown) == "gpu-a -"
    assert node_column(timeline.emit("scheduler", "workload-running", "running again")) == ""


def test_the_printer_puts_the_node_column_between_who_and_what_aligned() -> None:
    timeline = Timeline()
    timeline.note_instance(FAULTED, OLD)
    timeline.note_instance(REPLACEMENT, NEW)
    out = io.StringIO()
    timeline.subscribe(TimelinePrinter(timeline, out, color=False))
    timeline.emit("workflow", "terminated", f"EC2 TerminateInstances {OLD}", node=FAULTED)
    timeline.emit("karpenter", "node-ready", "replacement Node ip-10-0-104-185 Ready", node=REPLACEMENT)
    timeline.emit("scheduler", "workload-running", "llm-pretrain running again: 3/3 pods Running")
    lines = out.getvalue().splitlines()
    # "  " + elapsed ("+7.2f" and "s") + "  " + who (11) + " ", then the node column, "  ", what.
    column = 2 + 8 + 2 + 11 + 1
    what = column + NODE_COLUMN + 2
    assert [line[column:what].strip() for line in lines] == [
        f"ip-10-0-136-45 {OLD}",
        f"ip-10-0-104-185 {NEW}",
        "",
    ]
    assert [line[what:] for line in lines] == [
        f"EC2 TerminateInstances {OLD}",
        "replacement Node ip-10-0-104-185 Ready",
        "llm-pretrain running again: 3/3 pods Running",
    ]
