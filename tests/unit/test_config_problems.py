"""A configuration's problems come all at once, each naming its key, in one ConfigurationError.

A file with a typo, ``budgets.maxInFlight: -1`` and ``lockTtlSeconds: 100`` once reported the first
only; fixing it revealed the next on the following ``cdk synth``. Every entry point that reads a
configuration (``cdk synth`` through app.py, the construct, ``explain``, ``test-pattern``, ``demo``)
goes through the same parser, so each lists them all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeheal import worst_case
from nodeheal.cli import main
from nodeheal.config import ConditionRule, RemediationSettings
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
#: A typo, a value out of range, and a lock TTL shorter than the worst case it must cover.
THREE_PROBLEMS: dict[str, Any] = {
    "clusters": ["training-on-eks"],
    "drian": {"timeoutSeconds": 600},
    "budgets": {"maxInFlight": -1},
    "lockTtlSeconds": 100,
}


def problems(message: str) -> list[str]:
    """The listed problems of a ConfigurationError's message."""
    return [line.removeprefix("  - ") for line in message.splitlines() if line.startswith("  - ")]


def assert_three(message: str, prefix: str) -> None:
    listed = problems(message)
    assert len(listed) == 3, message
    assert message.startswith("3 problems"), message
    assert f"{prefix}.budgets.maxInFlight must be >= 1, got -1" in listed
    assert f"unknown setting(s): {prefix}.drian (did you mean 'drain'?)" in listed
    # The timing check runs after the per-key checks, on what they let through, and comes last.
    assert listed[-1].startswith(f"{prefix}.lockTtlSeconds (100) must be at least "), listed


def cdk_json(directory: Path, nodeheal: dict[str, Any]) -> Path:
    path = directory / "cdk.json"
    path.write_text(json.dumps({"app": "python3 app.py", "context": {"nodeheal": nodeheal}}))
    return path


def test_three_problems_are_reported_together_each_with_its_path() -> None:
    with pytest.raises(ConfigurationError) as caught:
        NodeHealConfig.from_cdk_context(THREE_PROBLEMS)
    assert type(caught.value) is ConfigurationError
    assert_three(str(caught.value), "nodeheal")


def test_one_problem_is_the_message_itself() -> None:
    with pytest.raises(ConfigurationError) as caught:
        NodeHealConfig.from_cdk_context({"clusters": ["c"], "budgets": {"maxInFlight": -1}})
    assert str(caught.value) == "nodeheal.budgets.maxInFlight must be >= 1, got -1"


def test_a_refused_value_takes_its_default_for_the_checks_after_it() -> None:
    # 90000 is refused (more than a day) and counts as 900: the lock TTL covers that, so the timing
    # check finds nothing to add; the e-mail after the refused key is still read and checked.
    with pytest.raises(ConfigurationError) as caught:
        NodeHealConfig.from_cdk_context(
            {
                "clusters": ["c"],
                "drain": {"timeoutSeconds": 90_000},
                "notifications": {"emails": ["not-an-address"]},
            }
        )
    assert problems(str(caught.value)) == [
        "nodeheal.drain.timeoutSeconds must be <= 86400, got 90000",
        "nodeheal.notifications.emails has an invalid address 'not-an-address'",
    ]


@pytest.mark.parametrize(
    ("nodeheal", "expected"),
    [
        ({"eventBus": "nodeheal"}, ["nodeheal.eventBus must be an object, got str"]),
        (
            {"policy": {"conditionRules": {"KernelDeadlock": {}}}},
            ["nodeheal.policy.conditionRules.KernelDeadlock.action is required"],
        ),
        (
            {"policy": {"conditionRules": {"KernelDeadlock": "explode"}}},
            ["nodeheal.policy.conditionRules.KernelDeadlock must be one of"],
        ),
        (
            {"notifications": {"slack": {"workspaceId": "T1"}}},
            ["nodeheal.notifications.slack.channelId is required"],
        ),
        (
            {"lambdaNetwork": {"vpcId": "vpc-1"}},
            [
                "nodeheal.lambdaNetwork.availabilityZones is required",
                "nodeheal.lambdaNetwork.subnetIds is required",
                "nodeheal.lambdaNetwork.securityGroupIds is required",
            ],
        ),
        ({"kubernetesGroup": "nodeheal-remediator"}, ["nodeheal.kubernetesGroup was replaced by"]),
        ({"security": {"kmsKeyArn": "alias/nodeheal"}}, ["nodeheal.security.kmsKeyArn names an alias"]),
    ],
    ids=["not-an-object", "required-key", "bad-action", "slack-half", "network-half", "old-key", "kms-alias"],
)
def test_a_problem_does_not_bring_others_that_follow_from_it(
    nodeheal: dict[str, Any], expected: list[str]
) -> None:
    """A value that failed stands in with one that no later check refuses again: the list holds
    what the person has to fix, not echoes of it."""
    with pytest.raises(ConfigurationError) as caught:
        NodeHealConfig.from_cdk_context({"clusters": ["c"], **nodeheal})
    message = str(caught.value)
    listed = problems(message) or [message]
    assert len(listed) == len(expected), message
    for line, start in zip(listed, expected, strict=True):
        assert line.startswith(start), message


def test_execution_settings_report_every_problem_too() -> None:
    with pytest.raises(ConfigurationError) as caught:
        worst_case.checked_settings(
            {
                **RemediationSettings().to_json(),
                "budgets": {"maxInFlight": 0},
                "lockTtlSeconds": 100,
                "mdoe": 1,
            }
        )
    listed = problems(str(caught.value))
    assert [line.split(" ")[0] for line in listed] == [
        "settings.budgets.maxInFlight",
        "unknown",
        "settings.lockTtlSeconds",
    ], listed


def test_a_parser_used_on_its_own_still_raises_at_the_first_problem() -> None:
    with pytest.raises(ConfigurationError, match=r"^rule\.action must be one of .*; got 'x'$"):
        ConditionRule.parse({"action": "x", "confirmSeconds": -1}, "rule")


def test_explain_config_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--config", str(cdk_json(tmp_path, THREE_PROBLEMS))]) == 2
    error = capsys.readouterr().err
    assert_three(error[error.index("3 problems") :], "context.nodeheal")


def test_test_pattern_config_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"schemaVersion": "1", "cluster": "training-on-eks"}))
    assert main(["test-pattern", "--config", str(cdk_json(tmp_path, THREE_PROBLEMS)), str(event)]) == 2
    error = capsys.readouterr().err
    assert_three(error[error.index("3 problems") :], "context.nodeheal")


def test_demo_config_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("moto")
    assert main(["demo", "--config", str(cdk_json(tmp_path, THREE_PROBLEMS))]) == 2
    error = capsys.readouterr().err
    assert_three(error[error.index("3 problems") :], "context.nodeheal")


@pytest.mark.slow  # a real synth of the stack: `make test` runs it, `make check` does not
def test_cdk_synth_lists_every_problem() -> None:
    """app.py, as ``cdk synth`` runs it: the CDK CLI hands it cdk.json's context in CDK_CONTEXT_JSON."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py")],
        cwd=ROOT,
        env={**os.environ, "CDK_CONTEXT_JSON": json.dumps({"nodeheal": THREE_PROBLEMS})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("NodeHeal configuration error: 3 problems"), result.stderr
    assert_three(result.stderr[result.stderr.index("3 problems") :], "nodeheal")
    assert "Traceback" not in result.stderr
