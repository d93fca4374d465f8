"""``nodeheal demo``: the command a newcomer runs first. It must show every hop and exit 0, and
exit non-zero with a clear message when the scenario's outcome did not happen."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeheal.cli import main
from nodeheal.commands import demo, rule_matching
from nodeheal.sim.local_pipeline.scenarios import play, scenario_index
from nodeheal.sim.timeline import NODE_COLUMN
from nodeheal.workflow.records import Outcome

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def restore_environment() -> Iterator[None]:
    # The demo quiets Powertools through the process environment; give later tests theirs back.
    names = ("POWERTOOLS_LOG_LEVEL", "POWERTOOLS_METRICS_DISABLED")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(scenario_index.SCENARIOS)
    assert demo.DEFAULT_SCENARIO in listed


def test_unknown_scenario_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--scenario", "xid999"]) == 2
    assert "unknown scenario 'xid999'" in capsys.readouterr().err


def test_an_invalid_config_is_a_usage_error_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads((ROOT / "cdk.json").read_text())
    document["context"]["nodeheal"]["budgets"]["maxInflight"] = 3
    config = tmp_path / "cdk.json"
    config.write_text(json.dumps(document))
    assert main(["demo", "--config", str(config)]) == 2
    assert "context.nodeheal.budgets.maxInflight (did you mean 'maxInFlight'?)" in capsys.readouterr().err


def test_default_demo_shows_the_whole_path_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    # The checkout's cdk.json ships mode dry-run: the demo runs it in full and says so first.
    assert json.loads((ROOT / "cdk.json").read_text())["context"]["nodeheal"]["mode"] == "dry-run"
    assert main(["demo"]) == 0

    out = capsys.readouterr().out
    header = out[: out.index("synthesizing")]
    assert f"settings: {ROOT / 'cdk.json'}, except what the demo changes:" in header
    assert any(line.split()[:4] == ["mode", "dry-run", "->", "full"] for line in header.splitlines()), header
    assert any(
        line.split()[:4] == ["drain.timeoutSeconds", "900", "->", "15"] for line in header.splitlines()
    )
    steps = [
        "Xid 79 (GPU has fallen off the bus) on ",
        "saw GPUProblem False -> True",
        "PutEvents to bus nodeheal",
        "rule IngestRule",
        "started execution training-on-eks-ip-",
        "decision: REPLACE - Xid 79",
        "cordoned and tainted",
        "drained: 1 pod(s) evicted",
        "EC2 TerminateInstances i-",
        "replacement Node ip-",
        "llm-pretrain running again: 3/3 pods Running",
        "remediation history (ledger):",
        "notification about ip-",
        "  Subject: NodeHeal replaced: ip-",
        "  Message attributes: action=replace, cluster=training-on-eks, node=ip-",
        "  Outcome:   replaced - instance i-",
        "  Next:      Nothing to do: Karpenter provisions a replacement",
        "summary: replaced in 1 execution(s)",
    ]
    story = out[out.index("\ntimeline (") :]
    positions = [story.find(step) for step in steps]
    assert -1 not in positions, [s for s, p in zip(steps, positions, strict=True) if p == -1]
    assert positions == sorted(positions)
    assert '"_aws"' not in out and '"level"' not in out  # handler metrics and logs stay out of the way
    assert_every_line_names_its_node_and_instance(out)
    # The notification was published once and shown as SNS delivered it.
    assert out.count("  Subject: NodeHeal replaced: ") == 1
    assert "more notification" not in out


def timeline_lines(out: str) -> list[tuple[str, str]]:
    """(node column, what) of each printed timeline line."""
    start = out.index("\ntimeline (") + 1
    lines = out[start : out.index("\n\n", start)].splitlines()[1:]
    column = 2 + 8 + 2 + 11 + 1  # elapsed, who
    return [(line[column : column + NODE_COLUMN].strip(), line[column + NODE_COLUMN + 2 :]) for line in lines]


def assert_every_line_names_its_node_and_instance(out: str) -> None:
    lines = timeline_lines(out)
    about_a_node = re.compile(r"(?P<node>ip-[\d-]+|\(no Node yet\)) (?P<instance>i-[0-9a-f]{17})")
    columns = {}
    for node, what in lines:
        if what.startswith("llm-pretrain running again"):
            assert node == "", what  # about the job, not a node
            continue
        match = about_a_node.fullmatch(node)
        assert match, (node, what)
        columns.setdefault(match["node"], set()).add(match["instance"])
    # One instance per node name; the faulted node's is the one terminated, the replacement's is
    # the one Karpenter launched.
    assert all(len(instances) == 1 for instances in columns.values()), columns
    faulted = re.search(r"Xid 79 \(GPU has fallen off the bus\) on (ip-[\d-]+)", out)
    terminated = re.search(r"EC2 TerminateInstances (i-[0-9a-f]{17})", out)
    ready = re.search(r"replacement Node (ip-[\d-]+) Ready \((i-[0-9a-f]{17})", out)
    launched = re.search(r"launched (i-[0-9a-f]{17})", out)
    assert faulted and terminated and ready and launched
    assert columns[faulted[1]] == {terminated[1]}
    assert columns[ready[1]] == {ready[2]} == {launched[1]}
    assert columns["(no Node yet)"] == {launched[1]}


@pytest.fixture
def xid63_expecting_a_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scenario xid63 with a check it cannot pass: Xid 63 is recorded, never replaced."""

    def expect_replaced(run: play.ScenarioRun) -> None:
        run.expect_outcome(run.only_record(run.subject), Outcome.REPLACED)

    wrong = dataclasses.replace(scenario_index.SCENARIOS["xid63"], check=expect_replaced)
    monkeypatch.setitem(scenario_index.SCENARIOS, "xid63", wrong)


