"""docs/operations.md, "Your first day": the emergency stop without the CLI and where to look.

The stop's commands are run as the guide writes them: its bash blocks go to bash, with an ``aws``
on PATH that speaks the AWS CLI's command line over boto3 (tests/aws_cli.py) to moto's server,
where the bus and its rules are the synthesized template's (names as CloudFormation makes them,
descriptions and patterns as deployed), and the ledger table and the stack outputs are NodeHeal's.
Then NodeHeal's own code reads the result: the ledger sees the cluster paused, admit refuses and a
running remediation stops, a write prepared before the pause is refused for its stale version, and
``nodeheal resume`` undoes it. moto delivers PutEvents to a disabled rule's targets (its put_events
never reads the rule's state), so for the rule the test checks the state EventBridge reads and that
the rule disabled is the one that forwards a GPU fault to ingest, and only that one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto.events.models import EventPattern
from moto.server import ThreadedMotoServer

from nodeheal.aws.ledger import Ledger
from nodeheal.cli import build_parser, main
from nodeheal.config import BudgetSettings
from nodeheal.errors import LedgerContentionError, RemediationPausedError
from nodeheal.sim.stack.process_templates import synthesized
from nodeheal.workflow import budget
from nodeheal.workflow.guard import require_not_paused
from tests.aws_fixtures import create_ledger_table
from tests.unit.test_docs_commands import Block, blocks
from tests.unit.workflow.fakes import CLUSTER

# the guide's commands against moto's server and the synthesized template: `make test` runs it, `make check` does not
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "operations.md"
REGION = "us-west-2"
STACK = "NodeHeal"
TABLE = "NodeHeal-LedgerTable0F3E5C51-1T2U3V4W5X6Y"
FAULT_EVENT = json.loads((ROOT / "examples" / "events" / "xid79-fallen-off-the-bus.json").read_text())


def section(text: str, heading: str) -> str:
    """From ``heading`` (a whole line) to the next heading of the same or a higher level."""
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    ends = [text.find(f"\n{'#' * depth} ", start + 1) for depth in range(1, len(level) + 1)]
    found = [end for end in ends if end != -1]
    return text[start : min(found) if found else len(text)]


def first_day() -> str:
    return section(GUIDE.read_text(encoding="utf-8"), "## Your first day")


def stop_section() -> str:
    return section(first_day(), "### An emergency stop without the CLI")


def stop_blocks() -> list[Block]:
    """The bash blocks of the emergency stop, in the guide's order."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(stop_section())
    first, last = text.count("\n", 0, start) + 1, text.count("\n", 0, start + len(stop_section())) + 1
    found = [block for block in blocks(GUIDE) if first <= block.line <= last and block.language == "bash"]
    assert found, "the emergency stop shows its commands in bash blocks"
    return found


def block_with(needle: str) -> str:
    (block,) = [block for block in stop_blocks() if any(needle in line for line in block.body)]
    return "\n".join(block.body)


def inline_command(prefix: str) -> str:
    """The one command in backticks in the stop's text that starts with ``prefix``."""
    prose = re.sub(r"^```.*?^```", "", stop_section(), flags=re.MULTILINE | re.DOTALL)
    (command,) = {found for found in re.findall(r"`([^`]+)`", prose) if found.startswith(prefix)}
    return command


# -- AWS: moto's server with the deployment the commands look up ----------------------------------


@dataclass
class Deployment:
    endpoint: str
    bus: str
    #: Rule name -> its properties in the template (Description, EventPattern).
    rules: dict[str, dict[str, Any]]
    ingest_rule: str
    ledger: Ledger
    events: Any


def client(service: str, endpoint: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=endpoint)


