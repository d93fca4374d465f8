"""The JSON Schema of cdk.json's context.nodeheal (nodeheal/contracts/cdk-json.schema.json) is the
deployment parser's own account of what it accepts: regenerated here and compared, checked
against the shipped cdk.json, against every key the source reads and against the README's table."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator

from nodeheal.contracts import config_schema
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "nodeheal" / "contracts" / config_schema.SCHEMA_FILE
SCHEMA = json.loads(SCHEMA_PATH.read_text())
NODEHEAL = SCHEMA["properties"]["context"]["properties"]["nodeheal"]
#: The modules whose SettingsReader calls parse cdk.json.
PARSER_SOURCES = ("nodeheal/config.py", "nodeheal/deploy_config.py")
READER_METHODS = {
    "string",
    "optional_string",
    "boolean",
    "integer",
    "number",
    "choice",
    "string_list",
    "mapping",
    "child",
    "each",
}


#: Keys the parsers read that cdk.json must not hold: the refused old name, and the rule's scope as
#: an execution's input carries it (RemediationSettings.from_json).
NOT_IN_CDK_JSON = {"kubernetesGroup", "scope"}


def errors(document: dict[str, Any]) -> list[str]:
    return [error.message for error in Draft7Validator(SCHEMA).iter_errors(document)]


def in_cdk_json(nodeheal: dict[str, Any]) -> dict[str, Any]:
    return {"app": "python app.py", "context": {"nodeheal": nodeheal}}


def test_the_committed_schema_is_what_the_parser_generates() -> None:
    assert SCHEMA_PATH.read_text() == config_schema.render(), (
        "nodeheal/contracts/cdk-json.schema.json is stale: regenerate it with "
        "python -m nodeheal.contracts.config_schema > nodeheal/contracts/cdk-json.schema.json"
    )


def test_the_schema_is_valid_draft_7() -> None:
    Draft7Validator.check_schema(SCHEMA)


def test_the_shipped_cdk_json_meets_the_schema() -> None:
    assert errors(json.loads((ROOT / "cdk.json").read_text())) == []


def test_the_configuration_that_sets_everything_meets_the_parser_and_the_schema() -> None:
    NodeHealConfig.from_cdk_context(config_schema.EVERY_SETTING)
    assert errors(in_cdk_json(config_schema.EVERY_SETTING)) == []


def _literal_keys_read() -> set[str]:
    keys: set[str] = set()
    for source in PARSER_SOURCES:
        for node in ast.walk(ast.parse((ROOT / source).read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in READER_METHODS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                keys.add(node.args[0].value)
    return keys


def _property_names(schema: Any) -> set[str]:
    names: set[str] = set()
    if isinstance(schema, dict):
        names.update(schema.get("properties", {}))
        for value in schema.values():
            names |= _property_names(value)
    elif isinstance(schema, list):
        for value in schema:
            names |= _property_names(value)
    return names


def test_every_key_the_parser_reads_is_in_the_schema() -> None:
    """A key added to the parser but not to EVERY_SETTING's optional objects would be missing."""
    missing = _literal_keys_read() - _property_names(NODEHEAL) - NOT_IN_CDK_JSON
    assert not missing, f"set these in config_schema.EVERY_SETTING so the schema has them: {sorted(missing)}"


def _documented(schema: dict[str, Any], path: str, described: bool) -> list[str]:
    undocumented = []
    for key, child in schema.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        child_described = described or "description" in child
        if not child_described and not child.get("properties"):
            undocumented.append(here)  # a setting, not a group of settings, says what it is
        undocumented += _documented(child, here, child_described)
    for branch in schema.get("anyOf", []):
        undocumented += _documented(branch, path, described)
    return undocumented


def test_every_setting_is_described_from_the_readme_table() -> None:
    assert _documented(NODEHEAL, "", False) == []


def test_every_readme_row_names_a_setting_of_the_schema() -> None:
    rows = config_schema.readme_descriptions(ROOT / "README.md")
    assert rows
    for name in rows:
        schema: dict[str, Any] = NODEHEAL
        for part in name.split("."):
            schema = schema["properties"][part]
        assert schema["markdownDescription"] == rows[name]


#: Mistakes both the parser and the schema refuse.
REFUSED = [
    {"clusters": []},
    {"clusters": ["a"], "typo": 1},
    {"clusters": ["a"], "mode": "yolo"},
    {"clusters": ["a"], "budgets": {"maxInFlight": 0}},
    {"clusters": ["a"], "budgets": {"maxInFlight": "2"}},
    {"clusters": ["a"], "drain": {"onTimeout": "explode"}},
    {"clusters": ["a"], "policy": {"xidActions": {"abc": "replace"}}},
    {"clusters": ["a"], "policy": {"xidActions": {"79": "nuke"}}},
    {"clusters": ["a"], "policy": {"conditionRules": {"KernelDeadlock": {"confirmSeconds": 5}}}},
    {"clusters": ["a"], "policy": {"nodePools": {"gpu": {"xidAction": {}}}}},
    {"clusters": ["a"], "rule": {"conditions": [{"type": "GPUProblem"}]}},
    {"clusters": ["a"], "notifications": {"slack": {"workspaceId": "T0123ABCD"}}},
    {"clusters": ["a"], "lambdaNetwork": {"vpcId": "vpc-1"}},
    {"clusters": ["a"], "retry": {"backoffRate": 0.5}},
]


@pytest.mark.parametrize("nodeheal", REFUSED, ids=[json.dumps(c)[:60] for c in REFUSED])
def test_a_mistake_the_parser_refuses_the_schema_refuses(nodeheal: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        NodeHealConfig.from_cdk_context(nodeheal)
    assert errors(in_cdk_json(nodeheal)), f"the schema accepts {nodeheal}"


@pytest.mark.parametrize(
    "nodeheal",
    [
        {"clusters": ["a"]},
        {"clusters": ["a"], "notifications": {"slack": {}}, "lambdaNetwork": {}},
        {"clusters": ["a"], "policy": {"reasonActions": {"NvidiaNVLink*": "replace"}}},
        {"clusters": ["a"], "rule": {"nodeLabels": {"karpenter.sh/nodepool": ["gpu", "gpu-spot"]}}},
    ],
)
def test_what_the_parser_accepts_the_schema_accepts(nodeheal: dict[str, Any]) -> None:
    NodeHealConfig.from_cdk_context(nodeheal)
    assert errors(in_cdk_json(nodeheal)) == []


def test_editors_are_pointed_at_the_schema() -> None:
    settings = json.loads((ROOT / ".vscode" / "settings.json").read_text())
    (entry,) = settings["json.schemas"]
    assert entry["fileMatch"] == ["cdk.json"]
    assert (ROOT / entry["url"]).resolve() == SCHEMA_PATH
