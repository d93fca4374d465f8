"""The README's configuration table documents every key cdk.json spells out."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from nodeheal.cli import build_parser
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.errors import ConfigurationError
from nodeheal.workflow.records import Outcome

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = json.loads((ROOT / "cdk.json").read_text())["context"]["nodeheal"]
#: Objects documented as one row (free-form maps or a group of keys given together).
DOCUMENTED_AS_A_WHOLE = {
    "rule.nodeLabels",
    "policy.xidActions",
    "policy.reasonActions",
    "policy.conditionRules",
    "policy.nodePools",
    "lambdaNetwork",
}


def key_paths(node: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and path not in DOCUMENTED_AS_A_WHOLE:
            paths.extend(key_paths(value, path))
        else:
            paths.append(path)
    return paths


def test_every_cdk_json_key_is_in_the_readme_table() -> None:
    context = json.loads((ROOT / "cdk.json").read_text())["context"]["nodeheal"]
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z.]+)` \|", readme, flags=re.MULTILINE))
    missing = [path for path in key_paths(context) if path not in documented]
    assert missing == []


def test_readme_names_the_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme


def paragraph_with(text: str, needle: str) -> str:
    start = text.index(needle)
    begin = text.rfind("\n\n", 0, start) + 2
    end = text.find("\n\n", start)
    return text[begin : end if end != -1 else len(text)]


def test_the_quick_start_says_where_the_cli_is() -> None:
    readme = (ROOT / "README.md").read_text()
    quick_start = readme[
        readme.index("## Quick start") : readme.index("\n## ", readme.index("## Quick start") + 1)
    ]
    # Before the quick start's first `nodeheal ...` command, the reader learns it is not on PATH.
    first_command = quick_start.index("`nodeheal ")
    where = quick_start.index(".venv/bin/nodeheal")
    assert where < first_command
    assert "does not put the `nodeheal` CLI on\nyour PATH" in quick_start
    assert "source .venv/bin/activate" in quick_start
    assert "pipx install ." in quick_start
    operating = paragraph_with(readme, "**The `nodeheal` CLI**")
    assert ".venv/bin/nodeheal" in operating


def cli_bullet() -> str:
    """The README's list item about the CLI alone (up to the next item), words as a reader sees
    them wherever the lines wrap."""
    readme = (ROOT / "README.md").read_text()
    start = readme.rfind("\n- ", 0, readme.index("**The `nodeheal` CLI**")) + 1
    ends = [end for end in (readme.find("\n- ", start), readme.find("\n\n", start)) if end != -1]
    return " ".join(readme[start : min(ends)].split())


def cli_commands() -> dict[str, bool]:
    """Every runnable ``nodeheal`` command path (``breaker status``...) -> whether it takes --json."""
    found: dict[str, bool] = {}

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        options = {option for action in parser._actions for option in action.option_strings}
        if path and (not subparsers or not any(a.required for a in subparsers)):
            found[path] = "--json" in options
        for action in subparsers:
            for name, child in action.choices.items():
                walk(child, f"{path} {name}".strip())

    walk(build_parser(), "")
    return found


def named(text: str) -> set[str]:
    """Commands in backticks, with ``breaker status|reset`` standing for both."""
    names: set[str] = set()
    for item in re.findall(r"`([a-z][a-z -]*(?:\|[a-z-]+)*)`", text):
        head, _, tail = item.rpartition(" ")
        names.update(f"{head} {word}".strip() for word in tail.split("|"))
    return names


def test_the_cli_bullet_names_every_command_and_which_print_json() -> None:
    bullet = cli_bullet()
    commands = cli_commands()
    listed, rest = bullet.split("these print JSON with `--json`:")
    match = re.match(r"(.*?)\.(\s|$)", rest, flags=re.DOTALL)
    assert match, "the list of commands that take --json ends with a full stop"
    json_part = match.group(1)
    # Both ways, from the real parsers: every command is listed and nothing else is, and the JSON
    # list is exactly the commands whose parser has --json.
    # The list runs from after "(where it is):" to "Each has `--help`".
    commands_part = listed.split("):", 1)[1].split("Each has `--help`")[0]
    assert "`nodeheal --version`" in commands_part
    assert named(commands_part) - {"nodeheal --version"} == set(commands)
    assert named(json_part) == {path for path, has_json in commands.items() if has_json}
    assert "Each has `--help`" in bullet
    assert "Without it `explain` prints a summary" in bullet
    assert any("--version" in action.option_strings for action in build_parser()._actions)


def test_the_exporter_logs_json_lines_instead_of_taking_json() -> None:
    bullet = cli_bullet()
    assert cli_commands()["exporter"] is False
    assert "the exporter logs JSON lines" in bullet
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert "logs JSON lines" in (subparsers.choices["exporter"].description or "")


def test_the_readme_names_the_state_machine_as_the_stack_does() -> None:
    name = NodeHealConfig.from_cdk_context(SHIPPED).state_machine_name
    readme = (ROOT / "README.md").read_text()
    history = paragraph_with(readme, "**History**")
    assert f"`{name}`" in history and "`<stackName>-remediation`" in history
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert f"State machines → {name} → Executions" in operations
    # Every state machine ARN the docs show names it as the stack does.
    arns = re.findall(r"arn:aws:states:[^:]+:\d+:(?:execution|stateMachine):([^:\s]+)", readme + operations)
    assert arns and set(arns) == {name}


def test_the_readme_recommends_node_22_and_keeps_20_working() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "Node 20+" not in readme
    assert "Node.js 22+ (20 still works" in readme
    makefile = (ROOT / "Makefile").read_text()
    assert "Node.js 22+ (20 still works)" in makefile
    # Node 20 keeps working without jsii's end-of-life banner burying make's output.
    assert "export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20" in makefile


def test_the_outcome_lists_name_every_outcome_a_record_can_have() -> None:
    outcomes = [outcome.value for outcome in Outcome]
    readme = (ROOT / "README.md").read_text()
    history = " ".join(paragraph_with(readme, "**History**").split())
    listed = re.search(r"the outcome \(((?:`[a-z-]+`(?:, )?)+)[;)]", history)
    assert listed, "the History bullet lists the outcomes in parentheses"
    assert re.findall(r"`([a-z-]+)`", listed.group(1)) == outcomes
    # The guide's table says what each means, one row each, in the same order.
    operations = (ROOT / "docs" / "operations.md").read_text()
    rows = re.findall(
        r"^\| `([a-z-]+)` \| [^|]+ \|$",
        operations[operations.index("| outcome | what happened |") :].split("\n\n")[0],
        flags=re.MULTILINE,
    )
    assert rows == outcomes
    assert "`--outcome` (repeatable: one of the outcomes below)" in " ".join(operations.split())


def test_the_guide_keeps_the_drain_settings_global_as_the_config_does() -> None:
    """Per-pool drain settings would change the worst-case timing (D5): there are none."""
    with pytest.raises(ConfigurationError, match=r"nodePools\.gpu\.drain"):
        NodeHealConfig.from_cdk_context(
            {**SHIPPED, "policy": {"nodePools": {"gpu": {"drain": {"onTimeout": "force"}}}}}
        )
    operations = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    for sentence in re.split(r"(?<=\.) ", operations):
        if "drain." in sentence:
            assert not re.search(r"\b(for a pool|per pool|per-pool)\b", sentence), sentence
    assert "The drain settings are global" in operations


def test_the_set_up_steps_name_every_step_make_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    quick_start = " ".join(
        readme[readme.index("## Quick start") : readme.index("<!-- not runnable: make test")].split()
    )
    makefile = (ROOT / "Makefile").read_text()
    steps = re.findall(r'\$\(STEP\) "set-up: ([^"]+)"', makefile)
    assert "security scanner" in steps
    for step in steps:
        assert step.lower() in quick_start.lower(), step
    scan_venv = re.search(r"^SCAN_VENV := (\S+)$", makefile, flags=re.MULTILINE)
    assert scan_venv and f"`{scan_venv.group(1)}/`" in quick_start
