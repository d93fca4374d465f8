"""``nodeheal breaker reset`` re-evaluates the nodes still bad (docs/architecture.md, D13), against moto
(ledger, stack outputs, the state machine and its executions) and the fake API server (the live cluster)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from nodeheal.actions import Action, Mode
from nodeheal.config import BudgetSettings, RemediationSettings
from nodeheal.events import NodeConditionEvent
from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node
from nodeheal.workflow.budget import BreakerState, InFlight, NodeStamp
from nodeheal.workflow.ingest import MAX_EXECUTION_NAME, execution_name, reevaluation_name
from nodeheal.workflow.locks import LockClaim
from tests.unit.cli.conftest import CLUSTER, REGION, STATE_MACHINE_ARN, Aws, Result, kubeconfig, now

Cli = Callable[..., Result]

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
#: What the deployed state machine hands every execution; two slots, one of them taken below.
SETTINGS = RemediationSettings(mode=Mode.FULL, budgets=BudgetSettings(max_in_flight=2, max_per_hour=6))


def iid(node: str) -> str:
    """gpu-a's instance is i-aaaaaaaaaaaaaaaaa: a well-formed EC2 ID the node's name gives away."""
    return "i-" + node[-1] * 17


def gpu_fault(message: str = XID_79) -> dict[str, Any]:
    return {"type": "GPUProblem", "status": "True", "reason": "GPUFellOffBus", "message": message}


def monitor_fault() -> dict[str, Any]:
    # The node monitoring agent's DCGM failure: the monitor broke, not the GPU -> alert, no slot.
    return {
        "type": "AcceleratedHardwareReady",
        "status": "False",
        "reason": "DCGMError",
        "message": "DCGM is not responding",
    }


@pytest.fixture
def workflow(aws: Aws) -> Any:
    """The remediation state machine, as deployed: its first state hands out the settings."""
    sfn = boto3.client("stepfunctions", region_name=REGION)
    definition = {
        "StartAt": "Load settings",
        "States": {
            "Load settings": {
                "Type": "Pass",
                "Parameters": {"event.$": "$.event", "settings": SETTINGS.to_json()},
                "Next": "Admit",
            },
            "Admit": {"Type": "Succeed"},
        },
    }
    arn = sfn.create_state_machine(
        name="NodeHeal-remediation",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/NodeHeal-workflow",
    )["stateMachineArn"]
    assert arn == STATE_MACHINE_ARN
    return sfn


@pytest.fixture
def cluster() -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(
        make_node("gpu-a", instance_id=iid("gpu-a"), extra_conditions=[gpu_fault()]),
        make_node("gpu-b", instance_id=iid("gpu-b"), extra_conditions=[gpu_fault()]),
        make_node("gpu-c", instance_id=iid("gpu-c"), extra_conditions=[gpu_fault()]),
        make_node("gpu-d", instance_id=iid("gpu-d"), extra_conditions=[monitor_fault()]),
        make_node("gpu-e", instance_id=iid("gpu-e")),
        # Kubelet pressure is the scheduler's business: outside the rule's scope, never re-evaluated.
        make_node(
            "gpu-f",
            instance_id=iid("gpu-f"),
            extra_conditions=[{"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure"}],
        ),
    )
    with FakeKubeApiServer(store) as server:
        yield server


@pytest.fixture
def config(cluster: FakeKubeApiServer, tmp_path: Path) -> str:
    return str(kubeconfig(tmp_path / "kubeconfig", cluster.url))


@pytest.fixture
def storm(aws: Aws) -> None:
    """The breaker opened by a storm; gpu-c's remediation is still running and holds its lock."""
    t = now()
    state = aws.ledger.read_admission_state(CLUSTER)
    aws.ledger.write_admission_state(
        replace(
            state,
            breaker=BreakerState(
                open=True, opened_at=t, reason="3 nodes refused by the budget within 30 min"
            ),
            recent_refusals=tuple(NodeStamp(f"gpu-{x}", t) for x in "abd"),
            in_flight={iid("gpu-c"): InFlight("exec-c", "gpu", t, t + timedelta(hours=9))},
            recent_starts=(NodeStamp(iid("gpu-c"), t),),
        )
    )
    claim = LockClaim(node="gpu-c", condition_type="GPUProblem", action=Action.REPLACE, acts_at=t)
    assert aws.ledger.acquire_lock(CLUSTER, iid("gpu-c"), "exec-c", timedelta(hours=9), claim).acquired


def executions(sfn: Any) -> dict[str, dict[str, Any]]:
    listed = sfn.list_executions(stateMachineArn=STATE_MACHINE_ARN)["executions"]
    return {
        item["name"]: json.loads(sfn.describe_execution(executionArn=item["executionArn"])["input"])
        for item in listed
    }


def row(out: str, node: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"{node} "))


