"""Every AWS command resolves its region the same way: --region, then ``AWS_REGION``, then
``AWS_DEFAULT_REGION``, then the profile's region in the AWS config file.

boto3 alone reads ``AWS_DEFAULT_REGION`` and the profile but not ``AWS_REGION``, which is what
CloudShell, Lambda and the other SDKs set. Each test runs with no AWS config of the machine: the
config and credentials files are empty temporary files and only the variables a test sets are set.
The stack lives in moto's us-west-2, so a command run in another region names that region in its
"stack ... does not exist in REGION" answer, which shows which region it resolved.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from nodeheal.cli import build_parser
from tests.unit.cli.conftest import Result

Cli = Callable[..., Result]

#: The operator commands that reach AWS, each with the arguments that take it to its first call.
COMMANDS: dict[str, tuple[str, ...]] = {
    "doctor": ("doctor", "--cluster", "training-on-eks"),
    "history": ("history",),
    "breaker": ("breaker", "status"),
    "pause": ("pause", "--cluster", "training-on-eks", "--reason", "maintenance", "--yes"),
    "resume": ("resume", "--cluster", "training-on-eks", "--yes"),
    "retry": ("retry", "training-on-eks-ip-10-0-1-15-GPUProblem-20261123T080500Z", "--yes"),
}


@pytest.fixture
def no_aws_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No region anywhere, and empty AWS config and credentials files (the keys stay in the
    environment, so credentials resolve). Returns the config file, for a test to fill."""
    config = tmp_path / "config"
    credentials = tmp_path / "credentials"
    config.write_text("")
    credentials.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return config


@pytest.fixture
def moto() -> Iterator[None]:
    with mock_aws():
        yield


def resolved_region(result: Result) -> str:
    """The region a command's answer names (doctor's header, or the missing stack's region)."""
    text = result.out + result.err
    assert "no AWS region" not in text, text
    for marker in (", region ", "does not exist in "):
        if marker in text:
            return text.split(marker, 1)[1].split()[0].rstrip(":;,")
    raise AssertionError(f"no region named in:\n{text}")


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.usefixtures("moto")
def test_aws_region_alone_is_used(
    cli: Cli, command: str, no_aws_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert resolved_region(cli(*COMMANDS[command])) == "eu-central-1"


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.usefixtures("moto")
def test_the_profiles_region_is_used_when_no_variable_says(
    cli: Cli, command: str, no_aws_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_aws_config.write_text(
        "[default]\nregion = ap-southeast-2\n\n"
        # A named profile brings its own keys: botocore skips the environment's for it.
        "[profile ops]\nregion = sa-east-1\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    assert resolved_region(cli(*COMMANDS[command])) == "ap-southeast-2"
    assert resolved_region(cli(*COMMANDS[command], "--profile", "ops")) == "sa-east-1"
    monkeypatch.setenv("AWS_PROFILE", "ops")
    assert resolved_region(cli(*COMMANDS[command])) == "sa-east-1"


@pytest.mark.usefixtures("moto")
def test_the_order_is_flag_aws_region_aws_default_region_profile(
    cli: Cli, no_aws_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_aws_config.write_text("[default]\nregion = ap-southeast-2\n")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert resolved_region(cli("history")) == "eu-west-1"
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert resolved_region(cli("history")) == "eu-central-1"
    assert resolved_region(cli("history", "--region", "ca-central-1")) == "ca-central-1"


def test_no_region_anywhere_says_every_place_one_can_be_given(cli: Cli, no_aws_config: Path) -> None:
    result = cli("history")
    assert result.code == 2
    assert "no AWS region" in result.err
    for place in ("--region", "AWS_REGION", "AWS_DEFAULT_REGION", "profile"):
        assert place in result.err


@pytest.mark.parametrize(
    ("flag", "environ", "profile", "expected"),
    [
        (
            "ca-central-1",
            {"AWS_REGION": "eu-central-1", "AWS_DEFAULT_REGION": "eu-west-1"},
            "ap-south-1",
            "ca-central-1",
        ),
        (
            None,
            {"AWS_REGION": "eu-central-1", "AWS_DEFAULT_REGION": "eu-west-1"},
            "ap-south-1",
            "eu-central-1",
        ),
        (None, {"AWS_REGION": " ", "AWS_DEFAULT_REGION": "eu-west-1"}, "ap-south-1", "eu-west-1"),
        ("", {}, "ap-south-1", "ap-south-1"),
        (None, {}, None, None),
    ],
)
def test_resolve_region_order(
    flag: str | None, environ: dict[str, str], profile: str | None, expected: str | None
) -> None:
    from nodeheal.commands.aws_access import resolve_region

    assert resolve_region(flag, environ, profile) == expected


def _region_help(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(command path, --region help) of every subcommand under ``parser``."""
    found: list[tuple[str, str]] = []
    for action in parser._actions:
        if "--region" in action.option_strings:
            found.append((parser.prog, str(action.help)))
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(_region_help(child))
    return found


def test_every_region_flag_states_the_real_order() -> None:
    from nodeheal.commands.aws_access import REGION_HELP

    helps = _region_help(build_parser())
    commands = {prog.split(" ", 1)[1] for prog, _ in helps}
    assert {"doctor", "history", "breaker status", "pause", "resume", "retry", "inject"} <= commands
    assert (
        REGION_HELP == "AWS region (default: AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region)"
    )
    assert {text for _, text in helps} == {REGION_HELP}
