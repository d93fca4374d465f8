"""``nodeheal explain``: events, envelopes, Node objects, configuration, and clear errors."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from nodeheal.cli import main

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID_13 = "NVRM: Xid (PCI:0000:cb:00): 13, pid=4411, name=python, Graphics SM Warp Exception"


def detail(message: str = XID_79, **condition: Any) -> dict[str, Any]:
    return {
        "schemaVersion": "1",
        "cluster": "training-on-eks",
        "node": {
            "name": "ip-10-0-158-235.us-west-2.compute.internal",
            "uid": "6f0a3b0e-1f7b-4c1e-9d55-2f3c1d7e8a90",
            "providerID": "aws:///us-west-2b/i-0abc1234567890def",
            "instanceType": "p5.48xlarge",
            "zone": "us-west-2b",
            "nodePool": "gpu",
            "capacityType": "on-demand",
            "labels": {"karpenter.sh/nodepool": "gpu"},
        },
        "condition": {
            "type": "GPUProblem",
            "status": "True",
            "reason": "GPUFellOffBus",
            "message": message,
            "lastTransitionTime": "2026-11-21T10:00:00Z",
            **condition,
        },
        "previous": {"status": "False", "reason": "GPUHealthy"},
        "observedAt": "2026-11-21T10:00:01.234Z",
        "resync": False,
    }


def envelope(body: dict[str, Any], detail_type: str = "Node Condition Changed") -> dict[str, Any]:
    return {
        "version": "0",
        "id": "0d2b5f1c-6c57-4c5f-9a0e-8f7f0e3f1a11",
        "detail-type": detail_type,
        "source": "nodeheal.exporter",
        "account": "123456789012",
        "time": "2026-11-21T10:00:01Z",
        "region": "us-west-2",
        "resources": [],
        "detail": body,
    }


def node_object(labels: dict[str, str] | None = None) -> dict[str, Any]:
    """``kubectl get node X -o json``, trimmed to what matters plus realistic surroundings."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "ip-10-0-158-235.us-west-2.compute.internal",
            "uid": "6f0a3b0e-1f7b-4c1e-9d55-2f3c1d7e8a90",
            "resourceVersion": "912834",
            "labels": labels if labels is not None else {"karpenter.sh/nodepool": "gpu"},
            "annotations": {"karpenter.sh/nodepool-hash": "1234"},
        },
        "spec": {
            "providerID": "aws:///us-west-2b/i-0abc1234567890def",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "192"},
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                    "message": "kubelet has sufficient memory available",
                    "lastHeartbeatTime": "2026-11-21T10:00:00Z",
                    "lastTransitionTime": "2026-11-20T08:00:00Z",
                },
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "False",
                    "reason": "NvidiaXID48Error",
                    "message": "NVRM: Xid (PCI:0000:c9:00): 48, pid=18812, "
                    "name=train.py, An uncorrectable DBE",
                    "lastHeartbeatTime": "2026-11-21T10:00:00Z",
                    "lastTransitionTime": "2026-11-21T09:58:00Z",
                },
                {
                    "type": "GPUProblem",
                    "status": "True",
                    "reason": "GPUFellOffBus",
                    "message": XID_79,
                    "lastTransitionTime": "2026-11-21T09:59:00Z",
                },
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastTransitionTime": "2026-11-20T08:00:00Z",
                },
            ],
            "nodeInfo": {"bootID": "0b6d1f7e-7c1a-4b8e-9a0f-1d2e3f4a5b6c"},
        },
    }


@pytest.fixture(autouse=True)
def outside_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty working directory: without --config, explain uses the built-in defaults (mode
    dry-run), not whatever cdk.json the suite happens to run next to."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)


def settings_line(err: str) -> str:
    """stderr without the line that names the settings explain read (one, always first)."""
    first, _, rest = err.partition("\n")
    assert first.startswith("settings: "), err
    return rest


def write(tmp_path: Path, payload: Any, name: str = "event.json") -> str:
    path = tmp_path / name
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return str(path)


