"""Synthesize the stack once per session and share the template, the assembly and the stack.

Synthesis runs in-process with the context of cdk.json (feature flags included) and the cdk-nag
AwsSolutions pack, exactly as app.py registers it; bundling is skipped so no wheelhouse is needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Validations, cx_api
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from nodeheal.deploy_config import CONTEXT_KEY, NodeHealConfig
from stacks.nodeheal_stack import NodeHealStack

ROOT = Path(__file__).resolve().parents[2]
CDK_JSON = json.loads((ROOT / "cdk.json").read_text())


@dataclass(frozen=True)
class Synthesized:
    config: NodeHealConfig
    stack: NodeHealStack
    assembly: cx_api.CloudAssembly
    template: Template
    #: The template as plain JSON, read once: every jsii call costs a round trip to node.
    json: dict[str, Any]

    def resources(self, resource_type: str) -> dict[str, Any]:
        return {
            logical_id: resource
            for logical_id, resource in self.json["Resources"].items()
            if resource["Type"] == resource_type
        }

    @property
    def validation_report(self) -> dict[str, Any]:
        return json.loads((Path(self.assembly.directory) / "validation-report.json").read_text())  # type: ignore[no-any-return]


def cdk_json_context() -> dict[str, Any]:
    return dict(CDK_JSON["context"])


def synthesize(outdir: Path, nodeheal_context: Mapping[str, Any] | None = None) -> Synthesized:
    context = cdk_json_context()
    if nodeheal_context is not None:
        context[CONTEXT_KEY] = dict(nodeheal_context)
    context["aws:cdk:bundling-stacks"] = []
    app = App(context=context, outdir=str(outdir))
    config = NodeHealConfig.from_cdk_context(app.node.try_get_context(CONTEXT_KEY))
    stack = NodeHealStack(app, config.stack_name, config=config)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    assembly = app.synth()
    template_json = assembly.get_stack_by_name(stack.stack_name).template
    return Synthesized(
        config=config,
        stack=stack,
        assembly=assembly,
        template=Template.from_json(template_json),
        json=template_json,
    )


@pytest.fixture(scope="session")
def default_stack(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack exactly as cdk.json configures it."""
    return synthesize(tmp_path_factory.mktemp("default"))


#: Two clusters, label filters, VPC placement, e-mails, a group prefix, node deletion after
#: terminate and a counted signal's own rule: every optional branch of the stack.
FULL_CONTEXT: dict[str, Any] = {
    "stackName": "NodeHealStaging",
    "clusters": ["training-a", "inference-b"],
    "eventBus": {"name": "nodeheal-staging", "source": "acme.nodeheal", "archiveRetentionDays": 0},
    "rule": {
        "conditions": [{"type": "GPUProblem", "statuses": ["True"]}],
        "nodeLabels": {"karpenter.sh/nodepool": ["gpu", "gpu-spot"]},
    },
    "ingest": {"staleEventSeconds": 30, "reservedConcurrency": 25},
    "notifications": {"emails": ["sre@example.com", "gpu-oncall@example.com"]},
    "lambdaNetwork": {
        "vpcId": "vpc-0123456789abcdef0",
        "availabilityZones": ["us-west-2a", "us-west-2b"],
        "subnetIds": ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"],
        "securityGroupIds": ["sg-0ccccccccccccccc3"],
    },
    "logRetentionDays": 45,
    "kubernetesGroupPrefix": "acme-nodeheal",
    "deleteNodeAfterTerminate": True,
    "policy": {"countedSignals": {"xid-92": {"count": 4, "windowHours": 12}}},
}


#: A customer managed key in the Region the tests synthesize for; the key ID is a made-up UUID.
CUSTOMER_KEY_ARN = "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def keyed_context() -> dict[str, Any]:
    """cdk.json as shipped, plus ``security.kmsKeyArn``."""
    return {**cdk_json_context()[CONTEXT_KEY], "security": {"kmsKeyArn": CUSTOMER_KEY_ARN}}


@pytest.fixture(scope="session")
def keyed_stack(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack as cdk.json configures it, with a customer managed key."""
    return synthesize(tmp_path_factory.mktemp("keyed"), keyed_context())


@pytest.fixture(scope="session")
def full_stack(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("full"), FULL_CONTEXT)


def function_resource(synthesized: Synthesized, task_name: str) -> dict[str, Any]:
    """The AWS::Lambda::Function of one task (functions are named ``<stack>-<task>``)."""
    name = f"{synthesized.config.stack_name}-{task_name}"
    matches = [
        resource
        for resource in synthesized.resources("AWS::Lambda::Function").values()
        if resource["Properties"].get("FunctionName") == name
    ]
    assert len(matches) == 1, f"expected one function named {name}, found {len(matches)}"
    return matches[0]


def role_logical_id(synthesized: Synthesized, task_name: str) -> str:
    role = function_resource(synthesized, task_name)["Properties"]["Role"]
    return str(role["Fn::GetAtt"][0])


def role_statements(synthesized: Synthesized, task_name: str) -> list[dict[str, Any]]:
    """Every statement of every policy attached to the task's role."""
    role_id = role_logical_id(synthesized, task_name)
    statements: list[dict[str, Any]] = []
    for policy in synthesized.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return statements


def actions_of(statement: Mapping[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def resources_of(statement: Mapping[str, Any]) -> list[Any]:
    resource = statement["Resource"]
    return list(resource) if isinstance(resource, list) else [resource]
