"""The parts of NodeHeal's synthesized CloudFormation template the local pipeline reads, and a
resolver for the intrinsics CDK emits (Ref, Fn::GetAtt, Fn::Join) against local resources."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ACCOUNT_ID = "123456789012"


class TemplateError(Exception):
    """The synthesized template lacks something the local pipeline needs."""


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    logical_id: str
    handler: str
    environment: Mapping[str, Any]
    #: Logical id of the function's execution role.
    role: str = ""
    #: Cluster -> the Kubernetes groups the role's EKS access entry for that cluster names.
    kubernetes_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The function's Lambda timeout in seconds (Lambda's default when the template sets none).
    timeout_seconds: int = 3


@dataclass(frozen=True, slots=True)
class SynthesizedApp:
    """The parts of a synthesized NodeHeal template the local pipeline reads."""

    template: Mapping[str, Any]

    def resources(self, resource_type: str) -> dict[str, Mapping[str, Any]]:
        return {
            logical: resource
            for logical, resource in self.template.get("Resources", {}).items()
            if resource.get("Type") == resource_type
        }

    def single(self, resource_type: str) -> tuple[str, Mapping[str, Any]]:
        found = self.resources(resource_type)
        if len(found) != 1:
            raise TemplateError(f"expected exactly one {resource_type} in the template, found {len(found)}")
        return next(iter(found.items()))

    def functions(self) -> dict[str, FunctionSpec]:
        specs = {}
        groups = self._kubernetes_groups()
        for logical, resource in self.resources("AWS::Lambda::Function").items():
            properties = resource.get("Properties", {})
            handler = properties.get("Handler", "")
            if not isinstance(handler, str) or not handler.startswith("lambdas."):
                continue  # CDK's own helper functions (log retention, custom resources)
            role = _get_att_target(properties.get("Role"))
            specs[logical] = FunctionSpec(
                logical_id=logical,
                handler=handler,
                environment=properties.get("Environment", {}).get("Variables", {}),
                role=role,
                kubernetes_groups=groups.get(role, {}),
                timeout_seconds=int(properties.get("Timeout", 3)),
            )
        return specs

    def _kubernetes_groups(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """Role logical id -> cluster -> groups, from the EKS access entries."""
        groups: dict[str, dict[str, tuple[str, ...]]] = {}
        for resource in self.resources("AWS::EKS::AccessEntry").values():
            properties = resource.get("Properties", {})
            role = _get_att_target(properties.get("PrincipalArn"))
            cluster = str(properties.get("ClusterName", ""))
            groups.setdefault(role, {})[cluster] = tuple(properties.get("KubernetesGroups") or ())
        return groups

    @classmethod
    def synthesize(cls, nodeheal_context: Mapping[str, Any]) -> SynthesizedApp:
        """NodeHeal's stack synthesized in-process (no asset bundling, no network, no Docker), or
        the same template from an earlier synth (nodeheal.sim.stack.template_cache)."""
        from nodeheal.sim.stack.template_cache import cached_template

        return cls(template=cached_template(nodeheal_context, _synthesize_template))


def quiet_jsii() -> None:
    """Keep jsii's Node.js version banners (printed by its runtime when aws-cdk-lib is first
    imported, as raw bytes) out of NodeHeal's output: they say nothing about NodeHeal, and the
    supported Node.js versions are in the README. Call before importing aws_cdk or ``stacks``.
    The end-of-life variable lists the major versions to keep quiet about: 20, the oldest the
    README supports."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")


def _get_att_target(value: Any) -> str:
    """The logical id in ``{"Fn::GetAtt": [id, "Arn"]}``; empty for anything else."""
    if isinstance(value, Mapping) and isinstance(value.get("Fn::GetAtt"), list):
        return str(value["Fn::GetAtt"][0])
    return ""


class Resolver:
    """Resolves the CloudFormation intrinsics CDK emits to the moto resources' identifiers."""

    def __init__(self, region: str) -> None:
        self.region = region
        self.refs: dict[str, str] = {}
        self.attributes: dict[tuple[str, str], str] = {}

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, Mapping):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                return self._ref(str(argument))
            if key == "Fn::GetAtt":
                logical, attribute = argument if isinstance(argument, list) else str(argument).split(".", 1)
                try:
                    return self.attributes[(logical, attribute)]
                except KeyError:
                    raise TemplateError(f"cannot resolve Fn::GetAtt {logical}.{attribute}") from None
            if key == "Fn::Join":
                separator, parts = argument
                return str(separator).join(str(self.resolve(part)) for part in parts)
        return {key: self.resolve(item) for key, item in value.items()}

    def _ref(self, name: str) -> str:
        pseudo = {
            "AWS::Partition": "aws",
            "AWS::Region": self.region,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        try:
            return self.refs[name]
        except KeyError:
            raise TemplateError(f"cannot resolve Ref {name}") from None


def _synthesize_template(nodeheal_context: Mapping[str, Any]) -> Mapping[str, Any]:
    quiet_jsii()
    from aws_cdk import App

    from nodeheal.deploy_config import NodeHealConfig
    from stacks.nodeheal_stack import NodeHealStack

    config = NodeHealConfig.from_cdk_context(nodeheal_context)
    app = App(context={"aws:cdk:bundling-stacks": [], "nodeheal": dict(nodeheal_context)})
    stack = NodeHealStack(app, config.stack_name, config=config)
    template: Mapping[str, Any] = app.synth().get_stack_by_name(stack.stack_name).template
    return template
