from __future__ import annotations

from pathlib import Path

import pytest

from nodeheal.cli import EXIT_USAGE, main
from nodeheal.errors import ConfigurationError
from nodeheal.exporter.app import make_events_client
from nodeheal.exporter.settings import (
    OPTIONS,
    default_text,
    env_name,
    flag_name,
    load_settings,
    type_text,
)


def test_flags_win_over_environment_over_defaults() -> None:
    env = {"NODEHEAL_CLUSTER_NAME": "from-env", "NODEHEAL_EVENT_BUS": "env-bus", "POD_NAME": "pod-1"}
    settings = load_settings({"cluster_name": "from-flag", "condition_types": "GPUProblem, Ready"}, env)
    assert settings.cluster_name == "from-flag"
    assert settings.event_bus == "env-bus"
    assert settings.condition_types == ("GPUProblem", "Ready")
    assert settings.identity == "pod-1"
    assert settings.source == "nodeheal.exporter"
    assert settings.watches("Ready") and not settings.watches("KernelDeadlock")


def test_default_watches_everything_but_pressure() -> None:
    settings = load_settings({}, {"NODEHEAL_CLUSTER_NAME": "c"})
    assert settings.watches("GPUProblem") and settings.watches("AcceleratedHardwareReady")
    assert not settings.watches("MemoryPressure")
    assert settings.watch_read_timeout_seconds == 315.0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "cluster name is required"),
        ({"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_PUBLISH_BATCH_ENTRIES": "11"}, "between 1 and 10"),
        ({"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_LEADER_ELECTION": "maybe"}, "true or false"),
        ({"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_SOURCE": "aws.events"}, "must not start with 'aws.'"),
        (
            {
                "NODEHEAL_CLUSTER_NAME": "c",
                "NODEHEAL_LEADER_ELECTION": "true",
                "NODEHEAL_RENEW_DEADLINE_SECONDS": "20",
            },
            "renew_deadline_seconds < lease_duration_seconds",
        ),
        ({"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_LIVENESS_MAX_API_SILENCE_SECONDS": "100"}, "quiet cluster"),
    ],
)
def test_invalid_settings_fail_at_start_naming_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_settings({}, env)


BUS_ARN = "arn:aws:events:eu-central-1:111122223333:event-bus/nodeheal"


@pytest.mark.parametrize(
    ("env", "region"),
    [
        # No region in the environment: the bus ARN names it (IMDS is often out of a pod's reach).
        ({"NODEHEAL_EVENT_BUS": BUS_ARN}, "eu-central-1"),
        (
            {"NODEHEAL_EVENT_BUS": "arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/nh"},
            "us-gov-west-1",
        ),
        # An explicit region that agrees with the ARN, by either variable.
        ({"NODEHEAL_EVENT_BUS": BUS_ARN, "AWS_REGION": "eu-central-1"}, "eu-central-1"),
        (
            {"NODEHEAL_EVENT_BUS": BUS_ARN, "AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-central-1"},
            "eu-central-1",
        ),
        # A bus name carries no region: the environment's wins, AWS_REGION first.
        (
            {"NODEHEAL_EVENT_BUS": "nodeheal", "AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "us-east-1"},
            "us-west-2",
        ),
        ({"AWS_DEFAULT_REGION": "us-east-1"}, "us-east-1"),
        ({}, None),
    ],
)
def test_the_region_comes_from_the_environment_else_from_the_bus_arn(
    env: dict[str, str], region: str | None
) -> None:
    settings = load_settings({}, {"NODEHEAL_CLUSTER_NAME": "c", **env})
    assert settings.aws_region == region


def test_a_flag_bus_arn_names_the_region_too() -> None:
    settings = load_settings({"cluster_name": "c", "event_bus": BUS_ARN}, {})
    assert (settings.event_bus, settings.aws_region) == (BUS_ARN, "eu-central-1")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"NODEHEAL_EVENT_BUS": BUS_ARN, "AWS_REGION": "us-west-2"},
            "AWS_REGION=us-west-2 but the event bus",
        ),
        ({"NODEHEAL_EVENT_BUS": BUS_ARN, "AWS_DEFAULT_REGION": "us-east-1"}, "is in eu-central-1"),
        ({"NODEHEAL_EVENT_BUS": "arn:aws:sqs:eu-central-1:111122223333:queue"}, "not an EventBridge bus ARN"),
        (
            {"NODEHEAL_EVENT_BUS": "arn:aws:events:eu-central-1:1111:event-bus/x"},
            "not an EventBridge bus ARN",
        ),
    ],
)
def test_a_region_that_contradicts_the_bus_arn_is_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_settings({}, {"NODEHEAL_CLUSTER_NAME": "c", **env})