@pytest.mark.usefixtures("xid63_expecting_a_replacement")
def test_demo_exits_1_with_the_reason_when_the_outcome_did_not_happen(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--scenario", "xid63"]) == 1

    err = capsys.readouterr().err
    assert "scenario xid63 did not end as expected" in err
    assert "outcome recorded, expected replaced" in err


def test_json_prints_one_document_on_stdout_and_the_story_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--scenario", "xid63", "--json"]) == 0

    captured = capsys.readouterr()
    document = json.loads(captured.out)  # nothing but the document: handler logs stay out of stdout
    assert document["scenario"] == "xid63"
    assert document["ok"] is True and document["problems"] == []
    assert {"path": "mode", "configured": "dry-run", "used": "full"}.items() <= next(
        change for change in document["settingsChanged"] if change["path"] == "mode"
    ).items()
    assert document["subject"].startswith("ip-")
    record = next(r for r in document["records"] if r["node"] == document["subject"])
    assert document["outcome"] == record["outcome"]
    assert record["execution"] in {e["name"] for e in document["executions"]}
    assert all(e["status"] != "RUNNING" for e in document["executions"])
    assert record["consoleUrl"].startswith("https://")
    # The story a person watches still runs, on stderr.
    assert "\ntimeline (" in captured.err and "summary: " in captured.err


def test_json_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in listed] == list(scenario_index.SCENARIOS)
    assert all(entry["title"] for entry in listed)


@pytest.mark.usefixtures("xid63_expecting_a_replacement")
def test_json_still_exits_1_and_says_why_when_the_outcome_did_not_happen(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--scenario", "xid63", "--json"]) == 1

    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["ok"] is False
    assert any("outcome recorded, expected replaced" in problem for problem in document["problems"])
    assert "scenario xid63 did not end as expected" in captured.err


def config_with(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """The checkout's cdk.json with ``change`` applied to its ``context.nodeheal``."""
    document = json.loads((ROOT / "cdk.json").read_text())
    change(document["context"]["nodeheal"])
    config = tmp_path / "cdk.json"
    config.write_text(json.dumps(document))
    return config


def test_a_rule_that_does_not_match_the_node_is_said_at_once_with_test_patterns_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_with(tmp_path, lambda nodeheal: nodeheal["rule"].update(nodeLabels={"team": ["ml"]}))

    assert main(["demo", "--config", str(config)]) == 1

    captured = capsys.readouterr()
    # What test-pattern says about an Xid 79 event of a node without the label.
    from nodeheal.sim.stack.context import demo_context
    from nodeheal.sim.stack.process_templates import TEMPLATES

    context, _ = demo_context(json.loads(config.read_text())["context"]["nodeheal"], demo.DEFAULT_SPEED)
    rules = rule_matching.template_rules(TEMPLATES.get(context).template)
    example = ROOT / "examples" / "events" / "xid79-fallen-off-the-bus.json"
    events = list(rule_matching.read_events([str(example)], source="nodeheal.exporter."))
    (verdict,) = [v for v in rule_matching.evaluate(rules, events) if v.rule.startswith("IngestRule")]
    why = "; ".join(verdict.reasons)
    assert why == 'detail.node.labels.team: is missing; expected "ml"'
    story = captured.out[captured.out.index("\ntimeline (") :]
    line = next(line for line in story.splitlines() if "no rule matched" in line)
    assert line.split()[1] == "eventbridge" and why in line
    # The demo stops at once with that reason, instead of waiting for a remediation.
    assert "scenario xid79 did not end as expected" in captured.err
    assert why in captured.err and "not reached within" not in captured.err
    assert "started execution" not in story


def test_a_cordon_decision_is_what_the_demo_then_expects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_with(tmp_path, lambda nodeheal: nodeheal["policy"].update(xidActions={"79": "cordon"}))

    assert main(["demo", "--config", str(config), "--json"]) == 0

    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["ok"] is True and document["outcome"] == "cordoned"
    assert "expected after a cordon" in captured.err
    assert "EC2 TerminateInstances" not in captured.err and "evicted" not in captured.err


def test_two_detectors_one_fault_prints_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--scenario", "two-detectors", "--speed", "300"]) == 0

    out = capsys.readouterr().out
    answer = out[out.index("two detectors, one fault: ") : out.index("\nremediation history")]
    lines = answer.splitlines()
    assert lines[0] == "two detectors, one fault: 2 executions, 2 ledger records, 1 notification(s)"
    assert {line.split()[0] for line in lines[1:3]} == {"GPUProblem", "AcceleratedHardwareReady"}
    assert any("replaced - instance i-" in line for line in lines[1:3])
    assert any(
        "waited behind the other execution, then skipped - node no longer exists" in line for line in lines
    )
    assert lines[3].startswith("  notification: NodeHeal replaced: ip-")
    # The summary is about the execution that decided, not the one that found the node gone.
    assert "Xid 79 -> replaced" in out[out.index("summary: ") :]
