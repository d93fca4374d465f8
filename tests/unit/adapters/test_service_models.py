"""The trimmed service models of the Lambda asset (nodeheal.aws.service_models): the same requests
and answers as botocore's whole model for the operations NodeHeal calls, and no operation it does not."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore import xform_name
from botocore.loaders import create_loader
from moto import mock_aws

from nodeheal.aws import service_models
from nodeheal.aws.ec2 import Ec2Instances
from nodeheal.aws.service_models import (
    TRIMMED_OPERATIONS,
    trim_service_model,
    without_documentation,
    write_trimmed_models,
)
from nodeheal.instances import ownership_tags
from nodeheal.runtime import aws_client_factory
from tests.unit.workflow.fakes import CLUSTER

ROOT = Path(__file__).resolve().parents[3]
REGION = "us-west-2"
MOTO_AMI = "ami-12c6146b"


@pytest.fixture(scope="module")
def full_ec2_model() -> dict[str, Any]:
    loader = create_loader()
    version = loader.determine_latest_version("ec2", "service-2")
    model: dict[str, Any] = loader.load_service_model("ec2", "service-2", api_version=version)
    return model


@pytest.fixture
def models(tmp_path: Path) -> Path:
    write_trimmed_models(tmp_path)
    return tmp_path


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)
    with mock_aws():
        yield


def full_model(service: str) -> dict[str, Any]:
    loader = create_loader()
    version = loader.determine_latest_version(service, "service-2")
    model: dict[str, Any] = loader.load_service_model(service, "service-2", api_version=version)
    return model


@pytest.mark.parametrize("service", sorted(TRIMMED_OPERATIONS))
def test_the_trimmed_model_keeps_the_operations_and_every_shape_they_reach_verbatim(service: str) -> None:
    whole = full_model(service)
    trimmed = trim_service_model(whole, TRIMMED_OPERATIONS[service])
    assert sorted(trimmed["operations"]) == sorted(TRIMMED_OPERATIONS[service])
    assert trimmed["metadata"] == whole["metadata"]
    assert trimmed["version"] == whole["version"]
    shapes = trimmed["shapes"]
    # Closed: every shape a kept operation or shape names is there.
    referenced = [
        op[key]["shape"] for op in trimmed["operations"].values() for key in ("input", "output") if key in op
    ]
    referenced += [error["shape"] for op in trimmed["operations"].values() for error in op.get("errors", [])]
    for shape in shapes.values():
        referenced += [member["shape"] for member in shape.get("members", {}).values()]
        referenced += [shape[key]["shape"] for key in ("member", "key", "value") if key in shape]
    assert set(referenced) <= set(shapes)
    # Verbatim but for the documentation strings.
    for name, shape in shapes.items():
        assert shape == without_documentation(whole["shapes"][name])
    assert "documentation" not in json.dumps(shapes)
    assert len(json.dumps(trimmed)) < len(json.dumps(whole)) / 2


def test_an_operation_the_model_lacks_is_refused(full_ec2_model: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="no operation\\(s\\) LaunchRockets"):
        trim_service_model(full_ec2_model, ["DescribeInstances", "LaunchRockets"])


def test_written_in_botocores_layout_for_its_latest_api_version(models: Path) -> None:
    loader = create_loader()
    assert sorted(p.relative_to(models) for p in models.rglob("*.json")) == sorted(
        Path(f"{service}/{loader.determine_latest_version(service, 'service-2')}/service-2.json")
        for service in TRIMMED_OPERATIONS
    )


def test_the_factory_builds_ec2_from_the_trimmed_model_and_it_works_against_ec2(
    models: Path, aws: None
) -> None:
    ec2 = aws_client_factory(REGION, models=models)("ec2")
    assert sorted(ec2.meta.service_model.operation_names) == sorted(TRIMMED_OPERATIONS["ec2"])
    launcher = boto3.client("ec2", region_name=REGION)  # botocore's whole model
    tags = [{"Key": key, "Value": value} for key, value in ownership_tags(CLUSTER).items()][:1]
    launched = launcher.run_instances(
        ImageId=MOTO_AMI,
        MinCount=1,
        MaxCount=1,
        InstanceType="p5.48xlarge",
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    instance_id = launched["Instances"][0]["InstanceId"]

    trimmed_answer = ec2.describe_instances(InstanceIds=[instance_id])
    full_answer = launcher.describe_instances(InstanceIds=[instance_id])
    trimmed_answer.pop("ResponseMetadata")
    full_answer.pop("ResponseMetadata")
    assert trimmed_answer == full_answer  # parsed by the same shapes

    instances = Ec2Instances(ec2)
    view = instances.describe(instance_id)
    assert view is not None and view.state == "running"
    instances.reboot(instance_id)
    instances.terminate(instance_id)
    assert launcher.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"][
        "Name"
    ] in {"shutting-down", "terminated"}


def test_without_a_models_directory_the_factory_uses_botocores_whole_model(aws: None) -> None:
    assert service_models.bundled_models_directory(ROOT) is None  # a checkout is not an asset
    ec2 = aws_client_factory(REGION)("ec2")
    assert "RunInstances" in ec2.meta.service_model.operation_names


#: Every module whose code calls a client of a trimmed service from a Lambda function: the
#: attribute that holds the client there, and its service.
CLIENT_HOLDERS: dict[str, tuple[str, str]] = {
    "nodeheal/aws/ec2.py": ("_ec2", "ec2"),
    "nodeheal/aws/ledger.py": ("_client", "dynamodb"),
    "nodeheal/aws/notify.py": ("_sns", "sns"),
    "nodeheal/aws/executions.py": ("_client", "stepfunctions"),
    "nodeheal/runtime.py": ("_client", "stepfunctions"),
    "nodeheal/kube/eks_auth.py": ("_eks", "eks"),
}
CLIENT_ATTRIBUTES = {attribute for attribute, _ in CLIENT_HOLDERS.values()}


def _client_calls(source: Path, attribute: str) -> set[str]:
    """Method names called on ``self.<attribute>``, and the paginators it hands out (as the
    method names of their operations)."""
    called: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == attribute
        ):
            continue
        if node.func.attr == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
            called.add(str(node.args[0].value))
        else:
            called.add(node.func.attr)
    return called


@pytest.mark.parametrize("service", sorted(TRIMMED_OPERATIONS))
def test_every_operation_the_functions_call_is_in_the_trimmed_model_and_no_other(service: str) -> None:
    """A call to an operation the asset's model lacks would be an AttributeError in production
    only: the operations called on the service's client in the source must all be listed."""
    method_to_operation = {xform_name(name): name for name in full_model(service)["operations"]}
    called: set[str] = set()
    for module, (attribute, holder_service) in CLIENT_HOLDERS.items():
        if holder_service == service:
            methods = _client_calls(ROOT / module, attribute) - {"exceptions", "meta"}
            unknown = methods - set(method_to_operation)
            assert not unknown, f"{module} calls {unknown} on its {service} client"
            called |= {method_to_operation[method] for method in methods}
    assert called == set(TRIMMED_OPERATIONS[service])


#: The adapters the runtime imports on first use, next to what the handler modules import.
RUNTIME_ADAPTERS = (
    "nodeheal.aws.ec2",
    "nodeheal.aws.executions",
    "nodeheal.aws.ledger",
    "nodeheal.aws.notify",
    "nodeheal.kube.client",
    "nodeheal.runtime",
)


def test_every_module_the_functions_run_that_calls_a_client_is_scanned() -> None:
    modules = [f"lambdas.{path.stem}" for path in (ROOT / "lambdas").glob("*.py") if path.stem != "__init__"]
    probe = (
        "import importlib, json, sys\n"
        f"for name in {[*modules, *RUNTIME_ADAPTERS]!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(getattr(m, '__file__', None) or '' for n, m in list(sys.modules.items())"
        " if n.startswith('nodeheal'))))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = [Path(file).relative_to(ROOT).as_posix() for file in json.loads(completed.stdout) if file]
    assert set(CLIENT_HOLDERS) <= set(loaded)
    unscanned = {
        module
        for module in loaded
        if module not in CLIENT_HOLDERS
        and any(_client_calls(ROOT / module, attribute) for attribute in CLIENT_ATTRIBUTES)
    }
    assert not unscanned, f"these modules call a client the scan does not know: {unscanned}"
