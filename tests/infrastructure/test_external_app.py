"""Another team's CDK app uses NodeHeal from the built distribution, not from this checkout.

The test builds the wheel offline (no build isolation, no index), unpacks it as pip would install
it, and synthesizes a minimal app written outside the checkout that places ``NodeHeal`` in its own
stack with its own existing bus. The app runs with ``python -S``: only the unpacked wheel and the
virtualenv's site-packages are importable, not the checkout (whose editable install is a .pth file
that ``-S`` leaves unread). Bundling is real and offline: the Lambda asset is built from the
wheelhouse of ``make lambda-deps`` and the handlers the wheel carries, without Docker.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest

from nodeheal.cdk.lambda_asset import WHEELHOUSE
from tests.infrastructure.conftest import ROOT
from tests.infrastructure.test_cli import offline_environment

#: What a wheel is built from: setup.py copies lambdas/ into it, MANIFEST.in names it for an sdist.
DISTRIBUTION_SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "nodeheal", "lambdas")
SHARED_BUS = "platform-events"

APP = """
import json
import sys

from aws_cdk import App, Environment, Stack
from aws_cdk import aws_events as events

import nodeheal
from nodeheal.cdk import NodeHeal

outdir, wheelhouse = sys.argv[1], sys.argv[2]
app = App(outdir=outdir)
stack = Stack(app, "PlatformStack", env=Environment(account="111122223333", region="us-west-2"))
bus = events.EventBus.from_event_bus_name(stack, "SharedBus", "platform-events")
healer = NodeHeal(
    stack,
    "NodeHeal",
    config={"clusters": ["gpu-a"], "mode": "cordon-only"},
    event_bus=bus,
    lambda_wheelhouse=wheelhouse,
)
app.synth()
print(json.dumps({
    "nodeheal": nodeheal.__file__,
    "repository_modules": sorted(name for name in sys.modules if name.split(".")[0] in ("stacks", "lambdas")),
    "functions": sorted(healer.functions),
    "bus": healer.event_bus.event_bus_name,
}))
"""

pytestmark = [
    pytest.mark.skipif(
        not (WHEELHOUSE / "requirements.txt").exists(),
        reason=f"no Lambda wheelhouse at {WHEELHOUSE}: run `make lambda-deps` once (needs the package index)",
    ),
    # 43 s on the shared 2-core machine (the wheel about 6 s; synthesis with bundling the rest).
    pytest.mark.timeout(240),
]


def build_wheel(workdir: Path) -> Path:
    source, dist = workdir / "source", workdir / "dist"
    source.mkdir()
    for name in DISTRIBUTION_SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"),
            *("--disable-pip-version-check", "--quiet", "--wheel-dir", str(dist), str(source)),
        ],
        env=offline_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = dist.glob("nodeheal-*.whl")
    return wheel


def synthesize_app(site: Path, workdir: Path) -> tuple[dict[str, Any], Path]:
    app_dir, outdir = workdir / "platform-app", workdir / "cdk.out"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(APP)
    importable = [str(site), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    result = subprocess.run(
        [sys.executable, "-S", "app.py", str(outdir), str(WHEELHOUSE)],
        cwd=app_dir,
        env=offline_environment(PYTHONPATH=":".join(dict.fromkeys(importable))),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1]), outdir


def test_an_app_outside_the_checkout_synthesizes_nodeheal_from_the_wheel(tmp_path: Path) -> None:
    assert not tmp_path.resolve().is_relative_to(ROOT.resolve())
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        site = tmp_path / "site-packages"
        archive.extractall(site)
    # Only the nodeheal package: top-level `stacks` or `lambdas` would collide with the app's own.
    assert {name.split("/")[0] for name in names} == {"nodeheal", "nodeheal-0.1.0.dist-info"}
    assert "nodeheal/cdk/lambda_handlers/requirements.txt" in names
    assert "nodeheal/cdk/lambda_handlers/ingest.py" in names
    metadata = (site / "nodeheal-0.1.0.dist-info" / "METADATA").read_text()
    assert "Provides-Extra: cdk" in metadata
    assert "Requires-Dist: aws-cdk-lib" in metadata and "Requires-Dist: constructs" in metadata

    report, outdir = synthesize_app(site, tmp_path)

    assert Path(report["nodeheal"]).resolve().is_relative_to(site.resolve())
    assert report["repository_modules"] == []
    assert report["bus"] == SHARED_BUS
    template = json.loads((outdir / "PlatformStack.template.json").read_text())
    resources: dict[str, dict[str, Any]] = template["Resources"]

    def of_type(resource_type: str) -> list[dict[str, Any]]:
        return [resource for resource in resources.values() if resource["Type"] == resource_type]

    (machine,) = of_type("AWS::StepFunctions::StateMachine")
    assert machine["Properties"]["StateMachineName"] == "NodeHeal-remediation"
    # The app's bus is used, and no bus of NodeHeal's own is created.
    assert of_type("AWS::Events::EventBus") == []
    bus_rules = [rule for rule in of_type("AWS::Events::Rule") if "EventBusName" in rule["Properties"]]
    assert bus_rules and {rule["Properties"]["EventBusName"] for rule in bus_rules} == {SHARED_BUS}
    policies = of_type("AWS::Events::EventBusPolicy")
    assert policies and {policy["Properties"]["EventBusName"] for policy in policies} == {SHARED_BUS}
    assert "OnlyExportersPutEvents" not in {policy["Properties"]["StatementId"] for policy in policies}

    # One asset, bundled from the wheel's handlers and the wheelhouse, shared by every function.
    (asset,) = [path for path in outdir.glob("asset.*") if path.is_dir()]
    functions = of_type("AWS::Lambda::Function")
    assert {function["Properties"]["FunctionName"] for function in functions} == {
        f"NodeHeal-{name}" for name in report["functions"]
    }
    assert {function["Properties"]["Code"]["S3Key"] for function in functions} == {
        f"{asset.name.removeprefix('asset.')}.zip"
    }
    assert {
        function["Properties"]["Environment"]["Variables"].get("NODEHEAL_MODE") for function in functions
    } >= {"cordon-only"}
    assert sorted(path.name for path in (asset / "lambdas").glob("*.py")) == sorted(
        path.name for path in (ROOT / "lambdas").glob("*.py")
    )
    for package in ("nodeheal", "aws_lambda_powertools", "urllib3"):
        assert (asset / package).is_dir(), package
    # The functions talk to the API server through nodeheal.kube.transport (urllib3 only).
    for never_shipped in ("kubernetes", "pydantic", "yaml", "boto3", "botocore"):
        assert not (asset / never_shipped).exists(), never_shipped
    assert not list(asset.glob("kubernetes-*.dist-info"))
    # terminate and reboot build their EC2 client from the asset's trimmed model.
    (ec2_model,) = (asset / "botocore-models" / "ec2").glob("*/service-2.json")
    assert sorted(json.loads(ec2_model.read_text())["operations"]) == [
        "DescribeInstances",
        "RebootInstances",
        "TerminateInstances",
    ]
    # The CDK code stays out of the functions' code (the asset has no aws_cdk to import it with).
    assert not (asset / "nodeheal" / "cdk").exists()
    assert not (asset / "aws_cdk").exists()
