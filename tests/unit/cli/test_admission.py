"""``nodeheal breaker status|reset`` and ``pause|resume`` against a moto ledger, and Admit honouring them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from nodeheal.config import BudgetSettings
from nodeheal.workflow import budget
from nodeheal.workflow.budget import BreakerState, InFlight, NodeStamp, PoolHealth
from tests.unit.cli.conftest import CLUSTER, Aws, Result, now

Cli = Callable[..., Result]


@pytest.fixture
def tripped(aws: Aws) -> None:
    t = now()
    state = aws.ledger.read_admission_state(CLUSTER)
    aws.ledger.write_admission_state(
        replace(
            state,
            breaker=BreakerState(
                open=True, opened_at=t, reason="3 nodes refused by the budget within 30 min"
            ),
            recent_refusals=tuple(NodeStamp(f"n{i}", t) for i in range(3)),
            in_flight={"gpu-a": InFlight("exec-a", "gpu", t, t + timedelta(hours=2))},
        )
    )


def _admits(aws: Aws) -> budget.BudgetVerdict:
    return budget.admit(
        aws.ledger.read_admission_state(CLUSTER),
        node="gpu-z",
        execution="exec-z",
        pool=PoolHealth("gpu", 10, frozenset()),
        settings=BudgetSettings(),
        lock_ttl=timedelta(hours=2),
        now=now(),
    )


def test_status_of_an_open_breaker_exits_1(cli: Cli, tripped: None) -> None:
    result = cli("breaker", "status")
    assert result.code == 1
    header, row, *_ = result.out.splitlines()
    assert header.split()[:3] == ["CLUSTER", "BREAKER", "PAUSED"]
    assert row.startswith(CLUSTER) and "OPEN since" in row
    assert "3 nodes refused by the budget" in result.out
    assert f"nodeheal breaker reset --cluster {CLUSTER}" in result.out
    assert "in flight gpu-a (exec-a" in result.out


def test_status_json(cli: Cli, tripped: None) -> None:
    (state,) = cli("breaker", "status", "--cluster", CLUSTER, "--json").json()
    assert state["breaker"]["open"] is True
    assert state["recentRefusals"] == 3
    assert state["inFlight"][0]["node"] == "gpu-a"


def test_status_without_any_state(cli: Cli, aws: Aws) -> None:
    result = cli("breaker", "status")
    assert result.code == 0
    assert "no cluster has admission state" in result.out


def test_reset_closes_the_breaker_and_forgets_the_refusals(cli: Cli, aws: Aws, tripped: None) -> None:
    assert not _admits(aws).admitted
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--no-reevaluate", "--yes")
    assert result.code == 0, result.err
    assert "breaker closed" in result.out
    state = aws.ledger.read_admission_state(CLUSTER)
    assert not state.breaker.open and state.recent_refusals == ()
    assert "gpu-a" in state.in_flight, "a reset must not drop running remediations' slots"
    assert _admits(aws).admitted
    assert cli("breaker", "status").code == 0
    again = cli("breaker", "reset", "--cluster", CLUSTER, "--no-reevaluate", "--yes")
    assert "already closed" in again.out


def test_reset_without_a_terminal_needs_yes(cli: Cli, tripped: None, aws: Aws) -> None:
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--no-reevaluate")
    assert result.code == 2
    assert "pass --yes" in result.err
    assert aws.ledger.read_admission_state(CLUSTER).breaker.open


def test_reset_answered_no_changes_nothing(
    cli: Cli, tripped: None, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--no-reevaluate")
    assert result.code == 1
    assert "cancelled" in result.err
    assert aws.ledger.read_admission_state(CLUSTER).breaker.open


def test_pause_refuses_admissions_until_resume(cli: Cli, aws: Aws) -> None:
    result = cli("pause", "--cluster", CLUSTER, "--reason", "driver upgrade", "--yes")
    assert result.code == 0, result.err
    verdict = _admits(aws)
    assert not verdict.admitted and "driver upgrade" in verdict.reason
    status = cli("breaker", "status").out
    assert "PAUSED: driver upgrade" in status
    assert "already paused" in cli("pause", "--cluster", CLUSTER, "--reason", "driver upgrade", "--yes").out
    assert cli("resume", "--cluster", CLUSTER, "--yes").code == 0
    assert _admits(aws).admitted
    assert "was not paused" in cli("resume", "--cluster", CLUSTER, "--yes").out


def test_pause_and_resume_json_say_what_changed_and_the_state_now(cli: Cli, aws: Aws) -> None:
    paused = cli(
        "pause", "--cluster", CLUSTER, "--cluster", "inference", "--reason", "driver 570", "--yes", "--json"
    )
    assert paused.code == 0, paused.err
    documents = paused.json()
    assert [(d["cluster"], d["changed"]) for d in documents] == [(CLUSTER, True), ("inference", True)]
    for document in documents:
        # The state as the ledger now holds it, in breaker status --json's shape.
        assert (
            document["state"]
            == cli("breaker", "status", "--cluster", document["cluster"], "--json").json()[0]
        )
        assert (document["state"]["paused"], document["state"]["pausedReason"]) == (True, "driver 570")
    (again,) = cli("pause", "--cluster", CLUSTER, "--reason", "driver 570", "--yes", "--json").json()
    assert again["changed"] is False and again["state"]["paused"] is True
    resumed = cli("resume", "--cluster", CLUSTER, "--yes", "--json")
    assert resumed.code == 0 and resumed.err == ""
    (document,) = resumed.json()
    assert (document["changed"], document["state"]["paused"], document["state"]["pausedReason"]) == (
        True,
        False,
        "",
    )
    assert [d["changed"] for d in cli("resume", "--cluster", CLUSTER, "--yes", "--json").json()] == [False]
    assert _admits(aws).admitted


def test_json_still_needs_the_confirmation(cli: Cli, aws: Aws) -> None:
    result = cli("pause", "--cluster", CLUSTER, "--reason", "driver 570", "--json")
    assert (result.code, result.out) == (2, "")
    assert "pass --yes" in result.err
    assert not aws.ledger.read_admission_state(CLUSTER).paused


def test_reset_without_reevaluation_json(cli: Cli, aws: Aws, tripped: None) -> None:
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--no-reevaluate", "--yes", "--json")
    assert result.code == 0, result.err
    document = result.json()
    assert document["reevaluated"] is False
    (cluster,) = document["clusters"]
    # The breaker as the reset found it, and that this reset closed it; no node was read.
    assert cluster["breaker"]["open"] is True
    assert cluster["breaker"]["reason"] == "3 nodes refused by the budget within 30 min"
    assert (cluster["cluster"], cluster["closed"], cluster["paused"], cluster["nodes"]) == (
        CLUSTER,
        True,
        False,
        [],
    )
    assert not aws.ledger.read_admission_state(CLUSTER).breaker.open
    (again,) = cli("breaker", "reset", "--cluster", CLUSTER, "--no-reevaluate", "--yes", "--json").json()[
        "clusters"
    ]
    assert (again["breaker"]["open"], again["closed"]) == (False, False)


def test_pause_needs_a_cluster_and_a_reason(cli: Cli, aws: Aws) -> None:
    assert cli("pause", "--reason", "x", "--yes").code == 2
    assert cli("pause", "--cluster", CLUSTER, "--yes").code == 2
    blank = cli("pause", "--cluster", CLUSTER, "--reason", "  ", "--yes")
    assert blank.code == 2 and "--reason must say why" in blank.err


def test_missing_table(cli: Cli, aws: Aws) -> None:
    result = cli("breaker", "status", "--cluster", CLUSTER, "--table", "gone")
    assert result.code == 1
    assert "ResourceNotFoundException" in result.err
