"""Hostile input into ingest and `nodeheal explain`: clear rejection, no escaping exception, no mutation.

Hypothesis generates whole payloads of the wrong shape and single-field corruptions of a valid
event (wrong types, missing fields, huge and unicode strings, impossible timestamps). Settings are
derandomized with a bounded example count so CI runs the same cases in seconds every time.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeheal.cli import main as cli_main
from nodeheal.timestamps import format_timestamp, utc_now
from nodeheal.workflow.ingest import IngestSettings, ingest
from nodeheal.workflow.records import DroppedEvent

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

NOW = utc_now()

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(
        alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF, exclude_categories=("Cs",)),
        max_size=20,
    ),
    st.just("x" * 300_000),
)
json_value = st.recursive(
    json_leaf,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
bad_timestamps = st.sampled_from(
    [
        "",
        "yesterday",
        "2026-13-45T99:99:99Z",
        "2026-11-21T10:00:00",
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:00Z",
        "2026-11-21T10:00:00+25:00",
        "1e309",
        "\uff12\uff10\uff12\uff16-11-21T10:00:00Z",
    ]
)


def valid_envelope() -> dict[str, Any]:
    observed = format_timestamp(NOW - timedelta(seconds=2), millis=True)
    return {
        "version": "0",
        "id": "9f6c-valid",
        "detail-type": "Node Condition Changed",
        "source": "nodeheal.exporter",
        "account": "123456789012",
        "time": observed,
        "region": "us-west-2",
        "resources": [],
        "detail": {
            "schemaVersion": "1",
            "cluster": "training-on-eks",
            "node": {
                "name": "ip-10-0-1-2.us-west-2.compute.internal",
                "uid": "u-1",
                "providerID": "aws:///us-west-2b/i-0abc12345678",
                "instanceID": "i-0abc12345678",
                "labels": {"karpenter.sh/nodepool": "gpu"},
            },
            "condition": {
                "type": "GPUProblem",
                "status": "True",
                "reason": "GPUHardwareError",
                "message": "NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus.",
                "lastTransitionTime": format_timestamp(NOW - timedelta(seconds=3)),
            },
            "previous": {"status": "False", "reason": "GPUHealthy"},
            "observedAt": observed,
            "resync": False,
        },
    }


#: Paths of the fields a corruption may replace or remove.
FIELD_PATHS: list[tuple[str, ...]] = [
    ("detail",),
    ("detail-type",),
    ("source",),
    ("id",),
    ("detail", "schemaVersion"),
    ("detail", "cluster"),
    ("detail", "node"),
    ("detail", "node", "name"),
    ("detail", "node", "labels"),
    ("detail", "node", "providerID"),
    ("detail", "condition"),
    ("detail", "condition", "type"),
    ("detail", "condition", "status"),
    ("detail", "condition", "message"),
    ("detail", "condition", "lastTransitionTime"),
    ("detail", "previous"),
    ("detail", "observedAt"),
    ("detail", "resync"),
]


@st.composite
def corrupted_envelopes(draw: st.DrawFn) -> dict[str, Any]:
    envelope = valid_envelope()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(FIELD_PATHS))
        parent: Any = envelope
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if draw(st.booleans()):
            parent.pop(path[-1], None)
        elif path[-1] in ("lastTransitionTime", "observedAt"):
            parent[path[-1]] = draw(bad_timestamps | json_leaf)
        else:
            parent[path[-1]] = draw(json_value)
    return envelope


class RecordingStarter:
    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, name: str, payload: Any) -> str:
        json.dumps(payload)  # what Step Functions would receive must serialise
        self.started.append(name)
        return f"arn:aws:states:us-west-2:123456789012:execution:NodeHeal:{name}"


class RecordingLedger:
    """Only the dropped-event log may be written by ingest; anything else is a mutation."""

    def __init__(self) -> None:
        self.dropped: list[DroppedEvent] = []

    def put_dropped_event(self, dropped: DroppedEvent) -> None:
        json.dumps(dropped.to_item())
        assert len(dropped.excerpt.encode()) <= 2048
        self.dropped.append(dropped)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"ingest touched the ledger through {name}")


INGEST = IngestSettings(
    clusters=frozenset({"training-on-eks"}),
    stale_after=timedelta(seconds=900),
    event_source="nodeheal.exporter",
)


def _ingest(payload: Any) -> tuple[Any, RecordingStarter, RecordingLedger]:
    starter, ledger = RecordingStarter(), RecordingLedger()
    before = copy.deepcopy(payload)
    result = ingest(payload, settings=INGEST, starter=starter, ledger=ledger, now=NOW)  # type: ignore[arg-type]
    assert payload == before or payload != payload, "ingest mutated its input"  # NaN is never equal to itself
    return result, starter, ledger


def test_the_valid_event_is_accepted() -> None:
    result, starter, ledger = _ingest(valid_envelope())
    assert result.status == "started" and len(starter.started) == 1 and not ledger.dropped


@FUZZ
@given(json_value)
def test_ingest_rejects_arbitrary_payloads(payload: Any) -> None:
    result, starter, ledger = _ingest(payload)
    assert result.status == "dropped" and result.category == "malformed"
    assert result.reason and not starter.started and len(ledger.dropped) == 1


@FUZZ
@given(corrupted_envelopes())
def test_ingest_rejects_corrupted_events_clearly(envelope: dict[str, Any]) -> None:
    result, starter, ledger = _ingest(envelope)
    if result.status == "started":
        # The corruption hit only an optional field: the event is still a valid contract-v1 event.
        assert len(starter.started) == 1 and not ledger.dropped
        assert len(starter.started[0]) <= 80
    else:
        assert result.status == "dropped", result
        assert result.reason and result.category and not starter.started and len(ledger.dropped) == 1


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("explain")


def _explain(workdir: Path, document: Any, *flags: str) -> tuple[int, str, str]:
    path = workdir / "event.json"
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["explain", str(path), *flags])
    return code, out.getvalue(), err.getvalue()


@FUZZ
@given(json_value | corrupted_envelopes())
def test_explain_rejects_bad_input_with_a_message(workdir: Path, document: Any) -> None:
    code, out, err = _explain(workdir, document, "--json")
    if code == 0:
        json.loads(out)  # an explanation, as JSON
        # The summary for a person is rendered from that same document: whatever it accepts, it shows.
        summary_code, summary, summary_err = _explain(workdir, document)
        # stderr says which settings decided, and nothing else.
        assert summary_code == 0 and summary_err.startswith("settings: ") and summary_err.count("\n") == 1
        assert summary.strip()
    else:
        assert code == 2, err
        assert err.startswith("nodeheal explain: ") and "Traceback" not in err


@FUZZ
@given(st.text(max_size=200))
def test_explain_rejects_text_that_is_not_json(workdir: Path, text: str) -> None:
    code, _, err = _explain(workdir, text)
    assert code in (0, 2)
    if code:
        assert err.startswith("nodeheal explain: ")
