"""The trimmed EC2 model of the Lambda asset (nodeheal.aws.service_models): the same requests and
answers as botocore's whole model for the operations NodeHeal calls, and no operation it does not."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore import xform_name
from botocore.loaders import create_loader
from moto import mock_aws

from nodeheal.aws import service_models
from nodeheal.aws.ec2 import Ec2Instances, ownership_tags
from nodeheal.aws.service_models import TRIMMED_OPERATIONS, trim_service_model, write_trimmed_models
from nodeheal.runtime import boto3_client_factory

ROOT = Path(__file__).resolve().parents[3]
REGION = "us-west-2"
CLUSTER = "training-on-eks"
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


def test_the_trimmed_model_keeps_the_operations_and_every_shape_they_reach_verbatim(
    full_ec2_model: dict[str, Any],
) -> None:
    trimmed = trim_service_model(full_ec2_model, TRIMMED_OPERATIONS["ec2"])
    assert sorted(trimmed["operations"]) == sorted(TRIMMED_OPERATIONS["ec2"])
    assert trimmed["metadata"] == full_ec2_model["metadata"]
    assert trimmed["version"] == full_ec2_model["version"]
    shapes = trimmed["shapes"]
    # Closed: every shape a kept operation or shape names is there.
    referenced = [
        op[key]["shape"] for op in trimmed["operations"].values() for key in ("input", "output") if key in op
    ]
    for shape in shapes.values():
        referenced += [member["shape"] for member in shape.get("members", {}).values()]
        referenced += [shape[key]["shape"] for key in ("member", "key", "value") if key in shape]
    assert set(referenced) <= set(shapes)
    # Verbatim but for the documentation strings.
    assert shapes["Instance"]["members"].keys() == full_ec2_model["shapes"]["Instance"]["members"].keys()
    assert "documentation" not in json.dumps(shapes)
    assert len(shapes) < len(full_ec2_model["shapes"]) / 10


def test_an_operation_the_model_lacks_is_refused(full_ec2_model: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="no operation\\(s\\) LaunchRockets"):
        trim_service_model(full_ec2_model, ["DescribeInstances", "LaunchRockets"])


def test_written_in_botocores_layout_for_its_latest_api_version(models: Path) -> None:
    version = create_loader().determine_latest_version("ec2", "service-2")
    assert [p.relative_to(models) for p in models.rglob("*.json")] == [Path(f"ec2/{version}/service-2.json")]


def test_the_factory_builds_ec2_from_the_trimmed_model_and_it_works_against_ec2(
    models: Path, aws: None
) -> None:
    ec2 = boto3_client_factory(REGION, models=models)("ec2")
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
    ec2 = boto3_client_factory(REGION)("ec2")
    assert "RunInstances" in ec2.meta.service_model.operation_names


def test_every_ec2_operation_nodeheal_calls_is_in_the_trimmed_model(full_ec2_model: dict[str, Any]) -> None:
    """A call to an operation the asset's model lacks would be an AttributeError in production
    only: the operations called on the EC2 client in the source must all be listed."""
    method_to_operation = {xform_name(name): name for name in full_ec2_model["operations"]}
    called: set[str] = set()
    for source in (ROOT / "nodeheal").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr in {"_ec2", "ec2"}
                and node.func.attr in method_to_operation
            ):
                called.add(method_to_operation[node.func.attr])
    assert called, "the scan found no EC2 call at all"
    assert called <= set(TRIMMED_OPERATIONS["ec2"]), called - set(TRIMMED_OPERATIONS["ec2"])