def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """The JSON document (``--json``)."""
    assert main(["explain", *argv, "--json"]) == 0
    captured = capsys.readouterr()
    assert settings_line(captured.err) == ""
    return json.loads(captured.out)


def summary(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The default view, for a person."""
    assert main(["explain", *argv]) == 0
    captured = capsys.readouterr()
    assert settings_line(captured.err) == ""
    return captured.out


def field(text: str, label: str) -> str:
    """One ``label: value`` field of the summary, its wrapped lines joined back into one."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"{label}:"))
    value = [lines[start].split(":", 1)[1].strip()]
    indent = len(lines[start]) - len(lines[start].lstrip())
    for line in lines[start + 1 :]:
        # Continuation lines are indented past the labels; the next field starts at the label column.
        if not line.strip() or len(line) - len(line.lstrip()) <= indent:
            break
        value.append(line.strip())
    return " ".join(value)


def fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["explain", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    error = captured.err if captured.err.startswith("nodeheal explain: ") else settings_line(captured.err)
    lines = error.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_event_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = explain(capsys, write(tmp_path, detail()), "--mode", "full")
    assert out["action"] == out["plannedAction"] == "replace"
    assert (out["xid"], out["signal"], out["confirmSeconds"], out["escalated"]) == (79, "xid:79", 0, False)
    assert "fallen off the bus" in out["reason"]
    assert out["node"] == "ip-10-0-158-235.us-west-2.compute.internal"
    assert out["condition"] == {"type": "GPUProblem", "status": "True"}
    assert out["mode"] == "full"


def test_event_from_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(detail(XID_13))))
    out = explain(capsys, "-")
    assert (out["action"], out["xid"]) == ("none", 13)


