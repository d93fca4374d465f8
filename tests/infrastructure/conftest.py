"""Synthesize the stack once per session and share the template, the assembly and the stack.

Synthesis runs in-process with the context of cdk.json (feature flags included) and the cdk-nag
AwsSolutions pack, exactly as app.py registers it; bundling is skipped so no wheelhouse is needed.

The session's stacks (default, keyed, full) are synthesized once per run, not once per
pytest-xdist worker: the first worker to need one synthesizes it under a lock and leaves its
template and validation report in the run's temporary directory, keyed by everything the synth
reads (nodeheal.sim.stack.template_cache.cache_key: the context, NodeHeal's sources, the CDK
versions); the other workers read them, and synthesize it themselves only if a test asks for the
jsii objects (the stack, the assembly).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Validations, cx_api
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from nodeheal.deploy_config import CONTEXT_KEY, NodeHealConfig
from nodeheal.sim.stack.template_cache import cache_key
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


class SharedSynthesized:
    """A stack another worker of the run synthesized: its template and validation report as that
    synth wrote them; the stack, the assembly and the assertions' Template made here on first use
    (the stack and the assembly by synthesizing the same context in this worker)."""

    def __init__(
        self,
        config: NodeHealConfig,
        template_json: dict[str, Any],
        report: dict[str, Any],
        outdir: Path,
        nodeheal_context: Mapping[str, Any] | None,
    ) -> None:
        self.config = config
        self.json = template_json
        self._report = report
        self._outdir = outdir
        self._context = nodeheal_context

    @functools.cached_property
    def _here(self) -> Synthesized:
        synthesized = synthesize(self._outdir, self._context)
        assert synthesized.json == self.json, "the same context synthesized a different template"
        return synthesized

    @property
    def stack(self) -> NodeHealStack:
        return self._here.stack

    @property
    def assembly(self) -> cx_api.CloudAssembly:
        return self._here.assembly

    @functools.cached_property
    def template(self) -> Template:
        return Template.from_json(self.json)

    resources = Synthesized.resources

    @property
    def validation_report(self) -> dict[str, Any]:
        return self._report


def _run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory of the whole run: each pytest-xdist worker's is a child of it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def synthesized_once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, nodeheal_context: Mapping[str, Any] | None = None
) -> Synthesized | SharedSynthesized:
    context = cdk_json_context()
    if nodeheal_context is not None:
        context[CONTEXT_KEY] = dict(nodeheal_context)
    shared = _run_directory(tmp_path_factory) / "synthesized-stacks"
    shared.mkdir(exist_ok=True)
    key = cache_key({"infrastructure-tests": context})
    template_file, report_file = shared / f"{key}.template.json", shared / f"{key}.validation-report.json"
    with (shared / f"{key}.lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
        if not report_file.exists():
            synthesized = synthesize(tmp_path_factory.mktemp(name), nodeheal_context)
            template_file.write_text(json.dumps(synthesized.json))
            # Written last: its presence says both files are whole.
            report_file.write_text(json.dumps(synthesized.validation_report))
            return synthesized
    return SharedSynthesized(
        config=NodeHealConfig.from_cdk_context(context[CONTEXT_KEY]),
        template_json=json.loads(template_file.read_text()),
        report=json.loads(report_file.read_text()),
        outdir=tmp_path_factory.mktemp(name),
        nodeheal_context=nodeheal_context,
    )


@pytest.fixture(scope="session")
def default_stack(tmp_path_factory: pytest.TempPathFactory) -> Synthesized | SharedSynthesized:
    """The stack exactly as cdk.json configures it."""
    return synthesized_once_per_run(tmp_path_factory, "default")


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
def keyed_stack(tmp_path_factory: pytest.TempPathFactory) -> Synthesized | SharedSynthesized:
    """The stack as cdk.json configures it, with a customer managed key."""
    return synthesized_once_per_run(tmp_path_factory, "keyed", keyed_context())


@pytest.fixture(scope="session")
def full_stack(tmp_path_factory: pytest.TempPathFactory) -> Synthesized | SharedSynthesized:
    return synthesized_once_per_run(tmp_path_factory, "full", FULL_CONTEXT)


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
