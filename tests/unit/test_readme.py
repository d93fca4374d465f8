"""The README's configuration table documents every key cdk.json spells out."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
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
