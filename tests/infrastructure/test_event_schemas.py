"""The event contract in the stack's EventBridge schema registry: one JSONSchemaDraft4 schema per
published document, each the same contract as nodeheal/contracts, describing the whole event."""

from __future__ import annotations

import json

from jsonschema import Draft4Validator

from nodeheal import contracts
from nodeheal.events import DETAIL_TYPE_CONDITION_CHANGED, DETAIL_TYPE_NODE_EVENT
from tests.infrastructure.conftest import Synthesized
from tests.unit.test_contract_schemas import a_detail, a_node_event_detail


def test_the_stack_publishes_every_contract_schema_in_its_own_registry(default_stack: Synthesized) -> None:
    ((registry_id, registry),) = default_stack.resources("AWS::EventSchemas::Registry").items()
    registry_name = registry["Properties"]["RegistryName"]
    assert registry_name == f"{default_stack.config.stack_name}-events"
    schemas = default_stack.resources("AWS::EventSchemas::Schema")
    assert len(schemas) == len(contracts.ALL_SCHEMAS)
    prefix = default_stack.config.event_source
    published = {}
    for resource in schemas.values():
        properties = resource["Properties"]
        assert properties["RegistryName"] == registry_name
        assert properties["Type"] == "JSONSchemaDraft4"
        assert registry_id in resource["DependsOn"]
        assert properties["SchemaName"].startswith(f"{prefix}@")
        published[properties["SchemaName"]] = json.loads(properties["Content"])
    for file_name in contracts.ALL_SCHEMAS:
        expected = contracts.registry_schema(file_name, prefix)
        assert expected in published.values(), f"{file_name} is not published as it is written"
    current = published[f"{prefix}@NodeConditionChanged-1.1"]
    Draft4Validator.check_schema(current)
    event = {
        "detail-type": DETAIL_TYPE_CONDITION_CHANGED,
        "source": f"{prefix}.{default_stack.config.clusters[0]}",
        "detail": a_detail(),
    }
    assert list(Draft4Validator(current).iter_errors(event)) == []
    node_events = published[f"{prefix}@NodeEventObserved-1.1"]
    Draft4Validator.check_schema(node_events)
    node_event = {
        "detail-type": DETAIL_TYPE_NODE_EVENT,
        "source": f"{prefix}.{default_stack.config.clusters[0]}",
        "detail": a_node_event_detail(),
    }
    assert list(Draft4Validator(node_events).iter_errors(node_event)) == []
    del node_event["detail"]["node"]["instanceID"]
    assert list(Draft4Validator(node_events).iter_errors(node_event))


def test_the_registry_name_is_a_stack_output(default_stack: Synthesized) -> None:
    output = default_stack.json["Outputs"]["SchemaRegistryName"]
    assert output["Value"] == {
        "Fn::GetAtt": [next(iter(default_stack.resources("AWS::EventSchemas::Registry"))), "RegistryName"]
    }
