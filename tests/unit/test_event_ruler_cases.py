"""The pattern engine against the cases of aws/event-ruler's test suite and the EventBridge User Guide.

``nodeheal test-pattern`` promises EventBridge's matching offline; EventBridge matches with
event-ruler, so its own tests (and the user guide's examples) are the yardstick. The cases live in
``fixtures/event_ruler_cases.json``, each with the file and test (or guide page) it comes from and,
where event-ruler and the guide disagree, a note saying which one the case follows (the guide).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeheal.patterns import InvalidPatternError, match, validate_pattern

FIXTURE = Path(__file__).parent / "fixtures" / "event_ruler_cases.json"
CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]
SOURCES = ("aws/event-ruler@", "https://docs.aws.amazon.com/eventbridge/latest/userguide/")
EXPECTATIONS = {"match", "no match", "valid", "invalid"}


def pattern_of(case: dict[str, Any]) -> Any:
    # json.loads keeps the last of a repeated key, which is what the user guide says EventBridge does.
    return json.loads(case["pattern_json"]) if "pattern_json" in case else case["pattern"]


def test_every_case_names_its_source_and_a_known_expectation() -> None:
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)), "case ids are unique"
    for case in CASES:
        assert case["source"].startswith(SOURCES), case["id"]
        assert case["expected"] in EXPECTATIONS, case["id"]
        assert ("event" in case) == (case["expected"] in ("match", "no match")), case["id"]
        assert ("pattern" in case) != ("pattern_json" in case), case["id"]


def test_the_table_covers_both_sources_and_every_kind_of_verdict() -> None:
    by_source = {prefix: sum(case["source"].startswith(prefix) for case in CASES) for prefix in SOURCES}
    assert all(count >= 50 for count in by_source.values()), by_source
    assert {case["expected"] for case in CASES} == EXPECTATIONS


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_case(case: dict[str, Any]) -> None:
    pattern = pattern_of(case)
    expected = case["expected"]
    context = f"{case['source']}: {case.get('note', '')}"
    if expected == "invalid":
        with pytest.raises(InvalidPatternError):
            validate_pattern(pattern)
        return
    validate_pattern(pattern)
    if expected == "valid":
        return
    result = match(pattern, case["event"])
    assert result.matched == (expected == "match"), (context, result.reasons)
    # A refusal always says which field refused; a match has nothing to explain.
    assert bool(result.reasons) == (not result.matched), result.reasons
