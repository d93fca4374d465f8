"""examples/: one event of contract 1.1 per fault class and a Node, as detectors and the exporter
produce them. Each event meets the contract, gets the decision examples/README.md promises, and is
matched (or not) by the shipped rule; the Node is one the API server accepts and the exporter
turns into the same event as the Xid 79 example."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft4Validator
from kubernetes import client

from nodeheal import contracts
from nodeheal.actions import Mode
from nodeheal.cdk.rule_pattern import build_event_pattern
from nodeheal.commands.explain import explain_event, explain_node
from nodeheal.config import RemediationSettings
from nodeheal.deploy_config import load_cdk_json
from nodeheal.events import node_identity, unwrap_eventbridge_envelope
from nodeheal.exporter.transitions import TransitionTracker
from nodeheal.patterns import match
from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EVENTS = sorted((EXAMPLES / "events").glob("*.json"))
NODE = EXAMPLES / "node-p5-xid79.json"
README = (EXAMPLES / "README.md").read_text()

#: file -> (action, seconds the condition must stay bad first): what examples/README.md says.
EXPECTED = {
    "xid79-fallen-off-the-bus": ("replace", 0),
    "xid48-double-bit-ecc": ("reboot", 0),
    "xid13-application": ("none", 0),
    "xid94-contained-rst-yes": ("reboot", 0),
    "xid94-contained-rst-no": ("none", 0),
    "nvlink-fatal-xid149": ("reboot", 0),
    "nvlink-nonfatal-xid149": ("none", 0),
    "nma-xid79": ("replace", 0),
    "nma-double-bit-error": ("reboot", 0),
    "nma-nvlink-error": ("replace", 0),
    "nma-dcgm-error": ("alert", 0),
    "not-ready": ("alert", 600),
    "healthy-gpu": ("none", 0),
}


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def test_every_example_event_is_listed_with_its_decision() -> None:
    assert {path.stem for path in EVENTS} == set(EXPECTED)


@pytest.mark.parametrize("path", EVENTS, ids=[path.stem for path in EVENTS])
def test_the_readme_promises_what_explain_decides(path: Path) -> None:
    action, confirm = EXPECTED[path.stem]
    row = re.search(rf"^\| \[`{re.escape(path.name)}`\]\(events/{re.escape(path.name)}\) \|.*$", README, re.M)
    assert row, f"examples/README.md has no row for {path.name}"
    assert f"| `{action}`" in row.group(0)
    if confirm:
        assert f"after {confirm // 60} min" in row.group(0)
    decision = explain_event(unwrap_eventbridge_envelope(load(path)), RemediationSettings(), Mode.FULL)
    assert (decision["action"], decision["confirmSeconds"]) == (action, confirm)


@pytest.mark.parametrize("path", EVENTS, ids=[path.stem for path in EVENTS])
def test_each_event_meets_the_contract_as_a_whole_event(path: Path) -> None:
    event = load(path)
    schema = contracts.registry_schema(
        contracts.condition_changed_schema(event["detail"]), "nodeheal.exporter"
    )
    assert list(Draft4Validator(schema).iter_errors(event)) == []


@pytest.mark.parametrize("path", EVENTS, ids=[path.stem for path in EVENTS])
def test_the_shipped_rule_matches_every_fault_and_not_the_recovery(path: Path) -> None:
    pattern = build_event_pattern(load_cdk_json(ROOT / "cdk.json"))
    assert match(pattern, load(path)).matched is (path.stem != "healthy-gpu")


def test_the_node_is_one_the_api_server_accepts() -> None:
    node = load(NODE)
    with FakeKubeApiServer(ClusterStore()) as server:
        api = client.CoreV1Api(server.api_client())
        created = api.create_node(node)
        assert created.metadata.uid  # the server assigns its own
        read = server.store.get("nodes", node["metadata"]["name"])
    assert read["spec"]["providerID"] == node["spec"]["providerID"]
    assert [c["type"] for c in read["status"]["conditions"]] == [
        c["type"] for c in node["status"]["conditions"]
    ]


def test_the_exporter_turns_the_node_into_the_xid79_event() -> None:
    node = load(NODE)
    example = load(EXAMPLES / "events" / "xid79-fallen-off-the-bus.json")["detail"]
    tracker = TransitionTracker(
        "training-on-eks",
        lambda condition_type: condition_type == "GPUProblem",
        clock=lambda: datetime(2026, 11, 21, 10, 0, 1, 234000, tzinfo=UTC),
    )
    (event,) = tracker.observe(node)
    detail = event.to_detail()
    assert detail["node"] == node_identity(node).to_detail() == example["node"]
    assert detail["condition"] == example["condition"]
    assert detail["observedAt"] == example["observedAt"]


def test_explain_reads_the_node_as_kubectl_prints_it() -> None:
    decisions = explain_node(load(NODE), RemediationSettings(), Mode.FULL)
    assert [(d["condition"]["type"], d["action"]) for d in decisions if d["action"] != "none"] == [
        ("GPUProblem", "replace")
    ]