def reset(endpoint: str) -> None:
    """Empty moto: its backends live in the process, shared by every server and mock in it."""
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10)


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    template = synthesized().template
    (bus,) = [
        resource["Properties"]["Name"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Events::EventBus"
    ]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        reset(endpoint)
        # Every client from here on, the CLI's in this process and the `aws` of the commands, uses it.
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        events = client("events", endpoint)
        events.create_event_bus(Name=bus)
        rules: dict[str, dict[str, Any]] = {}
        for logical, resource in template["Resources"].items():
            properties = resource["Properties"]
            if (
                resource["Type"] != "AWS::Events::Rule"
                or properties.get("EventBusName", {}).get("Ref") is None
            ):
                continue
            name = f"{STACK}-{logical}-{len(rules) + 1:X}Q2W3E4R5T6Y"  # as CloudFormation names it
            events.put_rule(
                Name=name,
                EventBusName=bus,
                Description=properties["Description"],
                EventPattern=json.dumps(properties["EventPattern"]),
            )
            rules[name] = properties
        # A rule without a description (as another team's on a shared bus): the lookup must skip it.
        events.put_rule(Name="team-audit", EventBusName=bus, EventPattern=json.dumps({"source": ["team"]}))
        (ingest_rule,) = [
            name
            for name, properties in rules.items()
            if EventPattern.load(json.dumps(properties["EventPattern"])).matches_event(FAULT_EVENT)
        ]
        dynamodb = client("dynamodb", endpoint)
        create_ledger_table(dynamodb, TABLE)
        client("cloudformation", endpoint).create_stack(
            StackName=STACK,
            TemplateBody=json.dumps(
                {
                    "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                    "Outputs": {"EventBusName": {"Value": bus}, "LedgerTableName": {"Value": TABLE}},
                }
            ),
        )
        yield Deployment(endpoint, bus, rules, ingest_rule, Ledger(dynamodb, TABLE), events)
    finally:
        reset(endpoint)
        server.stop()


def run_in_bash(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in bash (stopping at the first failure), with tests/aws_cli.py as ``aws``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    aws = bin_dir / "aws"
    aws.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m tests.aws_cli "$@"\n')
    aws.chmod(0o755)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"{script}\n{result.stdout}\n{result.stderr}"
    return result


def look_up_then(command: str) -> str:
    """The guide's look-up block, then ``command``, and the variables it set, printed."""
    return "\n".join([block_with("BUS=$("), command, 'printf "%s\\n" "$BUS" "$TABLE" "$RULE"'])


# -- the pause item ---------------------------------------------------------------------------------


NOW = datetime.now(UTC).replace(microsecond=0)
SETTINGS = BudgetSettings()  # the defaults: two in flight, six an hour


def admit(state: budget.ClusterAdmissionState, node: str) -> budget.BudgetVerdict:
    """Admit's budget step, as nodeheal.workflow.admission takes a slot."""
    return budget.admit(
        state,
        node=node,
        execution=f"{CLUSTER}-{node}-GPUProblem-20261122T033726Z-4b8ccf0fed2e",
        pool=budget.PoolHealth(pool="gpu", size=10, unhealthy_nodes=frozenset()),
        settings=SETTINGS,
        lock_ttl=timedelta(hours=9),
        now=NOW,
    )


@pytest.mark.parametrize("earlier", ["nothing", "a remediation in flight"])
def test_the_guides_update_item_pauses_the_cluster_as_nodeheal_pause_does(
    deployment: Deployment, tmp_path: Path, earlier: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = deployment.ledger
    if earlier != "nothing":
        ledger.write_admission_state(admit(ledger.read_admission_state(CLUSTER), "i-0aaa").state)
    before = ledger.read_admission_state(CLUSTER)
    # An admit that read the state just before the pause, and writes after it.
    racing = admit(before, "i-0bbb")
    assert racing.admitted

    pause = block_with("aws dynamodb update-item")
    assert "put-item" not in pause
    printed = run_in_bash(look_up_then(pause), tmp_path).stdout.splitlines()
    assert printed[-3:] == [deployment.bus, TABLE, deployment.ingest_rule]

    paused = ledger.read_admission_state(CLUSTER)
    assert paused.paused and paused.paused_reason
    assert paused.version == before.version + 1
    assert paused.in_flight == before.in_flight  # the budget slots and breaker stay as they were
    assert paused.breaker == before.breaker and paused.recent_starts == before.recent_starts
    with pytest.raises(LedgerContentionError):
        ledger.write_admission_state(racing.state)
    # The racing admit runs again: refused, with the reason written.
    verdict = admit(ledger.read_admission_state(CLUSTER), "i-0bbb")
    assert not verdict.admitted
    assert verdict.reason == f"NodeHeal is paused ({paused.paused_reason}); resume with `nodeheal resume`"
    # A running remediation stops before its next mutation.
    with pytest.raises(RemediationPausedError, match=re.escape(paused.paused_reason)):
        require_not_paused(SimpleNamespace(cluster=CLUSTER), ledger, step="Cordon")  # type: ignore[arg-type]

    # `nodeheal resume`, as the guide says, undoes it and leaves the rest of the state alone.
    resume = shlex.split(inline_command("nodeheal resume"))
    assert resume[:2] == ["nodeheal", "resume"] and CLUSTER in resume
    capsys.readouterr()
    assert main([*resume[1:], "--yes"]) == 0, capsys.readouterr()
    assert f"{CLUSTER}: resumed" in capsys.readouterr().out
    resumed = ledger.read_admission_state(CLUSTER)
    assert not resumed.paused and resumed.paused_reason == ""
    assert resumed.version == paused.version + 1 and resumed.in_flight == before.in_flight
    assert admit(resumed, "i-0bbb").admitted


def test_the_guides_disable_rule_stops_the_rule_that_forwards_faults_and_only_it(
    deployment: Deployment, tmp_path: Path
) -> None:
    events = deployment.events

    def states() -> dict[str, str]:
        listed = events.list_rules(EventBusName=deployment.bus)["Rules"]
        return {rule["Name"]: rule["State"] for rule in listed}

    assert set(states().values()) == {"ENABLED"}
    disable = inline_command("aws events disable-rule")
    printed = run_in_bash(look_up_then(disable), tmp_path).stdout.splitlines()
    assert printed[2] == deployment.ingest_rule
    after = states()
    assert after.pop(deployment.ingest_rule) == "DISABLED"
    # The heartbeat rule (and anything else on the bus) goes on: no missing-heartbeat alarm.
    assert set(after.values()) == {"ENABLED"}
    (heartbeat,) = [name for name in deployment.rules if "HeartbeatRule" in name]
    assert heartbeat in after
    # The rule disabled is the one whose target is ingest and whose pattern a GPU fault matches.
    disabled = deployment.rules[deployment.ingest_rule]
    assert disabled["Targets"][0]["Arn"]["Fn::GetAtt"][0].startswith("Ingest")

    run_in_bash(look_up_then(inline_command("aws events enable-rule")), tmp_path)
    assert set(states().values()) == {"ENABLED"}


# -- where to look --------------------------------------------------------------------------------


def test_where_to_look_gives_the_event_listings_the_guide_already_gives_as_working() -> None:
    where = section(first_day(), "### Where to look")
    listing = section(GUIDE.read_text(encoding="utf-8"), "### Events on the node")
    (listing_block,) = [
        "\n".join(block.body)
        for block in blocks(GUIDE)
        if block.language == "bash" and any("kubectl get events" in line for line in block.body)
    ]
    assert listing_block in listing
    shown = set(re.findall(r"`(kubectl get events[^`]*)`", where))
    assert shown == {
        "kubectl get events -A --field-selector involvedObject.name=NODE",
        "kubectl get events.events.k8s.io -A --field-selector regarding.name=NODE",
    }
    for command in shown:
        assert re.search(rf"^{re.escape(command)}\s", listing_block, flags=re.MULTILINE), command
    assert "`kubectl describe node NODE`" in where
    # Every nodeheal command it names is one the CLI takes; history and one execution's record first.
    named = re.findall(r"`(nodeheal [^`]*)`", where)
    assert named[:2] == ["nodeheal history", "nodeheal history show EXECUTION"], named
    for command in named:
        build_parser().parse_args(shlex.split(command)[1:])
    # The console link: each notification's `Console:` line.
    assert "`Console:`" in where
