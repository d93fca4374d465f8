"""Another team's CDK app uses NodeHeal from the built distribution, not from this checkout: the app
of the README's "Use NodeHeal in your own CDK app", synthesized by the CDK CLI from the README's own
cdk.json.

The test reads the section's code blocks (the bash block's ``pip wheel`` and ``pip install`` lines,
and the blocks marked as the app's ``app.py`` and ``cdk.json``). It builds the wheel with the
README's ``pip wheel`` command made offline (no build isolation, no index), unpacks it as pip would
install it, writes the two files into a directory outside the checkout and runs ``cdk synth`` there
(node_modules/.bin/cdk, offline, with the Makefile's environment). The ``python`` the README's
cdk.json runs is the virtualenv's with ``-S``: only the unpacked wheel and the virtualenv's
site-packages are importable, not the checkout (whose editable install is a .pth file that ``-S``
leaves unread). Bundling is real and offline: the Lambda asset is built from the wheelhouse of
``make lambda-deps`` (``NODEHEAL_WHEELHOUSE``) and the handlers the wheel carries, without Docker.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest

from nodeheal import stack_outputs
from nodeheal.cdk.lambda_asset import WHEELHOUSE
from nodeheal.cdk.workflow_tasks import ALL_TASKS
from tests.infrastructure.conftest import ROOT
from tests.infrastructure.test_cli import CDK, offline_environment

#: What a wheel is built from: setup.py copies lambdas/ into it, MANIFEST.in names it for an sdist.
DISTRIBUTION_SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "nodeheal", "lambdas")
SHARED_BUS = "platform-events"
SECTION = "## Use NodeHeal in your own CDK app"
#: The README's stand-in for the checkout in its install lines.
CHECKOUT = "/path/to/nodeheal"
#: The mark on the line before each of the app's files in the README's section.
APP_FILE_MARK = re.compile(
    r"^<!-- not runnable: (?P<file>\S+) of your app\b[^\n]*-->\n```\w*\n(?P<body>.*?)^```",
    re.MULTILINE | re.DOTALL,
)

pytestmark = [
    pytest.mark.skipif(
        not (WHEELHOUSE / "requirements.txt").exists(),
        reason=f"no Lambda wheelhouse at {WHEELHOUSE}: run `make lambda-deps` once (needs the package index)",
    ),
    pytest.mark.skipif(not CDK.exists(), reason="node_modules is absent: run `make bootstrap`"),
    # 43 s on the shared 2-core machine, 68 s when it is busy (the wheel a few seconds; cdk synth
    # with bundling the rest), about 36 s of CPU.
    pytest.mark.timeout(240),
]


def readme_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index(f"\n{SECTION}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end != -1 else len(readme)]


def readme_app_files() -> dict[str, str]:
    """The app's files, as the README shows them: file name -> content."""
    files = {match["file"]: match["body"] for match in APP_FILE_MARK.finditer(readme_section())}
    assert set(files) == {"app.py", "cdk.json"}, (
        f'the README\'s "{SECTION}" shows the app as two blocks, each marked '
        "`<!-- not runnable: FILE of your app; ... -->`: app.py and cdk.json"
    )
    return files


