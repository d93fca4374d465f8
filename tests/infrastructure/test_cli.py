"""The real CDK CLI (node_modules/.bin/cdk) synthesizes app.py without Docker and without network.

The CLI always bundles on ``synth`` (it refuses ``-c aws:cdk:bundling-stacks=...`` from users), so
the full synth uses the wheelhouse from ``make lambda-deps`` and proves the whole packaging path.
The environment makes any Docker or network use fail loudly: ``CDK_DOCKER`` names a missing
binary and every proxy points at a closed local port.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from nodeheal.cdk.bytecode import find_compiler, missing_bytecode
from nodeheal.cdk.lambda_asset import PYTHON_VERSION, SOURCE_PACKAGES, WHEELHOUSE, directory_size
from tests.infrastructure.conftest import ROOT

CDK = ROOT / "node_modules" / ".bin" / "cdk"
#: Lambda's limit on the unzipped size of a function's code (bytes).
LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024

pytestmark = pytest.mark.skipif(not CDK.exists(), reason="node_modules is absent: run `make bootstrap`")


def offline_environment(**extra: str) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.lower().endswith("_proxy") and key not in ("NODEHEAL_WHEELHOUSE", "CDK_DOCKER")
    }
    closed = "http://127.0.0.1:9"
    environment.update(
        HTTP_PROXY=closed,
        HTTPS_PROXY=closed,
        http_proxy=closed,
        https_proxy=closed,
        NO_PROXY="",
        CDK_DOCKER=str(ROOT / "build" / "no-docker-here"),
        CDK_DISABLE_CLI_TELEMETRY="true",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION="1",
        **extra,
    )
    return environment


def cdk_synth(
    outdir: Path, *args: str, cwd: Path = ROOT, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CDK), "synth", "--quiet", "--no-notices", "--output", str(outdir), *args],
        cwd=cwd,
        env=offline_environment(**extra_env),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def make_synth(outdir: Path, log: Path) -> subprocess.CompletedProcess[str]:
    """``make synth`` as a person runs it, minus the set-up steps (tests/unit/test_makefile.py has
    those; here they would install into the checkout's own virtualenv)."""
    environment = {
        key: value
        for key, value in offline_environment().items()
        if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHON")
    }
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-o",
            "bootstrap",
            "-o",
            "lambda-deps",
            "synth",
            f"CDK_OUT={outdir}",
            f"SYNTH_LOG={log}",
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.skipif(
    not (WHEELHOUSE / "requirements.txt").exists(),
    reason=f"no Lambda wheelhouse at {WHEELHOUSE}: run `make lambda-deps` once (needs the package index)",
)
def test_make_synth_bundles_offline_without_docker_and_prints_a_short_summary(tmp_path: Path) -> None:
    out, log = tmp_path / "cdk.out", tmp_path / "cdk-synth.log"
    result = make_synth(out, log)
    assert result.returncode == 0, result.stdout + result.stderr
    # A summary, not the template: `cdk synth` alone prints thousands of lines of YAML.
    printed = (result.stdout + result.stderr).splitlines()
    assert len(printed) <= 20, printed
    assert result.stderr == ""
    assert re.fullmatch(rf"synth: cdk synth --output {re.escape(str(out))} \.\.\. \d+\.\d s", printed[0])
    template = json.loads((out / "NodeHeal.template.json").read_text())
    assert printed[1] == (
        f"stack NodeHeal: {out / 'NodeHeal.template.json'} ({len(template['Resources'])} resources, "
        f"{(out / 'NodeHeal.template.json').stat().st_size / 1000:.0f} KB)"
    )
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert any(f"{len(functions)} Function" in line for line in printed)
    (asset,) = [path for path in out.glob("asset.*") if path.is_dir()]
    code = next(line for line in printed if line.startswith("Lambda code: "))
    assert code.startswith(f"Lambda code: {asset}/ {directory_size(asset) / 1_000_000:.1f} MB unzipped")
    assert code.endswith(f"shared by {len(functions)} functions")
    assert "cdk's own messages" in printed[-2] and str(log) in printed[-2]
    assert printed[-1] == "deploy: npx cdk deploy NodeHeal"
    assert "Resources:" not in result.stdout  # no YAML
    assert any(r["Type"] == "AWS::StepFunctions::StateMachine" for r in template["Resources"].values())
    for package in (*SOURCE_PACKAGES, "aws_lambda_powertools", "urllib3"):
        assert (asset / package).is_dir(), package
    for provided_by_the_runtime in ("boto3", "botocore"):
        assert not (asset / provided_by_the_runtime).exists()
    # The functions reach the API server through nodeheal.kube.transport: the generated client
    # and what it pulls in would be dead weight in every cold start's code download.
    for never_imported in ("kubernetes", "pydantic", "pydantic_core", "aiohttp", "yaml"):
        assert not (asset / never_imported).exists(), never_imported
    # Bytecode for the runtime's Python when this machine has one (nodeheal.cdk.bytecode), and the
    # summary says which; never bytecode of another version, which the runtime would ignore.
    compiler = find_compiler(PYTHON_VERSION)
    bytecode_line = next(line for line in printed if line.startswith("Lambda bytecode: "))
    if compiler is None:
        assert not list(asset.rglob("__pycache__"))
        assert "none, each cold start compiles" in bytecode_line
    else:
        assert missing_bytecode(asset, compiler.cache_tag) == []
        assert {pyc.name.rsplit(".", 2)[-2] for pyc in asset.rglob("*.pyc")} == {compiler.cache_tag}
        assert bytecode_line.startswith(f"Lambda bytecode: {compiler.cache_tag}, ")
    assert list((asset / "botocore-models" / "ec2").glob("*/service-2.json"))  # service_models
    assert directory_size(asset) < LAMBDA_UNZIPPED_LIMIT


def test_missing_wheelhouse_is_one_clear_line(tmp_path: Path) -> None:
    empty = tmp_path / "wheelhouse"
    empty.mkdir()
    result = cdk_synth(tmp_path / "out", NODEHEAL_WHEELHOUSE=str(empty))
    assert result.returncode != 0
    assert "make lambda-deps" in result.stderr
    assert "Traceback" not in result.stderr


def test_configuration_error_is_one_clear_line(tmp_path: Path) -> None:
    # A user's cdk.json with a typo; the CLI passes -c values as strings, so it has to be a file.
    cdk_json = json.loads((ROOT / "cdk.json").read_text())
    cdk_json["app"] = f"{ROOT / '.venv' / 'bin' / 'python'} {ROOT / 'app.py'}"
    cdk_json["context"]["nodeheal"]["budgets"]["maxInflight"] = 3
    (tmp_path / "cdk.json").write_text(json.dumps(cdk_json))
    result = cdk_synth(tmp_path / "out", cwd=tmp_path)
    assert result.returncode != 0
    assert (
        "NodeHeal configuration error: unknown setting(s): nodeheal.budgets.maxInflight "
        "(did you mean 'maxInFlight'?)" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_synthesizing_commands_print_only_nodeheal_output(tmp_path: Path) -> None:
    """`test-pattern --config` synthesizes the stack in-process: jsii's Node.js version banners
    (printed as Python bytes) and CDK deprecation warnings must not reach the person reading the
    verdict, even when they have not set the JSII_SILENCE_* variables themselves."""
    from tests.unit.test_patterns_moto import condition_detail

    event = tmp_path / "xid79.json"
    event.write_text(json.dumps(condition_detail("GPUProblem", "True")))
    environment = {
        key: value for key, value in offline_environment().items() if not key.startswith("JSII_SILENCE_")
    }
    result = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "nodeheal"),
            "test-pattern",
            "--config",
            str(ROOT / "cdk.json"),
            str(event),
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "1 of 1 event(s) match at least one rule" in result.stdout, result.stdout
    for noise in ("b'!!", "end-of-life", "deprecated", "[WARNING]"):
        assert noise not in result.stderr and noise not in result.stdout, result.stderr