def test_reset_lists_the_nodes_still_bad_then_re_evaluates_them(
    cli: Cli, aws: Aws, workflow: Any, storm: None, cluster: FakeKubeApiServer, config: str
) -> None:
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", config, "--yes")
    assert result.code == 0, result.err
    out = result.out
    # The list comes first, with the deployed policy's decision and what happens to each node.
    assert out.index("nodes still bad in training-on-eks") < out.index("breaker closed")
    assert "breaker OPEN since" in out and "3 nodes refused by the budget" in out
    assert row(out, "gpu-a").split()[1:4] == ["GPUProblem=True", "GPUFellOffBus", "replace"]
    assert row(out, "gpu-a").endswith("re-evaluate")
    # One slot is free (maxInFlight 2, gpu-c holds the other): gpu-b waits for the next reset.
    assert "later: no budget room (maxInFlight 2, maxPerHour 6)" in row(out, "gpu-b")
    assert row(out, "gpu-c").endswith("left to exec-c, which holds the node")
    # An alert takes no slot, so the budget does not hold it back.
    assert row(out, "gpu-d").split()[1:4] == ["AcceleratedHardwareReady=False", "DCGMError", "alert"]
    assert row(out, "gpu-d").endswith("re-evaluate")
    assert "gpu-e " not in out and "gpu-f " not in out
    assert "not started: gpu-b (1 node(s))" in out
    assert f"run `nodeheal breaker reset --cluster {CLUSTER}` again" in out

    state = aws.ledger.read_admission_state(CLUSTER)
    assert not state.breaker.open and state.recent_refusals == ()
    started = executions(workflow)
    assert len(started) == 2
    by_node = {payload["event"]["node"]["name"]: (name, payload) for name, payload in started.items()}
    assert set(by_node) == {"gpu-a", "gpu-d"}
    for node, (name, payload) in by_node.items():
        event = NodeConditionEvent.from_detail(payload["event"])
        live = cluster.store.get("nodes", node)
        # What the exporter would send now, for the live object, under its base name plus -r<N>.
        assert event.node.uid == live["metadata"]["uid"]
        assert event.node.instance_id == iid(node)
        assert event.resync is True and event.is_bad
        assert name.startswith(execution_name(event) + "-r")
        assert f"  started {name}" in out
    assert sorted(name.rsplit("-r", 1)[1] for name in started) == ["1", "2"]


def test_reset_json_has_the_list_the_decisions_and_what_was_started(
    cli: Cli, aws: Aws, workflow: Any, storm: None, config: str
) -> None:
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", config, "--yes", "--json")
    assert result.code == 0, result.err
    document = result.json()  # one document, no table around it
    assert document["reevaluated"] is True
    (cluster,) = document["clusters"]
    assert (cluster["cluster"], cluster["closed"], cluster["paused"]) == (CLUSTER, True, False)
    assert cluster["breaker"]["open"] is True and "3 nodes refused" in cluster["breaker"]["reason"]
    nodes = {node["node"]: node for node in cluster["nodes"]}
    assert set(nodes) == {"gpu-a", "gpu-b", "gpu-c", "gpu-d"}
    assert nodes["gpu-a"]["condition"] == {"type": "GPUProblem", "status": "True", "reason": "GPUFellOffBus"}
    assert nodes["gpu-a"]["decision"]["action"] == "replace"
    assert nodes["gpu-d"]["decision"]["action"] == "alert"
    assert {name: node["plan"] for name, node in nodes.items()} == {
        "gpu-a": "re-evaluate",
        "gpu-b": "later",
        "gpu-c": "held",
        "gpu-d": "re-evaluate",
    }
    assert nodes["gpu-c"]["heldBy"] == "exec-c"
    started = executions(workflow)
    # The names the document gives are the executions Step Functions has, with their node's event.
    for name in ("gpu-a", "gpu-d"):
        assert nodes[name]["started"] is True
        assert started[nodes[name]["execution"]]["event"]["node"]["name"] == name
    assert len(started) == 2
    for name in ("gpu-b", "gpu-c"):
        assert (nodes[name]["execution"], nodes[name]["started"]) == (None, False)
    assert not aws.ledger.read_admission_state(CLUSTER).breaker.open


def test_reset_json_with_nothing_to_do_lists_what_it_found(
    cli: Cli, aws: Aws, workflow: Any, storm: None, config: str
) -> None:
    # Paused, breaker closed: nothing to close and nothing may start, so nothing is asked either.
    state = aws.ledger.read_admission_state(CLUSTER)
    aws.ledger.write_admission_state(
        replace(state, breaker=BreakerState(), paused=True, paused_reason="driver rollout")
    )
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", config, "--json")
    assert result.code == 0, result.err
    (cluster,) = result.json()["clusters"]
    assert (cluster["breaker"]["open"], cluster["closed"], cluster["paused"]) == (False, False, True)
    assert {node["node"]: node["plan"] for node in cluster["nodes"]} == {
        "gpu-a": "paused",
        "gpu-b": "paused",
        "gpu-d": "paused",
        "gpu-c": "held",
    }
    assert all(node["started"] is False for node in cluster["nodes"])
    assert executions(workflow) == {}


