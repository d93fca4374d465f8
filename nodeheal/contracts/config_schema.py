"""The JSON Schema of ``cdk.json``'s ``context.nodeheal``, generated from the parser itself.

The configuration is parsed by :class:`nodeheal.deploy_config.NodeHealConfig` through
:class:`nodeheal.settings_reader.SettingsReader`, which refuses unknown keys and names the path of
every mistake. This module runs that parser over :data:`EVERY_SETTING` (a configuration that sets
every key, each optional object included) while :func:`recording_reads` notes each read: its key,
type, default, range and choices. Those reads become the schema, so the schema cannot promise a
key the parser does not read, nor miss one it does (``tests/unit/test_config_schema.py`` also
checks every key read in the source is in it, and regenerates the file to compare).

Descriptions come from the README's configuration table, the one place they are written.

What the parser checks beyond one key (the lock TTL against the worst case, the workflow timeout,
``drain.allowImmediateForce``, cluster name syntax) stays the parser's: the schema helps an editor
complete and type-check; ``cdk synth`` and ``nodeheal explain --config`` have the last word.

Regenerate with ``python -m nodeheal.contracts.config_schema > nodeheal/contracts/cdk-json.schema.json``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodeheal.actions import Action
from nodeheal.counted_signals import DEFINITIONS as COUNTED_SIGNALS
from nodeheal.deploy_config import CONTEXT_KEY, NodeHealConfig
from nodeheal.settings_reader import SettingRead, recording_reads

SCHEMA_FILE = "cdk-json.schema.json"
DIALECT = "http://json-schema.org/draft-07/schema#"

#: Objects whose keys are the user's (pool names, Xids, reasons, label keys): each maps to the
#: schema of its keys. :data:`EVERY_SETTING` uses one entry of each, named without dots.
USER_KEYED = {
    "rule.nodeLabels": {"description": "label key"},
    "policy.xidActions": {"pattern": "^[0-9]+$"},
    "policy.reasonActions": {"description": "condition reason (a trailing * matches a prefix)"},
    "policy.conditionRules": {"description": "condition type (*Ready: every agent readiness condition)"},
    "policy.nodePools": {"description": "pool name"},
    "policy.nodePools.*.xidActions": {"pattern": "^[0-9]+$"},
    "policy.nodePools.*.reasonActions": {"description": "condition reason"},
    "policy.nodePools.*.conditionRules": {"description": "condition type"},
    "drain.evictionModes[].podLabels": {"description": "pod label key"},
}
_ACTIONS = {"enum": [action.value for action in Action]}
#: Values the parser reads without a reader (``Action.parse`` of a map's value), and strings it
#: parses as actions: their schema is the actions.
VALUE_SCHEMAS: dict[str, dict[str, Any]] = {
    "policy.xidActions.*": _ACTIONS,
    "policy.reasonActions.*": _ACTIONS,
    "policy.nodePools.*.xidActions.*": _ACTIONS,
    "policy.nodePools.*.reasonActions.*": _ACTIONS,
    "drain.evictionModes[].podLabels.*": {"type": "string"},
    "policy.unknownAction": _ACTIONS,
    "policy.conditionRules.*.action": _ACTIONS,
    "policy.nodePools.*.conditionRules.*.action": _ACTIONS,
}

_RULE = {"action": "replace", "confirmSeconds": 60}
_OVERRIDES = {
    "xidActions": {"79": "replace"},
    "reasonActions": {"NvidiaXID": "alert"},
    "conditionRules": {"KernelDeadlock": _RULE},
}
#: A configuration that sets every key the parser reads, optional objects included.
EVERY_SETTING: dict[str, Any] = {
    "stackName": "NodeHeal",
    "clusters": ["training-on-eks"],
    "eventBus": {"name": "nodeheal", "source": "nodeheal.exporter", "archiveRetentionDays": 14},
    "rule": {
        "conditions": [{"type": "GPUProblem", "statuses": ["True"]}],
        "nodeLabels": {"nodepool": ["gpu"]},
    },
    "ingest": {"staleEventSeconds": 900, "reservedConcurrency": 10},
    "mode": "dry-run",
    "policy": {
        **_OVERRIDES,
        "unknownAction": "alert",
        "rebootEscalationHours": 24,
        "maxAttemptsPerNode": 3,
        "attemptWindowHours": 24,
        "optOutLabel": "nodeheal.io/disabled",
        "nodePoolLabel": "karpenter.sh/nodepool",
        "nodePools": {"gpu": _OVERRIDES},
        "countedSignals": {key: signal.default.to_json() for key, signal in COUNTED_SIGNALS.items()},
    },
    "budgets": {},
    "drain": {
        "timeoutSeconds": 900,
        "evictionModes": [
            {"mode": "allow-completion", "namespaces": ["batch-*"], "podLabels": {"app": "trainer"}}
        ],
    },
    "reboot": {},
    "retry": {},
    "notifications": {
        "emails": ["sre@example.com"],
        "slack": {"workspaceId": "T0123ABCD", "channelId": "C0123ABCD"},
    },
    "observability": {},
    "lambdaNetwork": {
        "vpcId": "vpc-0123456789abcdef0",
        "availabilityZones": ["us-west-2a"],
        "subnetIds": ["subnet-0123456789abcdef0"],
        "securityGroupIds": ["sg-0123456789abcdef0"],
    },
    "security": {"kmsKeyArn": "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"},
    "workflow": {},
    "exporter": {},
}


def record_reads(every_setting: Mapping[str, Any] = EVERY_SETTING) -> list[SettingRead]:
    """Every read the deployment parser makes of ``every_setting``."""
    with recording_reads() as reads:
        NodeHealConfig.from_cdk_context(dict(every_setting), "")
    return list(reads)


def generalize(path: str) -> str:
    """``policy.nodePools.gpu.xidActions.79`` -> ``policy.nodePools.*.xidActions.*``;
    ``rule.conditions[0]`` -> ``rule.conditions[]``."""
    parts: list[str] = []
    for part in re.sub(r"\[\d+\]", ".[]", path).split("."):
        if part and ".".join(parts) in USER_KEYED:
            parts.append("*")
        elif part:
            parts.append(part)
    return ".".join(parts).replace(".[]", "[]")


def build_schema(reads: Sequence[SettingRead], descriptions: Mapping[str, str]) -> dict[str, Any]:
    """The JSON Schema of the ``nodeheal`` object the reads describe."""
    root: dict[str, Any] = _object()
    nodes: dict[str, dict[str, Any]] = {"": root}
    for read in reads:
        parent_path = generalize(read.path)
        parent = _node(nodes, parent_path)
        if read.kind == "finish":
            parent["additionalProperties"] = False
            continue
        path = generalize(f"{read.path}.{read.key}" if read.path else read.key)
        key = path.rsplit(".", 1)[-1]
        target = _properties_of(parent, parent_path)
        schema = target.get(key) or _schema_of(read)
        target[key] = schema
        nodes[path] = schema
        if read.kind == "each":
            nodes[f"{path}[]"] = schema["items"]
        if read.required and not _is_user_keyed(parent_path):
            required = parent.setdefault("required", [])
            if key not in required:
                required.append(key)
        if not read.required and read.default is not None and "default" not in schema:
            default = _json_default(read.default)
            if default is not None:
                schema["default"] = default
    _apply_value_schemas(nodes)
    _describe(root, "", descriptions)
    _allow_empty_optional_objects(root)
    return root


def document(reads: Sequence[SettingRead] | None = None, readme: Path | None = None) -> dict[str, Any]:
    """The schema of a whole cdk.json: ``context.nodeheal`` strict, every other key left to the CDK."""
    nodeheal = build_schema(
        record_reads() if reads is None else reads, readme_descriptions(readme or _readme())
    )
    return {
        "$schema": DIALECT,
        "$id": "https://nodeheal.io/schemas/cdk-json.schema.json",
        "title": "cdk.json of a NodeHeal deployment",
        "description": f"context.{CONTEXT_KEY} is NodeHeal's configuration (README, Configuration).",
        "type": "object",
        "properties": {
            "context": {
                "type": "object",
                "properties": {CONTEXT_KEY: nodeheal},
            }
        },
    }


def readme_descriptions(readme: Path) -> dict[str, str]:
    """``name -> meaning`` of the README's configuration table."""
    rows: dict[str, str] = {}
    in_table = False
    for line in readme.read_text(encoding="utf-8").splitlines():
        if line.startswith("| name | meaning | default |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells[1]
    return rows


def _readme() -> Path:
    return Path(__file__).resolve().parents[2] / "README.md"


def _node(nodes: dict[str, dict[str, Any]], path: str) -> dict[str, Any]:
    """The schema at ``path``; an entry of a user-keyed object read by a parser of its own (a
    condition rule) is created as that object's entry schema."""
    if path not in nodes:
        node = _object()
        owner = path.removesuffix(".*")
        if path.endswith(".*") and owner in nodes:
            nodes[owner].setdefault("__entries__", {})["*"] = node
        nodes[path] = node
    return nodes[path]


def _object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


def _is_user_keyed(path: str) -> bool:
    return path in USER_KEYED


def _properties_of(parent: dict[str, Any], parent_path: str) -> dict[str, Any]:
    """Where a key read under ``parent`` goes: its properties, or (for a user-keyed object) the
    schema every entry shares, kept under ``additionalProperties`` as ``{"*": schema}`` until
    :func:`_apply_value_schemas` unwraps it."""
    if _is_user_keyed(parent_path):
        entries: dict[str, Any] = parent.setdefault("__entries__", {})
        return entries
    properties: dict[str, Any] = parent.setdefault("properties", {})
    return properties


def _schema_of(read: SettingRead) -> dict[str, Any]:
    constraints = read.constraints
    if read.kind == "string":
        return {"type": "string"} if constraints.get("allow_empty") else {"type": "string", "minLength": 1}
    if read.kind == "optional_string":
        return {"type": ["string", "null"], "minLength": 1}
    if read.kind == "boolean":
        return {"type": "boolean"}
    if read.kind in ("integer", "number"):
        schema: dict[str, Any] = {"type": read.kind}
        if constraints.get("minimum") is not None:
            schema["minimum"] = constraints["minimum"]
        if constraints.get("maximum") is not None:
            schema["maximum"] = constraints["maximum"]
        return schema
    if read.kind == "choice":
        return {"enum": list(constraints["choices"])}
    if read.kind == "string_list":
        items = {"type": "array", "items": {"type": "string", "minLength": 1}}
        return {**items, "minItems": 1} if constraints.get("non_empty") else items
    if read.kind in ("mapping", "child"):
        return _object()
    if read.kind == "each":
        return {"type": "array", "items": _object()}
    raise ValueError(f"a settings read of unknown kind {read.kind!r}")


def _json_default(value: Any) -> Any:
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        converted = {str(k): _json_default(v) for k, v in value.items()}
        return None if any(v is None for v in converted.values()) else converted
    if isinstance(value, list | tuple):
        items = [_json_default(item) for item in value]
        return None if any(item is None for item in items) else items
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else None


def _apply_value_schemas(nodes: Mapping[str, dict[str, Any]]) -> None:
    for path, node in nodes.items():
        if path in USER_KEYED:
            entries = node.pop("__entries__", {})
            node.pop("properties", None)
            node.pop("additionalProperties", None)
            value = entries.get("*") or VALUE_SCHEMAS.get(f"{path}.*", {})
            key_schema = USER_KEYED[path]
            if "pattern" in key_schema:
                node["patternProperties"] = {key_schema["pattern"]: value}
                node["additionalProperties"] = False
            else:
                node["additionalProperties"] = value
                node["propertyNames"] = {"minLength": 1, "description": key_schema["description"]}
        elif path in VALUE_SCHEMAS:
            for key in ("type", "minLength"):
                node.pop(key, None)
            node.update(VALUE_SCHEMAS[path])


def _describe(schema: dict[str, Any], path: str, descriptions: Mapping[str, str]) -> None:
    if path in descriptions:
        markdown = descriptions[path]
        schema["markdownDescription"] = markdown
        schema["description"] = markdown.replace("`", "")
    for key, child in schema.get("properties", {}).items():
        _describe(child, f"{path}.{key}" if path else key, descriptions)


def _allow_empty_optional_objects(schema: dict[str, Any]) -> None:
    """``"slack": {}`` and ``"lambdaNetwork": {}`` mean "off": an object with required keys that
    may also be empty is one of the two."""
    for key, child in list(schema.get("properties", {}).items()):
        _allow_empty_optional_objects(child)
        if child.get("type") == "object" and child.get("required") and child.get("default") == {}:
            schema["properties"][key] = {
                key_: child[key_]
                for key_ in ("description", "markdownDescription", "default")
                if key_ in child
            } | {"anyOf": [{"type": "object", "maxProperties": 0}, _without_notes(child)]}


def _without_notes(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in ("description", "markdownDescription", "default")}


def render() -> str:
    return json.dumps(document(), indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
