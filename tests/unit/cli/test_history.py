"""``nodeheal history`` and ``history show`` against a moto ledger, including every error path."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from nodeheal.actions import Action
from nodeheal.commands.history import parse_since
from nodeheal.workflow.records import Outcome
from tests.unit.cli.conftest import CLUSTER, NODE, TABLE, Aws, Result, make_record, now

Cli = Callable[..., Result]


@pytest.fixture
def records(aws: Aws) -> list[str]:
    t = now()
    written = [
        make_record(started=t - timedelta(hours=30)),  # outside the default 24 h
        make_record(started=t - timedelta(hours=2), outcome=Outcome.ALERTED, action=Action.ALERT, xid=None),
        make_record(started=t - timedelta(minutes=30)),
        make_record(node="ip-10-0-1-2.us-west-2.compute.internal", started=t - timedelta(minutes=10)),
        make_record(
            cluster="inference",
            node="ip-10-0-9-9.us-west-2.compute.internal",
            started=t - timedelta(minutes=5),
        ),
    ]
    for record in written:
        aws.ledger.put_record(record)
    return [r.execution for r in written]


def test_lists_every_cluster_newest_first_with_execution_and_console_url(
    cli: Cli, records: list[str]
) -> None:
    result = cli("history", "--json")
    assert result.code == 0, result.err
    listed = result.json()
    assert [r["execution"] for r in listed] == [records[4], records[3], records[2], records[1]]
    assert listed[0]["cluster"] == "inference"
    assert listed[0]["consoleUrl"] == (
        "https://us-west-2.console.aws.amazon.com/states/home?region=us-west-2"
        f"#/v2/executions/details/arn:aws:states:us-west-2:123456789012:execution:NodeHealRemediation:{records[4]}"
    )


def test_filters_by_cluster_node_outcome_and_since(cli: Cli, records: list[str]) -> None:
    by_node = cli("history", "--cluster", CLUSTER, "--node", NODE, "--since", "2d", "--json").json()
    assert [r["execution"] for r in by_node] == [records[2], records[1], records[0]]
    alerted = cli("history", "--cluster", CLUSTER, "--outcome", "alerted", "--json").json()
    assert [r["execution"] for r in alerted] == [records[1]]
    recent = cli("history", "--cluster", CLUSTER, "--since", "15m", "--json").json()
    assert [r["execution"] for r in recent] == [records[3]]
    limited = cli("history", "--limit", "1", "--json").json()
    assert [r["execution"] for r in limited] == [records[4]]


def test_human_table(cli: Cli, records: list[str]) -> None:
    result = cli("history", "--cluster", CLUSTER, "--table", TABLE)
    assert result.code == 0
    header, *rows = result.out.splitlines()
    assert header.split() == ["STARTED", "CLUSTER", "NODE", "FAULT", "ACTION", "OUTCOME", "TOOK", "EXECUTION"]
    assert any("Xid 79" in row and "replaced" in row and "4.0m" in row and records[2] in row for row in rows)
    assert any("GPUProblem=True" in row and "alerted" in row for row in rows)
    assert "3 record(s) since" in result.out


def test_no_records_says_so(cli: Cli, aws: Aws) -> None:
    result = cli("history")
    assert result.code == 0
    assert "no remediation records since" in result.out


def test_show_prints_stage_timings_and_console_url(cli: Cli, records: list[str]) -> None:
    result = cli("history", "show", records[2])
    assert result.code == 0, result.err
    assert f"Execution: {records[2]}" in result.out
    assert "Decision:  replace (policy asked for replace)" in result.out
    assert "3 evicted, 0 force-deleted, 1 evictions refused by PDBs" in result.out
    assert "https://us-west-2.console.aws.amazon.com/states/home" in result.out
    timings = result.out.split("Stage timings:")[1]
    assert "faultToCordon" in timings and "3.100" in timings and "4.0m" in timings


def test_show_names_the_drain_classes_the_pods_fell_in(cli: Cli, aws: Aws) -> None:
    classes = {
        "emptyDir": {"count": 1, "pods": ["training/cache-0"]},
        "immediate": {"count": 3},
    }
    record = replace(make_record(started=now() - timedelta(minutes=3)), drain_classes=classes)
    aws.ledger.put_record(record)

    result = cli("history", "show", record.execution)
    assert result.code == 0, result.err
    assert "Classes:   emptyDir 1 (training/cache-0); immediate 3" in result.out
    assert cli("history", "show", record.execution, "--json").json()["drainClasses"] == classes


def test_show_accepts_an_execution_arn_and_json(cli: Cli, records: list[str]) -> None:
    arn = f"arn:aws:states:us-west-2:123456789012:execution:NodeHealRemediation:{records[4]}"
    shown = cli("history", "show", arn, "--json").json()
    assert shown["cluster"] == "inference"
    assert shown["stageSeconds"]["faultToRecorded"] == 241.0


def test_show_unknown_execution_is_one_line_exit_1(cli: Cli, records: list[str]) -> None:
    result = cli("history", "show", "training-on-eks-nope-GPUProblem-20260101T000000Z")
    assert result.code == 1
    assert result.err.count("\n") == 1
    assert "no record of execution training-on-eks-nope" in result.err


def test_missing_table_is_a_clear_error(cli: Cli, aws: Aws) -> None:
    result = cli("history", "--cluster", CLUSTER, "--table", "no-such-table")
    assert result.code == 1
    assert "ResourceNotFoundException" in result.err and "no-such-table" in result.err
    assert "Traceback" not in result.err


def test_missing_stack_says_how_to_name_the_table(cli: Cli, aws: Aws) -> None:
    result = cli("history", "--stack", "Other")
    assert result.code == 2
    assert "stack Other does not exist in us-west-2" in result.err


def test_bad_since_is_a_usage_error(cli: Cli) -> None:
    result = cli("history", "--since", "yesterday")
    assert result.code == 2
    assert "neither a duration" in result.err


def test_no_credentials_is_a_clear_error(cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    result = cli("history", "--table", TABLE)
    assert result.code == 2
    assert "no AWS credentials found" in result.err


def test_no_region_is_a_clear_error(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    result = cli("history", "--table", TABLE)
    assert result.code == 2
    assert "no AWS region" in result.err


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
    ],
)
def test_parse_since_durations(text: str, delta: timedelta) -> None:
    reference = now()
    assert parse_since(text, reference) == reference - delta


def test_parse_since_timestamps() -> None:
    assert parse_since("2026-11-21T10:00:00Z").isoformat() == "2026-11-21T10:00:00+00:00"