def test_eventbridge_envelope(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = explain(capsys, write(tmp_path, envelope(detail())), "--mode", "full")
    assert (out["action"], out["xid"]) == ("replace", 79)


def test_condition_without_xid_reports_null_xid_and_confirmation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = detail("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    out = explain(capsys, write(tmp_path, body), "--mode", "full")
    assert out["xid"] is None
    assert (out["action"], out["signal"], out["confirmSeconds"]) == ("replace", "condition:GPUProblem", 120)


def test_node_object_explains_every_condition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = explain(capsys, write(tmp_path, node_object(), "node.json"), "--mode", "full")
    assert isinstance(out, list)
    by_type = {item["condition"]["type"]: item for item in out}
    assert set(by_type) == {"MemoryPressure", "AcceleratedHardwareReady", "GPUProblem", "Ready"}
    assert (by_type["AcceleratedHardwareReady"]["action"], by_type["AcceleratedHardwareReady"]["xid"]) == (
        "reboot",
        48,
    )
    assert (by_type["GPUProblem"]["action"], by_type["GPUProblem"]["xid"]) == ("replace", 79)
    for healthy in ("MemoryPressure", "Ready"):
        assert by_type[healthy]["action"] == "none"
        assert by_type[healthy]["xid"] is None
        assert "condition is healthy" in by_type[healthy]["reason"]
    for item in out:
        assert {"action", "plannedAction", "reason", "xid", "signal", "confirmSeconds"} <= set(item)


def test_node_object_honours_opt_out_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = node_object({"nodeheal.io/disabled": "true"})
    out = explain(capsys, write(tmp_path, node, "node.json"), "--mode", "full")
    gpu = next(item for item in out if item["condition"]["type"] == "GPUProblem")
    assert (gpu["action"], gpu["plannedAction"]) == ("alert", "replace")


ROOT = Path(__file__).resolve().parents[2]
SHIPPED = str(ROOT / "cdk.json")


def cdk_json(tmp_path: Path, nodeheal: dict[str, Any]) -> str:
    document = {
        "app": "python3 app.py",
        "context": {
            "@aws-cdk/core:newStyleStackSynthesis": True,
            "nodeheal": {
                # Deployment keys: explain validates them as cdk synth does, and applies none.
                "stackName": "NodeHeal",
                "clusters": ["training-on-eks"],
                "eventBus": {"name": "nodeheal", "source": "nodeheal.exporter"},
                "rule": {"conditions": [{"type": "GPUProblem", "statuses": ["True"]}], "nodeLabels": {}},
                "ingest": {"staleEventSeconds": 600},
                "notifications": {"emails": ["oncall@example.com"]},
                "lambdaNetwork": {},
                "workflow": {"timeoutMinutes": 1320},
                "kubernetesGroupPrefix": "nodeheal",
                "exporter": {"namespace": "gpu-health", "serviceAccount": "exporter"},
                "logRetentionDays": 30,
                # The tests below read decisions: chosen here, not inherited from a default.
                "mode": "full",
                **nodeheal,
            },
        },
    }
    return write(tmp_path, document, "cdk.json")


def test_explain_an_event_against_the_shipped_cdk_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every key the shipped cdk.json spells out is accepted: the documented tuning loop works on
    an unmodified checkout."""
    shipped_mode = json.loads(Path(SHIPPED).read_text())["context"]["nodeheal"]["mode"]
    out = explain(capsys, write(tmp_path, detail()), "--config", SHIPPED)
    assert out["plannedAction"] == "replace"
    assert out["mode"] == shipped_mode
    node = explain(capsys, write(tmp_path, node_object(), "node.json"), "--config", SHIPPED)
    assert {item["condition"]["type"] for item in node} >= {"GPUProblem", "Ready"}


@pytest.mark.parametrize(
    ("nodeheal", "message"),
    [
        ({"exporter": {"namespce": "x"}}, "context.nodeheal.exporter.namespce (did you mean 'namespace'?)"),
        ({"eventBus": "nodeheal"}, "context.nodeheal.eventBus must be an object"),
        ({"clusters": []}, "context.nodeheal.clusters must list at least one value"),
        (
            {"workflow": {"timeoutMinutes": 180}},
            "context.nodeheal.workflow.timeoutMinutes (180) must be at least",
        ),
    ],
    ids=["typo-in-exporter", "bus-not-object", "no-cluster", "short-workflow-timeout"],
)
def test_deployment_keys_are_validated_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nodeheal: dict[str, Any], message: str
) -> None:
    error = fails(capsys, write(tmp_path, detail()), "--config", cdk_json(tmp_path, nodeheal))
    assert message in error


def test_config_policy_and_mode_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = cdk_json(
        tmp_path,
        {"mode": "cordon-only", "policy": {"nodePools": {"gpu": {"xidActions": {"13": "reboot"}}}}},
    )
    out = explain(capsys, write(tmp_path, detail(XID_13)), "--config", config)
    assert (out["action"], out["plannedAction"], out["mode"]) == ("cordon", "reboot", "cordon-only")
    assert "node pool 'gpu' overrides applied" in out["reason"]


def test_mode_flag_overrides_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = cdk_json(tmp_path, {"mode": "full"})
    out = explain(capsys, write(tmp_path, detail()), "--config", config, "--mode", "dry-run")
    assert (out["action"], out["plannedAction"], out["mode"]) == ("none", "replace", "dry-run")
    assert "would have done replace" in out["reason"]


def test_pool_from_node_pool_field_when_label_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = detail(XID_13)
    body["node"]["labels"] = {}
    config = cdk_json(tmp_path, {"policy": {"nodePools": {"gpu": {"xidActions": {"13": "alert"}}}}})
    assert explain(capsys, write(tmp_path, body), "--config", config)["action"] == "alert"


@pytest.mark.parametrize(
    ("nodeheal", "message"),
    [
        ({"policy": {"xidActon": {}}}, "context.nodeheal.policy.xidActon"),
        ({"plicy": {}}, "did you mean 'policy'"),
        ({"mode": "yolo"}, "context.nodeheal.mode must be one of"),
        ({"policy": {"xidActions": {"79": "explode"}}}, "xidActions.79 must be one of"),
    ],
)
def test_invalid_config_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nodeheal: dict[str, Any], message: str
) -> None:
    error = fails(capsys, write(tmp_path, detail()), "--config", cdk_json(tmp_path, nodeheal))
    assert message in error


def test_config_without_nodeheal_context(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, {"app": "python3 app.py", "context": {}}, "cdk.json")
    assert "has no context.nodeheal object" in fails(capsys, write(tmp_path, detail()), "--config", config)


def test_config_missing_or_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = write(tmp_path, detail())
    assert "cannot read" in fails(capsys, event, "--config", str(tmp_path / "nope.json"))
    broken = write(tmp_path, "{not json", "cdk.json")
    assert "is not valid JSON" in fails(capsys, event, "--config", broken)


def test_missing_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = fails(capsys, str(tmp_path / "missing.json"))
    assert error.startswith("nodeheal explain: cannot read")
    assert "No such file or directory" in error


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("{ broken", "is not valid JSON"),
        ("", "is empty"),
        ("[1, 2]", "event detail must be a JSON object"),
        (json.dumps({**detail(), "schemaVersion": "2"}), "unsupported schemaVersion '2'"),
        (json.dumps({k: v for k, v in detail().items() if k != "condition"}), "condition is required"),
        (json.dumps(detail(status="Maybe")), "condition.status must be one of"),
        (json.dumps({**detail(), "observedAt": "yesterday"}), "observedAt"),
        (json.dumps(envelope(detail(), "Node Event Observed")), "got detail-type 'Node Event Observed'"),
        (json.dumps({"kind": "NodeList", "items": []}), "got a Kubernetes NodeList"),
    ],
    ids=[
        "bad-json",
        "empty",
        "array",
        "version",
        "no-condition",
        "bad-status",
        "bad-time",
        "detail-type",
        "list",
    ],
)
def test_malformed_event_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: str, message: str
) -> None:
    assert message in fails(capsys, write(tmp_path, payload))


def test_malformed_node_condition_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = node_object()
    node["status"]["conditions"].append({"type": "GPUProblem"})
    error = fails(capsys, write(tmp_path, node, "node.json"))
    assert "Node status.conditions" in error and "condition.status" in error


def test_malformed_stdin_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("not json"))
    assert "stdin is not valid JSON" in fails(capsys, "-")


def test_help_lists_explain(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "--help"])
    assert exit_info.value.code == 0
    assert "--config" in capsys.readouterr().out


def test_defect_6_explain_config_prints_the_worst_case_and_the_i2_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = explain(capsys, "--config", SHIPPED)
    holding = out["holding"]
    assert (holding["totalSeconds"], holding["total"]) == (30_425, "8 h 27 min 5 s")
    assert sum(term["seconds"] for term in holding["terms"]) == holding["totalSeconds"]
    assert (holding["lockTtlSeconds"], holding["lockTtlMinimumSeconds"]) == (34_200, 33_468)
    drain = next(term for term in holding["terms"] if term["name"] == "drain")
    assert drain["detail"].startswith("drain.timeoutSeconds 900 + drain.pollSeconds 10 + 2 eviction rounds")
    assert out["execution"]["totalSeconds"] == 67_733
    assert out["execution"]["workflowTimeoutMinimumMinutes"] == 1242
    bound = out["i2Bound"]
    assert [(term["name"], term["seconds"]) for term in bound["terms"]] == [
        ("confirmation", 600),
        ("holder's worst case", 30_425),
        ("finalizer latency", 360),
    ]
    assert bound["totalSeconds"] == 31_385


def test_defect_6_explain_config_follows_the_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rule = {"GPUProblem": {"action": "replace", "confirmSeconds": 3600}}
    # A longer lock TTL lengthens the wait behind a holder: the workflow timeout must cover it too.
    config = cdk_json(
        tmp_path,
        {"policy": {"conditionRules": rule}, "lockTtlSeconds": 40_000, "workflow": {"timeoutMinutes": 1410}},
    )
    out = explain(capsys, "--config", config)
    # The hour-long confirmation replaces the built-in 10 minutes: 3000 s more to hold and to wait.
    assert out["holding"]["totalSeconds"] == 30_425 + 3000
    assert out["i2Bound"]["totalSeconds"] == 3600 + 33_425 + 360


def test_defect_6_explain_refuses_a_short_lock_ttl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = fails(capsys, "--config", cdk_json(tmp_path, {"lockTtlSeconds": 7200}))
    assert "context.nodeheal.lockTtlSeconds (7200) must be at least 33468" in error


def test_every_contract_problem_is_named_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The parser stops at the first problem; the contract schema names them all."""
    broken = detail(status="Maybe")
    broken["observedAt"] = "yesterday"
    broken["cluster"] = ""
    message = fails(capsys, write(tmp_path, broken))
    assert message.startswith("nodeheal explain: cluster is required")
    assert (
        f"every problem against nodeheal/contracts/node-condition-changed-{broken['schemaVersion']}.json"
        in message
    )
    for field in ("detail.cluster", "detail.condition.status", "detail.observedAt"):
        assert field in message


def test_an_event_ingest_accepts_but_the_contract_refuses_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A producer should meet the contract, not the parser's leniency (a blank condition type)."""
    message = fails(
        capsys,
        write(tmp_path, {**detail(), "resync": False, "condition": {**detail()["condition"], "type": " "}}),
    )
    assert "though ingest would accept it: detail.condition.type: ' ' must not be empty" in message


# -- the default view: a summary for a person, rendered from the same document as --json ----------


def test_the_summary_of_an_event_says_decision_reason_timing_and_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = write(tmp_path, detail())
    document = explain(capsys, event, "--mode", "full")
    text = summary(capsys, event, "--mode", "full")
    assert text.splitlines()[0] == (
        "GPUProblem=True on ip-10-0-158-235.us-west-2.compute.internal (cluster training-on-eks)"
    )
    assert field(text, "decision") == "replace, mode full"
    # Wrapped for the terminal, but every word of the policy's reason is there.
    assert field(text, "reason") == document["reason"]
    assert field(text, "signal") == "xid:79 (Xid 79)"
    assert field(text, "timing").startswith("acts at once (this signal has no confirmation time)")
    assert "8 h 27 min 5 s in the worst case" in field(text, "timing")
    steps = field(text, "next")
    assert steps.startswith("once Admit has re-read the live node")
    assert "up to 15 min (drain.timeoutSeconds), then force-delete what is left (30 s grace)" in steps
    assert steps.endswith(
        "terminate the EC2 instance, and Karpenter (or the node group) provisions a new node"
    )
    assert "`nodeheal history --node ip-10-0-158-235.us-west-2.compute.internal`" in field(text, "history")
    assert not text.lstrip().startswith("{")


def test_the_summary_of_a_confirmed_condition_says_how_long_it_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = detail("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    text = summary(capsys, write(tmp_path, body), "--mode", "full")
    assert field(text, "timing").startswith(
        "waits until the condition has been bad for 2 min (confirmSeconds 120, from its "
        "lastTransitionTime), then acts only if it still is"
    )
    assert field(text, "signal") == "condition:GPUProblem"


def test_the_summary_in_dry_run_says_nothing_changes_and_what_full_would_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = summary(capsys, write(tmp_path, detail()), "--mode", "dry-run")
    assert field(text, "decision") == "none (planned: replace), mode dry-run"
    assert field(text, "timing") == "nothing to wait for"
    steps = field(text, "next")
    assert steps.startswith("touch nothing: the decision is recorded as dry-run and notified (info); ")
    assert "in full mode it would cordon the node, evict its pods" in steps


def test_the_summary_in_cordon_only_names_what_full_would_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = summary(capsys, write(tmp_path, detail()), "--mode", "cordon-only")
    assert field(text, "decision") == "cordon (planned: replace), mode cordon-only"
    steps = field(text, "next")
    assert "cordon the node (no new pods land on it; running ones stay)" in steps
    assert steps.endswith("(cordon-only; full mode would replace)")
    assert "evict" not in steps


def test_the_summary_follows_the_configured_drain_and_reboot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = cdk_json(
        tmp_path,
        {
            "drain": {"timeoutSeconds": 1800, "onTimeout": "abort"},
            "reboot": {"recoveryTimeoutSeconds": 1200},
            "policy": {"xidActions": {"79": "reboot"}},
        },
    )
    text = summary(capsys, write(tmp_path, detail()), "--config", config)
    steps = field(text, "next")
    assert (
        "for up to 30 min (drain.timeoutSeconds), then stop there, cordoned and tainted, and alert" in steps
    )
    assert "reboot the EC2 instance and wait up to 20 min (reboot.recoveryTimeoutSeconds)" in steps


def test_the_summary_of_an_opted_out_node_says_why_the_plan_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = summary(
        capsys, write(tmp_path, node_object({"nodeheal.io/disabled": "true"}), "node.json"), "--mode", "full"
    )
    words = " ".join(text.split())
    for planned in ("reboot", "replace"):  # the Xid 48 and the Xid 79 conditions
        assert f"decision: alert (planned: {planned}), mode full" in words
        assert (
            "next: once Admit has re-read the live node (still bad): touch nothing: notify the SNS topic "
            f"(severity action-required) for a person to look ({planned} was planned; the reason says why not)"
        ) in words


def test_the_summary_of_a_node_lists_every_condition_and_details_the_bad_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = write(tmp_path, node_object(), "node.json")
    document = explain(capsys, node, "--mode", "full")
    text = summary(capsys, node, "--mode", "full")
    lines = text.splitlines()
    assert (
        lines[0]
        == "ip-10-0-158-235.us-west-2.compute.internal: 4 condition(s), mode full, history assumed empty"
    )
    assert lines[1].split() == ["CONDITION", "DECISION", "PLANNED", "CONFIRM", "SIGNAL"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:6]}
    for item in document:
        key = f"{item['condition']['type']}={item['condition']['status']}"
        assert rows[key] == [item["action"], item["plannedAction"], "-", item["signal"]]
    # A block for each condition that calls for something, none for the healthy ones.
    blocks = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert blocks == ["AcceleratedHardwareReady=False:", "GPUProblem=True:"]
    assert text.count("decision: ") == 2
    words = " ".join(text.split())
    assert "reboot the EC2 instance" in words and "terminate the EC2 instance" in words
    assert field(text, "together").startswith("each bad condition is its own execution")
    assert text.count("history:") == 1


def test_the_summary_of_a_healthy_node_says_it_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = node_object()
    node["status"]["conditions"] = [c for c in node["status"]["conditions"] if c["type"] in ("Ready",)]
    text = summary(capsys, write(tmp_path, node, "node.json"))
    assert "no condition calls for anything: NodeHeal leaves this node alone" in text
    assert "decision:" not in text


def test_the_timing_summary_shows_each_breakdown_and_what_it_requires(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = explain(capsys, "--config", SHIPPED)
    text = summary(capsys, "--config", SHIPPED)
    assert "Holding a node's lock: 8 h 27 min 5 s (30425 s)" in text
    assert "lockTtlSeconds 34200 (at least 33468: the worst case + a margin of 3043 s)" in text
    assert "workflow.timeoutMinutes must be at least 1242 (the worst case + a margin of 6774 s)" in text
    assert "Invariant I2: 8 h 43 min 5 s (31385 s)" in text
    rows = text.splitlines()
    for section in ("holding", "execution", "i2Bound"):
        for term in document[section]["terms"]:
            assert any(
                line.startswith(term["name"] + " ")
                and f" {term['seconds']} " in line
                and line.endswith(term["detail"])
                for line in rows
            ), term


def test_the_operations_guide_shows_the_summary_explain_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guide = (ROOT / "docs" / "operations.md").read_text()
    start = guide.index("$ nodeheal explain examples/events/xid79-fallen-off-the-bus.json --mode full\n")
    shown = guide[start : guide.index("```", start)].splitlines()[1:]
    example = str(ROOT / "examples" / "events" / "xid79-fallen-off-the-bus.json")
    printed = summary(capsys, example, "--mode", "full").splitlines()
    # The guide shortens the reason; every other line is printed as shown.
    reason = shown.index(next(line for line in shown if line.startswith("reason:")))
    after = shown.index(next(line for line in shown if line.startswith("signal:")))
    assert printed[:reason] == shown[:reason]
    assert printed[printed.index(shown[after]) :] == shown[after:]
