"""What the simulation reads from NodeHeal's synthesized template: the state machine's definition,
the task functions, the rule that feeds ingest and the finalizer's schedule."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeheal.sim.seeded.asl import StateMachine
from nodeheal.sim.stack.synthesized_app import FunctionSpec, SynthesizedApp, TemplateError

ACCOUNT = "123456789012"
REGION = "us-west-2"
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:NodeHealRemediation"
#: Values the simulation gives the references in the functions' environments.
_REFERENCE_VALUES = {
    "NODEHEAL_LEDGER_TABLE": "nodeheal-ledger",
    "NODEHEAL_TOPIC_ARN": f"arn:aws:sns:{REGION}:{ACCOUNT}:nodeheal",
    "NODEHEAL_STATE_MACHINE_ARN": STATE_MACHINE_ARN,
}

Handler = Callable[[dict[str, Any], Any], Any]


def function_arn(logical_id: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}"


@dataclass(frozen=True, slots=True)
class SimFunction:
    spec: FunctionSpec
    #: The environment as deployed, references replaced by the simulation's names.
    environment: Mapping[str, str]

    @property
    def name(self) -> str:
        """The handler's module name: admit, cordon, drain, ... ingest, finalize."""
        return self.spec.handler.split(".")[1]

    def handler(self) -> Handler:
        module, attribute = self.spec.handler.rsplit(".", 1)
        value: Handler = getattr(importlib.import_module(module), attribute)
        return value


@dataclass(frozen=True, slots=True)
class SimTemplate:
    machine: StateMachine
    definition: Mapping[str, Any]
    #: Function ARN (as the definition names it) -> function.
    functions: Mapping[str, SimFunction]
    ingest: SimFunction
    finalize: SimFunction
    #: The counting function the Node Event rule invokes (docs/architecture.md, D22).
    count_signals: SimFunction
    condition_pattern: Mapping[str, Any]
    sweep_seconds: int
    #: The ledger table's Properties (key schema, index), for the moto-backed sample.
    table: Mapping[str, Any]

    @classmethod
    def read(cls, app: SynthesizedApp) -> SimTemplate:
        functions = {
            logical: SimFunction(spec, _environment(spec)) for logical, spec in app.functions().items()
        }
        _, machine_resource = app.single("AWS::StepFunctions::StateMachine")
        definition = json.loads(_join(machine_resource["Properties"]["DefinitionString"]))
        by_arn = {function_arn(logical): function for logical, function in functions.items()}
        ingest = _the(functions, "lambdas.ingest.handler")
        finalize = _the(functions, "lambdas.finalize.handler")
        count_signals = _the(functions, "lambdas.count_signals.handler")
        pattern: Mapping[str, Any] | None = None
        sweep = 0
        for rule in app.resources("AWS::Events::Rule").values():
            properties = rule.get("Properties", {})
            targets = [t.get("Arn", {}).get("Fn::GetAtt", [""])[0] for t in properties.get("Targets", [])]
            event_pattern = properties.get("EventPattern") or {}
            if ingest.spec.logical_id in targets and "Node Condition Changed" in event_pattern.get(
                "detail-type", []
            ):
                pattern = event_pattern
            schedule = str(properties.get("ScheduleExpression") or "")
            if finalize.spec.logical_id in targets and schedule.startswith("rate("):
                amount, unit = schedule[5:-1].split()
                sweep = int(amount) * (
                    60 if unit.startswith("minute") else 3600 if unit.startswith("hour") else 1
                )
        if pattern is None:
            raise TemplateError("no rule sends Node Condition Changed events to the ingest function")
        return cls(
            machine=StateMachine.from_definition(definition),
            definition=definition,
            functions=by_arn,
            ingest=ingest,
            finalize=finalize,
            count_signals=count_signals,
            condition_pattern=pattern,
            sweep_seconds=sweep,
            table=app.single("AWS::DynamoDB::Table")[1]["Properties"],
        )


def _the(functions: Mapping[str, SimFunction], handler: str) -> SimFunction:
    found = [f for f in functions.values() if f.spec.handler == handler]
    if len(found) != 1:
        raise TemplateError(f"expected one function with handler {handler}, found {len(found)}")
    return found[0]


def _join(value: Any) -> str:
    """The definition string with every function ARN resolved to :func:`function_arn`."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(_join(part) for part in parts)
    if isinstance(value, Mapping) and "Fn::GetAtt" in value:
        return function_arn(str(value["Fn::GetAtt"][0]))
    raise TemplateError(f"cannot resolve {value!r} in the state machine definition")


def _environment(spec: FunctionSpec) -> dict[str, str]:
    environment = {}
    for key, value in spec.environment.items():
        environment[key] = (
            value if isinstance(value, str) else _REFERENCE_VALUES.get(key, f"sim-{key.lower()}")
        )
    environment["AWS_REGION"] = REGION
    return environment