def test_the_events_client_uses_the_resolved_region_and_refuses_to_start_without_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Nothing from the suite's environment or a developer's ~/.aws may supply a region here.
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    settings = load_settings({}, {"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_EVENT_BUS": BUS_ARN})
    assert make_events_client(settings.aws_region).meta.region_name == "eu-central-1"
    with pytest.raises(ConfigurationError, match="no AWS region: set AWS_REGION"):
        make_events_client(load_settings({}, {"NODEHEAL_CLUSTER_NAME": "c"}).aws_region)


def test_the_command_exits_with_a_usage_error_when_no_region_is_known(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent"))
    assert main(["exporter", "--cluster-name", "c", "--event-bus", "nodeheal"]) == EXIT_USAGE
    assert "no AWS region" in capsys.readouterr().err


def test_help_shows_every_flags_type_default_and_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one line per flag: argparse would wrap "non-empty" at the hyphen
    with pytest.raises(SystemExit) as exit_:
        main(["exporter", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    # One entry per flag: argparse puts the help of a long flag on the next line.
    lines: dict[str, str] = {}
    flag = ""
    options_section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    for line in options_section.splitlines():
        if line.strip().startswith("--"):
            flag = line.split()[0]
            lines[flag] = line.strip()
        elif flag:
            lines[flag] += " " + line.strip()
    assert set(lines) == {flag_name(option.name) for option in OPTIONS}
    for option in OPTIONS:
        line = lines[flag_name(option.name)]
        assert line.split()[1] == option.parse.metavar, line
        assert (
            f"[{type_text(option.name)}; default: {default_text(option.name)}; env {env_name(option.name)}]"
            in line
        )
    assert "[integer 0..65535; default: 8080; env NODEHEAL_HTTP_PORT]" in lines["--http-port"]
    assert "[number 0..86400; default: 3600; env NODEHEAL_RESYNC_SECONDS]" in lines["--resync-seconds"]
    assert (
        "[boolean (true/false); default: false; env NODEHEAL_LEADER_ELECTION]" in lines["--leader-election"]
    )
    assert "default: DiskPressure,MemoryPressure,PIDPressure;" in lines["--ignored-condition-types"]
    assert "AWS_REGION, else AWS_DEFAULT_REGION, else the region of --event-bus" in " ".join(text.split())


def test_every_default_in_help_is_the_default_load_settings_applies() -> None:
    settings = load_settings(
        {}, {"NODEHEAL_CLUSTER_NAME": "c", "POD_NAMESPACE": "nodeheal", "POD_NAME": "pod-0"}
    )
    # Defaults decided at start, described in words: checked against what start decides.
    decided_at_start = {
        "cluster_name": ("required", "c"),
        "lease_namespace": ("the pod's namespace", "nodeheal"),
        "identity": ("$POD_NAME, else the hostname", "pod-0"),
        "kubeconfig": ("$KUBECONFIG, else in-cluster", ""),
    }
    for option in OPTIONS:
        shown = default_text(option.name)
        if option.name in decided_at_start:
            assert (shown, getattr(settings, option.name)) == decided_at_start[option.name]
            continue
        # Every other default, as --help prints it, parses back to the value load_settings applies.
        raw = "" if shown == "(empty)" else shown
        assert getattr(settings, option.name) == option.parse(option.name, raw), option.name


def test_the_deploy_readme_table_is_what_help_says() -> None:
    readme = (Path(__file__).resolve().parents[3] / "deploy" / "exporter" / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`--"):
            rows[cells[0]] = (cells[2], cells[3])
    for option in OPTIONS:
        key = f"`{flag_name(option.name)}` / `{env_name(option.name)}`"
        assert rows.pop(key) == (type_text(option.name), f"`{default_text(option.name)}`"), key
    assert rows == {}, "rows for settings that do not exist"
    assert "| `AWS_REGION` (or `AWS_DEFAULT_REGION`) |" in readme
