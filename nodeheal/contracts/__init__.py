"""JSON Schemas of what NodeHeal puts on the bus, for the people who code against it.

The files beside this module are the published contract: the ``detail`` of a ``Node Condition
Changed`` event (contract 1.1, and the legacy "1" accepted until 0.2.0, D9 in docs/architecture.md),
of a ``Node Event Observed`` (contract 1.1, written by
:func:`nodeheal.exporter.node_events.node_event_detail`) and of an ``Exporter Heartbeat``. They are
JSON Schema draft 4 because that is the dialect the EventBridge Schema Registry accepts
(``JSONSchemaDraft4``), and the stack publishes the same documents there (:func:`registry_schema`),
so a consumer can generate code bindings from the registry.

The Python parsers in :mod:`nodeheal.events` stay the authority at ingest; the schemas say what a
producer must send. Every document a schema accepts, the parser accepts too (tested in
``tests/unit/test_contract_schemas.py``), and the schema names every problem at once where the
parser stops at the first, which is what ``nodeheal explain`` shows for a hand-written event. The
Node Event schema is held there against what the exporter's shipper really sends.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from nodeheal.events import (
    DETAIL_TYPE_CONDITION_CHANGED,
    DETAIL_TYPE_EXPORTER_HEARTBEAT,
    DETAIL_TYPE_NODE_EVENT,
    LEGACY_SCHEMA_VERSION,
    SCHEMA_VERSION,
)

#: Schema file of each (detail type, schemaVersion) NodeHeal publishes.
CONDITION_CHANGED_SCHEMAS = {
    SCHEMA_VERSION: "node-condition-changed-1.1.json",
    LEGACY_SCHEMA_VERSION: "node-condition-changed-1.json",
}
HEARTBEAT_SCHEMA = "exporter-heartbeat.json"
#: The ``Node Event Observed`` detail. Its schemaVersion is the exporter's contract version, the
#: same "1.1" its condition events carry; there was never a published "1" of it.
NODE_EVENT_SCHEMA = "node-event-observed-1.1.json"
#: The schemas' timestamps: RFC 3339 with a zone, as :func:`nodeheal.timestamps.parse_timestamp`
#: accepts them (a naive time is ambiguous and refused).
TIMESTAMP_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
#: Every schema file of the package, in the order the stack publishes them.
ALL_SCHEMAS = (*CONDITION_CHANGED_SCHEMAS.values(), HEARTBEAT_SCHEMA, NODE_EVENT_SCHEMA)


@cache
def _load(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def load(name: str) -> dict[str, Any]:
    """A fresh copy of one schema document (callers may change it)."""
    if name not in ALL_SCHEMAS:
        raise KeyError(f"no contract schema {name!r}; known: {', '.join(ALL_SCHEMAS)}")
    document: dict[str, Any] = json.loads(_load(name))
    return document


def condition_changed_schema(detail: Any) -> str:
    """The schema a ``Node Condition Changed`` detail claims by its schemaVersion (1.1 if unknown:
    the current contract is what a producer should be told to meet)."""
    version = detail.get("schemaVersion") if isinstance(detail, dict) else None
    return CONDITION_CHANGED_SCHEMAS.get(
        version if isinstance(version, str) else "", CONDITION_CHANGED_SCHEMAS[SCHEMA_VERSION]
    )


def violations(name: str, document: Any) -> list[str]:
    """Every way ``document`` breaks the schema, as ``path: problem`` lines (empty if valid).

    jsonschema is imported here, not at module level: the Lambda asset carries this package but not
    jsonschema, and no function validates against these files (the parsers do that at ingest).
    """
    from jsonschema import Draft4Validator  # type: ignore[import-untyped]

    validator = Draft4Validator(load(name))
    problems = sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path))
    return [f"{_path(error.absolute_path)}: {_say(error)}" for error in problems]


#: What the schemas' patterns mean, said instead of the regular expression.
_PATTERN_MEANINGS = {
    r"\S": "must not be empty",
    TIMESTAMP_PATTERN: "must be an RFC 3339 timestamp with a time zone, like 2026-11-21T10:00:00.123Z",
}


def _say(error: Any) -> str:
    if error.validator == "pattern" and error.validator_value in _PATTERN_MEANINGS:
        return f"{error.instance!r} {_PATTERN_MEANINGS[error.validator_value]}"
    return str(error.message)


def _path(parts: Any) -> str:
    text = "detail"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


#: The detail type of each schema, for the registry's envelope.
_DETAIL_TYPES = {
    **dict.fromkeys(CONDITION_CHANGED_SCHEMAS.values(), DETAIL_TYPE_CONDITION_CHANGED),
    HEARTBEAT_SCHEMA: DETAIL_TYPE_EXPORTER_HEARTBEAT,
    NODE_EVENT_SCHEMA: DETAIL_TYPE_NODE_EVENT,
}


def registry_schema(name: str, source_prefix: str) -> dict[str, Any]:
    """The whole EventBridge event (envelope and detail) as the Schema Registry describes events:
    ``detail-type`` fixed, ``source`` the exporter's (``<prefix>.<cluster>``, or the bare prefix
    of the legacy contract), ``detail`` the contract schema."""
    detail = load(name)
    dialect = detail.pop("$schema")
    detail.pop("id", None)
    legacy = name == CONDITION_CHANGED_SCHEMAS[LEGACY_SCHEMA_VERSION]
    escaped = source_prefix.replace(".", "\\.")
    return {
        "$schema": dialect,
        "title": detail["title"],
        "description": detail["description"],
        "type": "object",
        "required": ["detail-type", "source", "detail"],
        "properties": {
            "version": {"type": "string"},
            "id": {"type": "string"},
            "detail-type": {"type": "string", "enum": [_DETAIL_TYPES[name]]},
            "source": {
                "type": "string",
                "pattern": f"^{escaped}$" if legacy else f"^{escaped}\\..+$",
            },
            "account": {"type": "string"},
            "time": {"type": "string", "format": "date-time"},
            "region": {"type": "string"},
            "resources": {"type": "array", "items": {"type": "string"}},
            "detail": detail,
        },
    }