def readme_pip_commands() -> list[list[str]]:
    """The ``pip ...`` lines of the section's bash blocks, as argument lists (comments dropped)."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", readme_section(), flags=re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["pip"]:
                commands.append(words)
    return commands


def build_wheel(workdir: Path) -> Path:
    """The wheel, built by the README's ``pip wheel`` command with pip kept off the network."""
    source, dist = workdir / "source", workdir / "dist"
    source.mkdir()
    for name in DISTRIBUTION_SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    (readme_build,) = [words for words in readme_pip_commands() if words[1] == "wheel"]
    assert CHECKOUT in readme_build and "dist" in readme_build, readme_build
    places = {CHECKOUT: str(source), "dist": str(dist)}
    command = [sys.executable, "-m", *(places.get(word, word) for word in readme_build)]
    result = subprocess.run(
        [*command, "--no-build-isolation", "--no-index", "--disable-pip-version-check", "--quiet"],
        env=offline_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = dist.glob("nodeheal-*.whl")
    return wheel


def python_without_the_checkout(workdir: Path, site: Path) -> dict[str, str]:
    """The environment of a shell whose ``python`` sees the unpacked wheel and the virtualenv's
    packages, never the checkout."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
    python.chmod(0o755)
    importable = [str(site), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return offline_environment(
        PATH=f"{bin_dir}:{offline_environment()['PATH']}",
        PYTHONPATH=":".join(dict.fromkeys(importable)),
        NODEHEAL_WHEELHOUSE=str(WHEELHOUSE),
    )


def test_the_readme_app_synthesizes_with_the_cdk_cli_from_the_built_wheel(tmp_path: Path) -> None:
    assert not tmp_path.resolve().is_relative_to(ROOT.resolve())
    files = readme_app_files()
    wheel = build_wheel(tmp_path)
    # The README installs the wheel this command built, or the checkout, each with the cdk extra;
    # never a name from a package index, where NodeHeal is not.
    installs = [words[2:] for words in readme_pip_commands() if words[1] == "install"]
    assert installs == [[f"{CHECKOUT}[cdk]"], [f"dist/{wheel.name}[cdk]"]], installs
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

    app_dir = tmp_path / "platform-app"
    app_dir.mkdir()
    for name, content in files.items():
        (app_dir / name).write_text(content)
    environment = python_without_the_checkout(tmp_path, site)
    imported = subprocess.run(
        [
            "python",
            "-c",
            "import importlib.util, json, nodeheal; print(json.dumps([nodeheal.__file__, "
            "[m for m in ('stacks', 'lambdas') if importlib.util.find_spec(m)]]))",
        ],
        cwd=app_dir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    nodeheal_file, repository_modules = json.loads(imported.stdout)
    assert Path(nodeheal_file).resolve().is_relative_to(site.resolve())
    assert repository_modules == []

    # `cdk synth` in the app's directory, as the README says: the template on stdout and in cdk.out/.
    result = subprocess.run(
        [str(CDK), "synth", "--no-notices"],
        cwd=app_dir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Resources:" in result.stdout and "AWS::StepFunctions::StateMachine" in result.stdout
    outdir = app_dir / "cdk.out"
    template = json.loads((outdir / "PlatformStack.template.json").read_text())
    resources: dict[str, dict[str, Any]] = template["Resources"]

    def of_type(resource_type: str) -> list[dict[str, Any]]:
        return [resource for resource in resources.values() if resource["Type"] == resource_type]

    (machine,) = of_type("AWS::StepFunctions::StateMachine")
    assert machine["Properties"]["StateMachineName"] == "NodeHeal-remediation"
    # add_stack_outputs(): what `nodeheal doctor --stack PlatformStack` and the other commands read.
    assert set(stack_outputs.FIXED_OUTPUTS) <= set(template["Outputs"])
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
        f"NodeHeal-{spec.name}" for spec in ALL_TASKS
    }
    assert {function["Properties"]["Code"]["S3Key"] for function in functions} == {
        f"{asset.name.removeprefix('asset.')}.zip"
    }
    # The README's config says dry-run.
    assert {
        function["Properties"]["Environment"]["Variables"].get("NODEHEAL_MODE") for function in functions
    } >= {"dry-run"}
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
        "DescribeCapacityReservations",
        "DescribeInstances",
        "RebootInstances",
        "ReportInstanceStatus",
        "TerminateInstances",
    ]
    # The CDK code stays out of the functions' code (the asset has no aws_cdk to import it with).
    assert not (asset / "nodeheal" / "cdk").exists()
    assert not (asset / "aws_cdk").exists()
