"""``nodeheal test-pattern``: template rules, deployed rules (moto + TestEventPattern), errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodeheal.commands import rule_matching
from nodeheal.patterns import match
from tests.deployment import eventbridge_stand_in
from tests.unit.cli.conftest import BUS, Aws, Result
from tests.unit.test_patterns_moto import condition_detail, nodeheal_pattern

Cli = Callable[..., Result]


def write(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document))
    return str(path)


@pytest.fixture
def template(tmp_path: Path) -> str:
    return write(
        tmp_path / "NodeHeal.template.json",
        {
            "Resources": {
                "IngestRule30A020D8": {
                    "Type": "AWS::Events::Rule",
                    "Properties": {"EventPattern": nodeheal_pattern()},
                },
                "Nightly": {"Type": "AWS::Events::Rule", "Properties": {"ScheduleExpression": "rate(1 day)"}},
            }
        },
    )


@pytest.fixture
def bad(tmp_path: Path) -> str:
    return write(tmp_path / "healthy.json", condition_detail("GPUProblem", "False"))


@pytest.fixture
def good(tmp_path: Path) -> str:
    return write(tmp_path / "xid79.json", condition_detail("GPUProblem", "True"))


def test_reports_matches_and_why_not(cli: Cli, template: str, good: str, bad: str) -> None:
    result = cli("test-pattern", "--template", template, good, bad)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["EVENT", "RULE", "RESULT", "WHY", "NOT"]
    assert lines[1].startswith(good) and "MATCH" in lines[1]
    assert lines[2].startswith(bad) and "no match" in lines[2]
    assert 'detail.condition.status: is "False"; expected "True"' in lines[2]
    # Wrapped as the detail's own cluster exporter would send it (contract 1.1).
    assert "note: contract detail wrapped with source 'nodeheal.exporter.training-on-eks'" in result.out
    assert "1 of 2 event(s) match at least one rule" in result.out


def test_json_and_full_envelopes_and_arrays(cli: Cli, template: str, tmp_path: Path) -> None:
    envelope = {
        "version": "0",
        "id": "1",
        "detail-type": "Node Condition Changed",
        "source": "nodeheal.exporter",
        "account": "123456789012",
        "time": "2026-11-21T10:00:01Z",
        "region": "us-west-2",
        "resources": [],
        "detail": condition_detail("Ready", "Unknown"),
    }
    foreign = {**envelope, "source": "someone.else"}
    events = write(tmp_path / "events.json", [envelope, foreign])
    verdicts = cli("test-pattern", "--template", template, events, "--json").json()
    assert [(v["event"], v["matched"]) for v in verdicts] == [(f"{events}[0]", True), (f"{events}[1]", False)]
    assert verdicts[1]["reasons"] == [
        'source: is "someone.else"; expected "nodeheal.exporter" or prefix "nodeheal.exporter."'
    ]
    assert "notes" not in verdicts[0]


def test_expect_sets_the_exit_code(cli: Cli, template: str, good: str, bad: str) -> None:
    assert cli("test-pattern", "--template", template, good, "--expect", "match").code == 0
    assert cli("test-pattern", "--template", template, good, bad, "--expect", "match").code == 1
    assert cli("test-pattern", "--template", template, bad, "--expect", "no-match").code == 0
    assert cli("test-pattern", "--template", template, good, "--expect", "no-match").code == 1


def test_stdin(cli: Cli, template: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(condition_detail("KernelDeadlock", "True"))))
    result = cli("test-pattern", "--template", template, "-", "--json")
    assert result.json()[0]["matched"] is True


def test_rule_selection(cli: Cli, template: str, good: str) -> None:
    assert cli("test-pattern", "--template", template, "--rule", "IngestRule30A020D8", good).code == 0
    result = cli("test-pattern", "--template", template, "--rule", "Missing", good)
    assert result.code == 2
    assert "no rule named Missing; rules: IngestRule30A020D8" in result.err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("42", "an event is a JSON object"),
        ('{"hello": 1}', "neither an EventBridge event"),
    ],
)
def test_malformed_events_are_one_line_exit_2(
    cli: Cli, template: str, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "event.json"
    path.write_text(content)
    result = cli("test-pattern", "--template", template, str(path))
    assert result.code == 2
    assert message in result.err and result.err.count("\n") == 1


def test_missing_event_file(cli: Cli, template: str, tmp_path: Path) -> None:
    result = cli("test-pattern", "--template", template, str(tmp_path / "none.json"))
    assert result.code == 2 and "cannot read" in result.err


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"Resources": {}}, "no EventBridge rule with an event pattern"),
        ({"nothing": 1}, "not a CloudFormation template"),
        (
            {
                "Resources": {
                    "R": {
                        "Type": "AWS::Events::Rule",
                        "Properties": {"EventPattern": {"source": [{"Ref": "X"}]}},
                    }
                }
            },
            "uses CloudFormation functions",
        ),
        (
            {
                "Resources": {
                    "R": {"Type": "AWS::Events::Rule", "Properties": {"EventPattern": {"source": []}}}
                }
            },
            "source: empty arrays are not allowed",
        ),
    ],
)
def test_bad_templates(cli: Cli, tmp_path: Path, good: str, document: Any, message: str) -> None:
    result = cli("test-pattern", "--template", write(tmp_path / "t.json", document), good)
    assert result.code == 2
    assert message in result.err


def test_config_without_nodeheal_context(cli: Cli, tmp_path: Path, good: str) -> None:
    result = cli("test-pattern", "--config", write(tmp_path / "cdk.json", {"context": {}}), good)
    assert result.code == 2 and "has no context.nodeheal object" in result.err


def test_deployed_rules_through_testeventpattern(
    cli: Cli, aws: Aws, monkeypatch: pytest.MonkeyPatch, good: str, bad: str
) -> None:
    aws.events.create_event_bus(Name=BUS)
    aws.events.put_rule(Name="nodeheal-ingest", EventBusName=BUS, EventPattern=json.dumps(nodeheal_pattern()))
    calls: list[Any] = []

    def client(boto_session: Any) -> Any:
        created = boto_session.client("events")
        created.meta.events.register(
            "before-call.events.TestEventPattern",
            lambda params, **_: calls.append(json.loads(params["body"])),
        )
        eventbridge_stand_in(created.meta.events)
        return created

    monkeypatch.setattr(rule_matching, "events_client", client)
    result = cli("test-pattern", "--deployed", good, bad, "--json")
    assert result.code == 0, result.err
    verdicts = result.json()
    assert [(v["rule"], v["matched"], v["eventbridge"]) for v in verdicts] == [
        ("nodeheal-ingest", True, True),
        ("nodeheal-ingest", False, False),
    ]
    assert verdicts[1]["reasons"] == list(match(nodeheal_pattern(), json.loads(calls[1]["Event"])).reasons)
    for params in calls:
        event = json.loads(params["Event"])
        assert {"id", "account", "source", "time", "region", "resources", "detail-type"} <= set(event)


def test_deployed_bus_without_rules(cli: Cli, aws: Aws, good: str) -> None:
    aws.events.create_event_bus(Name=BUS)
    result = cli("test-pattern", "--deployed", good)
    assert result.code == 2
    assert f"event bus {BUS} has no rule with an event pattern" in result.err


def test_deployed_missing_bus(cli: Cli, aws: Aws, good: str) -> None:
    result = cli("test-pattern", "--deployed", "--bus", "gone", good)
    assert result.code == 1
    assert "list the rules of event bus gone: ResourceNotFoundException" in result.err
