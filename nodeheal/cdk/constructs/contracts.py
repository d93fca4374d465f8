"""The event contract in the EventBridge Schema Registry: a registry of the stack's own, holding
the schemas of every event the exporter publishes (nodeheal/contracts: Node Condition Changed,
Node Event Observed, Exporter Heartbeat), so a consumer can browse them in the console and
download code bindings instead of reading NodeHeal's source. Every file of ``ALL_SCHEMAS`` is
published; a new detail type is published by adding its file there."""

from __future__ import annotations

import json

from aws_cdk import aws_eventschemas as eventschemas
from constructs import Construct

from nodeheal.contracts import ALL_SCHEMAS, load, registry_schema

#: The registry type EventBridge accepts for these documents (the other is OpenApi3).
SCHEMA_TYPE = "JSONSchemaDraft4"


class EventSchemasConstruct(Construct):
    def __init__(self, scope: Construct, id_: str, *, registry_name: str, source_prefix: str) -> None:
        super().__init__(scope, id_)
        self.registry = eventschemas.CfnRegistry(
            self,
            "Registry",
            registry_name=registry_name,
            description="NodeHeal's event contract: what the exporter puts on the bus",
        )
        self.schemas: dict[str, eventschemas.CfnSchema] = {}
        for file_name in ALL_SCHEMAS:
            document = registry_schema(file_name, source_prefix)
            schema = eventschemas.CfnSchema(
                self,
                _logical_id(file_name),
                registry_name=registry_name,
                schema_name=f"{source_prefix}@{_schema_name(file_name)}",
                type=SCHEMA_TYPE,
                description=load(file_name)["description"][:256],
                content=json.dumps(document, separators=(",", ":"), sort_keys=True),
            )
            schema.add_resource_dependency(self.registry)
            self.schemas[file_name] = schema


def _schema_name(file_name: str) -> str:
    """``node-condition-changed-1.1.json`` -> ``NodeConditionChanged-1.1``: the registry's own
    naming of discovered schemas is ``<source>@<DetailType>``."""
    stem = file_name.removesuffix(".json")
    words, _, version = stem.rpartition("-") if stem[-1].isdigit() else (stem, "", "")
    name = "".join(word.capitalize() for word in words.split("-"))
    return f"{name}-{version}" if version else name


def _logical_id(file_name: str) -> str:
    return _schema_name(file_name).replace("-", "V").replace(".", "")
