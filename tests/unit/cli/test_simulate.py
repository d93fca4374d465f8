"""``nodeheal simulate``: its help says what runs (nothing deployed), and its trace line for each
admission says the decision and the rule that made it, in one bounded line."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from nodeheal.cli import build_parser

EXECUTION = "training-on-eks-ip-10-0-1-14-Ready-20261123T080631Z-e4ac0ddb68c4"


def _simulate_parser() -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            parser: argparse.ArgumentParser = action.choices["simulate"]
            return parser
    raise AssertionError("no simulate subcommand")


def test_the_help_says_nothing_is_deployed() -> None:
    parser = _simulate_parser()
    description = str(parser.description)
    assert "deployed state machine" not in description
    assert "synthesize" in description.lower()
    assert "nothing is deployed" in description
    seed_help = next(str(a.help) for a in parser._actions if "--seed" in a.option_strings)
    assert "decision" in seed_help


def _admission(verdict: str, decision: dict[str, Any] | None, note: str = "") -> dict[str, Any]:
    return {"verdict": verdict, "decision": decision, "note": note, "node": None}


def _decision(action: str, planned: str, reason: str) -> dict[str, Any]:
    return {"action": action, "plannedAction": planned, "reason": reason, "xid": None, "signal": "Ready"}


def test_an_admission_line_names_the_decision_and_its_rule() -> None:
    from nodeheal.sim.seeded.schedule import admission_trace

    reason = "Ready=False (KubeletNotReady) for 300 s: the node is not ready, replace"
    line = admission_trace(EXECUTION, _admission("proceed", _decision("replace", "replace", reason)))
    assert line == f"  admit {EXECUTION}: proceed, replace (rule: replace; {reason})"


def test_a_lowered_decision_shows_both_actions_and_the_note() -> None:
    from nodeheal.sim.seeded.schedule import admission_trace

    admission = _admission(
        "proceed",
        _decision("alert", "replace", "Xid 79: GPU has fallen off the bus. Circuit breaker is open"),
        note="breaker open",
    )
    line = admission_trace(EXECUTION, admission)
    assert ": proceed, alert (rule: replace; Xid 79: GPU has fallen off the bus." in line
    assert line.endswith("; breaker open")


def test_a_stop_without_a_decision_shows_why() -> None:
    from nodeheal.sim.seeded.schedule import admission_trace

    line = admission_trace(EXECUTION, _admission("stop", None, "node no longer exists (live re-check)"))
    assert line == f"  admit {EXECUTION}: stop, no decision: node no longer exists (live re-check)"


@pytest.mark.parametrize("result", [None, "text", {}, {"verdict": "wait", "decision": "broken"}])
def test_an_unexpected_result_still_makes_one_line(result: Any) -> None:
    from nodeheal.sim.seeded.schedule import admission_trace

    line = admission_trace(EXECUTION, result)
    assert line.startswith(f"  admit {EXECUTION}: ") and "\n" not in line


def test_the_line_is_bounded_and_keeps_the_rule_and_the_adjustments() -> None:
    from nodeheal.sim.seeded.schedule import ADMISSION_TRACE_CHARS, admission_trace

    reason = (
        "Xid 79 in the reason: GPU has fallen off the bus\n" + "catalog text. " * 60 + "budget lowered it"
    )
    line = admission_trace(
        EXECUTION, _admission("proceed", _decision("alert", "replace", reason), "over budget")
    )
    assert "\n" not in line
    assert len(line) == len(f"  admit {EXECUTION}: ") + ADMISSION_TRACE_CHARS
    assert f"admit {EXECUTION}: proceed, alert (rule: replace; Xid 79 in the reason: GPU has" in line
    assert " ... " in line
    assert line.endswith("budget lowered it); over budget")