def test_the_next_reset_re_evaluates_again_with_new_numbers(
    cli: Cli, aws: Aws, workflow: Any, storm: None, config: str
) -> None:
    assert cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", config, "--yes").code == 0
    # The breaker is closed now; a reset still looks at what is bad, under names never used before.
    again = cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", config, "--yes")
    assert again.code == 0, again.err
    assert "breaker closed\n" in again.out and "breaker was already closed" in again.out
    numbers = sorted(int(name.rsplit("-r", 1)[1]) for name in executions(workflow))
    assert numbers == [1, 2, 3, 4]


def test_without_a_terminal_the_list_is_shown_and_nothing_changes(
    cli: Cli, aws: Aws, workflow: Any, storm: None, config: str
) -> None:
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", config)
    assert result.code == 2
    assert "pass --yes" in result.err
    assert "gpu-a" in result.out, "the person sees the list before being asked"
    assert aws.ledger.read_admission_state(CLUSTER).breaker.open
    assert executions(workflow) == {}


def test_answered_no_nothing_changes(
    cli: Cli, aws: Aws, workflow: Any, storm: None, config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", config)
    assert result.code == 1
    assert "Close the circuit breaker of training-on-eks and start the 2 re-evaluation(s)" in result.err
    assert aws.ledger.read_admission_state(CLUSTER).breaker.open
    assert executions(workflow) == {}


def test_a_paused_cluster_starts_nothing(cli: Cli, aws: Aws, workflow: Any, storm: None, config: str) -> None:
    state = aws.ledger.read_admission_state(CLUSTER)
    aws.ledger.write_admission_state(replace(state, paused=True, paused_reason="driver rollout"))
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", config, "--yes")
    assert result.code == 0, result.err
    assert "later: NodeHeal is paused here" in row(result.out, "gpu-a")
    assert f"nothing starts until `nodeheal resume --cluster {CLUSTER}`" in result.out
    assert executions(workflow) == {}
    assert not aws.ledger.read_admission_state(CLUSTER).breaker.open


def test_an_unreachable_cluster_changes_nothing_and_names_the_way_out(
    cli: Cli, aws: Aws, workflow: Any, storm: None, tmp_path: Path
) -> None:
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--kubeconfig", str(tmp_path / "absent"), "--yes")
    assert result.code == 2
    assert f"cannot list the nodes of {CLUSTER}" in result.err
    assert "--no-reevaluate to only close the breaker" in result.err
    assert aws.ledger.read_admission_state(CLUSTER).breaker.open


def test_no_reevaluate_only_closes_the_breaker(cli: Cli, aws: Aws, workflow: Any, storm: None) -> None:
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--no-reevaluate", "--yes")
    assert result.code == 0, result.err
    assert "breaker closed" in result.out
    assert not aws.ledger.read_admission_state(CLUSTER).breaker.open
    assert executions(workflow) == {}


def test_a_state_machine_without_settings_is_refused(cli: Cli, aws: Aws, storm: None, config: str) -> None:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    other = sfn.create_state_machine(
        name="someone-else",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/other",
    )["stateMachineArn"]
    result = cli("breaker", "reset", "--cluster", CLUSTER, "--state-machine", other, "--kubeconfig", config)
    assert result.code == 2
    assert "has no 'Load settings' state with settings" in result.err
    assert aws.ledger.read_admission_state(CLUSTER).breaker.open


def test_the_ledger_counter_never_gives_a_number_twice(aws: Aws) -> None:
    numbers = [aws.ledger.next_reevaluation(CLUSTER) for _ in range(3)]
    assert numbers == [1, 2, 3]
    assert aws.ledger.next_reevaluation("inference") == 1


def test_re_evaluation_names_keep_the_transition_and_fit_step_functions() -> None:
    def event(cluster: str) -> NodeConditionEvent:
        return NodeConditionEvent.from_detail(
            {
                "schemaVersion": "1.1",
                "cluster": cluster,
                "node": {"name": "ip-10-0-158-235.us-west-2.compute.internal", "uid": "u-1"},
                "condition": {**gpu_fault(), "lastTransitionTime": "2026-11-21T10:00:00Z"},
                "observedAt": "2026-11-21T10:00:01Z",
            }
        )

    base = execution_name(event(CLUSTER))
    assert reevaluation_name(event(CLUSTER), 7) == f"{base}-r7"
    longest = event("c" * 100)
    name = reevaluation_name(longest, 12345)
    assert len(name) <= MAX_EXECUTION_NAME
    assert name.endswith(execution_name(longest)[-12:] + "-r12345")
    assert name.startswith("c" * 47 + "-ip-10-0")
    with pytest.raises(ValueError, match="start at 1"):
        reevaluation_name(event(CLUSTER), 0)
