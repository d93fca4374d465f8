"""``nodeheal inject`` against the fake API server through a real kubeconfig, as NPD would patch."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from nodeheal.commands.inject import XID_REASONS, xid_message
from nodeheal.policy.classify import DEFAULT_CONDITION_RULES
from nodeheal.policy.signals import xids_in_message
from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node
from tests.unit.cli.conftest import Result, kubeconfig

Cli = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[3]
NODE = "gpu-a"


@pytest.fixture(autouse=True)
def no_deployment() -> Iterator[None]:
    """An AWS account without NodeHeal (moto): the policy falls back to the built-in defaults
    without any request leaving the machine."""
    with mock_aws():
        yield


@pytest.fixture
def server() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(make_node(NODE, instance_id="i-0a"), make_node("gpu-b", instance_id="i-0b"))
    with FakeKubeApiServer(store) as srv:
        yield srv


@pytest.fixture
def config(server: FakeKubeApiServer, tmp_path: Path) -> str:
    return str(kubeconfig(tmp_path / "kubeconfig", server.url))


def condition(server: FakeKubeApiServer, node: str, ctype: str) -> dict[str, Any] | None:
    obj = server.store.get("nodes", node)
    return next((c for c in obj["status"]["conditions"] if c["type"] == ctype), None)


def test_xid_79_sets_gpuproblem_like_npd(cli: Cli, server: FakeKubeApiServer, config: str) -> None:
    others = {
        c["type"]: c
        for c in server.store.get("nodes", NODE)["status"]["conditions"]
        if c["type"] != "GPUProblem"
    }
    result = cli(
        "inject", "--cluster", "sim", "--node", NODE, "--xid", "79", "--kubeconfig", config, "--yes", "--json"
    )
    assert result.code == 0, result.err
    set_ = condition(server, NODE, "GPUProblem")
    assert set_ is not None
    assert (set_["status"], set_["reason"]) == ("True", "GPUFellOffBus")
    assert set_["message"].startswith("NVRM: Xid (PCI:0000:3b:00): 79,")
    assert set_["lastTransitionTime"] == set_["lastHeartbeatTime"]
    after = {
        c["type"]: c
        for c in server.store.get("nodes", NODE)["status"]["conditions"]
        if c["type"] != "GPUProblem"
    }
    assert after == others, "a strategic merge on conditions leaves the other conditions alone"
    body = result.json()
    assert body["transitioned"] is True
    # The built-in defaults decide in dry-run: replace is what full would do.
    assert (body["decision"]["action"], body["decision"]["plannedAction"]) == ("none", "replace")
    assert condition(server, "gpu-b", "GPUProblem") == next(
        c for c in server.store.get("nodes", "gpu-b")["status"]["conditions"] if c["type"] == "GPUProblem"
    )


def test_same_status_again_keeps_the_transition_time(
    cli: Cli, server: FakeKubeApiServer, config: str
) -> None:
    args = ("inject", "--cluster", "sim", "--node", NODE, "--kubeconfig", config, "--yes")
    assert cli(*args, "--xid", "79").code == 0
    first = condition(server, NODE, "GPUProblem")
    assert first is not None
    server.store.mutate("nodes", NODE, lambda n: _age_transition(n, "2020-01-01T00:00:00Z"))
    second = cli(*args, "--xid", "79")
    assert second.code == 0
    assert "the status did not change" in second.out
    again = condition(server, NODE, "GPUProblem")
    assert again is not None and again["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    healed = cli(*args, "--condition", "GPUProblem", "--status", "False", "--reason", "GPUHealthy")
    assert healed.code == 0
    cleared = condition(server, NODE, "GPUProblem")
    assert (
        cleared is not None
        and cleared["status"] == "False"
        and cleared["lastTransitionTime"] != "2020-01-01T00:00:00Z"
    )


def _age_transition(node: dict[str, Any], stamp: str) -> None:
    for c in node["status"]["conditions"]:
        if c["type"] == "GPUProblem":
            c["lastTransitionTime"] = stamp


def test_generic_condition_is_added_when_absent(cli: Cli, server: FakeKubeApiServer, config: str) -> None:
    result = cli(
        "inject",
        "--cluster",
        "sim",
        "--node",
        NODE,
        "--kubeconfig",
        config,
        "--yes",
        "--condition",
        "KernelDeadlock",
        "--status",
        "True",
        "--reason",
        "DockerHung",
        "--message",
        "task docker:7 blocked",
    )
    assert result.code == 0, result.err
    added = condition(server, NODE, "KernelDeadlock")
    assert (
        added is not None and added["reason"] == "DockerHung" and added["message"] == "task docker:7 blocked"
    )
    assert "NodeHeal's policy (built-in defaults: the deployed settings could not be read" in result.out
    assert f"nodeheal history --cluster sim --node {NODE}" in result.out


def test_unknown_node_is_exit_1(cli: Cli, config: str) -> None:
    result = cli(
        "inject", "--cluster", "sim", "--node", "nope", "--xid", "79", "--kubeconfig", config, "--yes"
    )
    assert result.code == 1
    assert result.err.strip() == "nodeheal inject: NodeNotFoundError: node nope does not exist in cluster sim"


def test_application_xid_sets_no_condition(cli: Cli, server: FakeKubeApiServer, config: str) -> None:
    result = cli("inject", "--cluster", "sim", "--node", NODE, "--xid", "13", "--kubeconfig", config, "--yes")
    assert result.code == 2
    assert "Xid 13 sets no condition" in result.err


def test_incomplete_fault_is_a_usage_error(cli: Cli, config: str) -> None:
    result = cli(
        "inject", "--cluster", "sim", "--node", NODE, "--condition", "GPUProblem", "--kubeconfig", config
    )
    assert result.code == 2
    assert "give --xid, or all of --condition, --status and --reason" in result.err
    both = cli(
        "inject", "--cluster", "sim", "--node", NODE, "--xid", "79", "--reason", "X", "--kubeconfig", config
    )
    assert both.code == 2


def test_confirmation_is_required_without_a_terminal(
    cli: Cli, server: FakeKubeApiServer, config: str
) -> None:
    before = condition(server, NODE, "GPUProblem")
    result = cli("inject", "--cluster", "sim", "--node", NODE, "--xid", "79", "--kubeconfig", config)
    assert result.code == 2 and "pass --yes" in result.err
    assert condition(server, NODE, "GPUProblem") == before


def test_unreachable_cluster_is_one_line(cli: Cli, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    result = cli(
        "inject", "--cluster", "sim", "--node", NODE, "--xid", "79", "--kubeconfig", str(config), "--yes"
    )
    assert result.code == 1
    assert "KubernetesApiUnavailableError" in result.err and "Traceback" not in result.err


def test_missing_kubeconfig_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    result = cli(
        "inject",
        "--cluster",
        "sim",
        "--node",
        NODE,
        "--xid",
        "79",
        "--kubeconfig",
        str(tmp_path / "none"),
        "--yes",
    )
    assert result.code == 2
    assert "cannot load Kubernetes configuration" in result.err


def test_eks_unknown_cluster_is_one_line(cli: Cli, aws: object) -> None:
    result = cli("inject", "--cluster", "nope", "--node", NODE, "--xid", "79", "--eks", "--yes")
    assert result.code == 2
    assert (
        result.err == "nodeheal inject: EKS cluster 'nope' does not exist: No cluster found for name: nope.\n"
    )


def _npd_rules() -> list[dict[str, Any]]:
    monitor = json.loads((ROOT / "deploy" / "node-problem-detector" / "gpu-monitor.json").read_text())
    return list(monitor["rules"])


@pytest.mark.parametrize("xid", sorted(XID_REASONS))
def test_xid_reasons_are_what_npd_sets(xid: int) -> None:
    message = xid_message(xid)
    rule = next(r for r in _npd_rules() if re.fullmatch(r["pattern"], message))
    assert rule["type"] == "permanent" and rule["condition"] == "GPUProblem"
    assert rule["reason"] == XID_REASONS[xid]
    assert [s.xid for s in xids_in_message(message)] == [xid]


def test_xids_npd_only_records_as_events_are_not_in_the_table() -> None:
    temporary = [r for r in _npd_rules() if r["type"] == "temporary"]
    for xid in (13, 31, 43, 94, 38, 63):
        message = xid_message(xid)
        assert any(re.fullmatch(r["pattern"], message) for r in temporary)
        assert xid not in XID_REASONS


def npd_rules() -> list[tuple[str, str]]:
    """(condition, reason) of every permanent rule in the shipped NPD monitors."""
    directory = Path(__file__).resolve().parents[3] / "deploy" / "node-problem-detector"
    found = set()
    for path in directory.glob("*.json"):
        for rule in json.loads(path.read_text())["rules"]:
            if rule["type"] == "permanent":
                found.add((rule["condition"], rule["reason"]))
    return sorted(found)


@pytest.mark.parametrize(("condition_type", "reason"), npd_rules(), ids=lambda value: value)
def test_via_condition_raises_every_condition_the_shipped_detectors_set(
    cli: Cli, server: FakeKubeApiServer, config: str, condition_type: str, reason: str
) -> None:
    result = cli(
        "inject", "--cluster", "sim", "--node", NODE, "--kubeconfig", config, "--yes", "--json",
        "--via", "condition", "--condition", condition_type, "--status", "True", "--reason", reason,
        "--message", "injected by the test",
    )  # fmt: skip
    assert result.code == 0, result.err
    raised = condition(server, NODE, condition_type)
    assert raised is not None and (raised["status"], raised["reason"]) == ("True", reason)
    # The built-in defaults' mode is dry-run: the planned action is the rule's, nothing is done.
    decision = json.loads(result.out)["decision"]
    rule = DEFAULT_CONDITION_RULES[condition_type]
    assert decision["plannedAction"] == rule.action.value, decision
