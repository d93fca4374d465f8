"""``pip install .`` gives a working ``nodeheal``: pyproject.toml declares what the code imports.

Static checks over the source (every import, at module level or inside a function) against the
declared dependencies, mapped from import names to distributions by the installed metadata, and
one run of the CLI in a fresh interpreter where the optional extras cannot be imported.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from nodeheal.cli import COMMAND_MODULES
from nodeheal.commands.extras import EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: The repository's own top-level packages: never a third-party import.
FIRST_PARTY = {"nodeheal", "stacks", "lambdas", "tests", "benchmarks", "app"}
#: Parts of the package the operator's CLI never imports: the local simulation (demo, simulate,
#: run from the checkout with the demo extra), the Lambda handlers' runtime support and the CDK
#: construct (the cdk extra).
NOT_THE_CLI = ("nodeheal/sim/", "nodeheal/lambda_support.py", "nodeheal/cdk/")
REQUIREMENT_FILES = ("requirements.txt", "requirements-dev.txt", "lambdas/requirements.txt")


def declared(*extras: str) -> set[str]:
    """Canonical names of the runtime dependencies plus those of ``extras`` (self-references expanded)."""
    names: set[str] = set()
    pending = list(PYPROJECT["dependencies"])
    for extra in extras:
        pending.extend(PYPROJECT["optional-dependencies"][extra])
    while pending:
        requirement = Requirement(pending.pop())
        if canonicalize_name(requirement.name) == "nodeheal":
            for extra in requirement.extras:
                pending.extend(PYPROJECT["optional-dependencies"][extra])
            continue
        names.add(canonicalize_name(requirement.name))
    return names


def third_party_imports(paths: Iterable[Path]) -> dict[str, set[str]]:
    """Top-level module -> the files importing it, for every import outside the stdlib and the repo."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in FIRST_PARTY or top == "__future__":
                    continue
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


@cache
def distributions_of(module: str) -> frozenset[str]:
    return frozenset(canonicalize_name(name) for name in packages_distributions().get(module, ()))


def uncovered(imports: dict[str, set[str]], allowed: set[str]) -> dict[str, list[str]]:
    return {
        module: sorted(files) for module, files in imports.items() if not distributions_of(module) & allowed
    }


def sources(*patterns: str) -> list[Path]:
    return sorted({path for pattern in patterns for path in ROOT.glob(pattern)})


def test_the_runtime_dependencies_cover_every_import_of_the_cli() -> None:
    cli = [p for p in sources("nodeheal/**/*.py") if not str(p.relative_to(ROOT)).startswith(NOT_THE_CLI)]
    imports = third_party_imports(cli)
    assert {"boto3", "botocore", "kubernetes", "urllib3"} <= set(imports), "the scan finds the CLI's imports"
    assert uncovered(imports, declared()) == {}


def test_the_extras_cover_the_cdk_app_the_handlers_and_the_simulation() -> None:
    imports = third_party_imports(sources("nodeheal/**/*.py", "stacks/**/*.py", "lambdas/**/*.py", "app.py"))
    assert {"aws_cdk", "moto", "aws_lambda_powertools"} <= set(imports)
    assert uncovered(imports, declared("cdk", "demo")) == {}
    cdk_app = third_party_imports(sources("nodeheal/cdk/**/*.py", "stacks/**/*.py", "app.py"))
    assert uncovered(cdk_app, declared("cdk")) == {}


def test_the_dev_extra_covers_the_tests_and_benchmarks() -> None:
    imports = third_party_imports(sources("tests/**/*.py", "benchmarks/**/*.py"))
    assert uncovered(imports, declared("dev")) == {}


def test_every_extra_module_the_commands_check_is_declared_in_that_extra() -> None:
    for extra, modules in EXTRA_MODULES.items():
        missing = [m for m in modules if not distributions_of(m) & declared(extra)]
        assert missing == [], f"extra {extra!r}"


def test_the_pinned_requirements_satisfy_the_declared_ranges() -> None:
    pins: dict[str, str] = {}
    for name in REQUIREMENT_FILES:
        for raw in (ROOT / name).read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line or line.startswith("-r"):
                continue
            requirement = Requirement(line)
            exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            pins[canonicalize_name(requirement.name)] = exact[0] if exact else ""
    everything = declared("dev")
    # Every declared distribution is installed at a version the tests ran, never picked by chance.
    assert sorted(everything - set(pins)) == []
    extras = [text for group in PYPROJECT["optional-dependencies"].values() for text in group]
    for text in [*PYPROJECT["dependencies"], *extras]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name == "nodeheal" or not pins.get(name):
            continue
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} (requirements) is outside {requirement.specifier} (pyproject.toml)"
        )


#: Runs the CLI as an installation without extras sees it: their modules cannot be imported.
PROBE = """
import contextlib, io, json, sys
for name in {blocked!r}:
    sys.modules[name] = None
from nodeheal.cli import main
results = {{}}
for argv in {runs!r}:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
    results[" ".join(argv)] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(results))
"""


def test_without_the_extras_every_operator_command_works_and_demo_names_its_extra(tmp_path: Path) -> None:
    blocked = sorted({m for modules in EXTRA_MODULES.values() for m in modules} | {"jsii"})
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps(
            {
                "schemaVersion": "1.1",
                "cluster": "training-on-eks",
                "node": {"name": "gpu-a", "uid": "0a6f1c2e-8d1b-4c55-9e2f-3b1d2c4e5f60"},
                "condition": {
                    "type": "GPUProblem",
                    "status": "True",
                    "reason": "GPUFellOffBus",
                    "message": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
                },
                "observedAt": "2026-11-21T10:00:01.234Z",
            }
        )
    )
    # A command module is named after the subcommand it registers, except where the subcommand's
    # name would hide the module's job.
    subcommand_of = {"rule_matching": "test-pattern", "doctor_report": "doctor"}
    modules = [module.rsplit(".", 1)[1] for module in COMMAND_MODULES]
    commands = [subcommand_of.get(module, module.replace("_", "-")) for module in modules]
    helps = [["--help"]] + [[command, "--help"] for command in commands]
    helps += [["breaker", "reset", "--help"], ["resume", "--help"]]
    runs = [
        *helps,
        ["explain", str(event), "--config", str(ROOT / "cdk.json"), "--json"],
        ["demo"],
        ["simulate"],
    ]
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(blocked=blocked, runs=runs)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    results = json.loads(completed.stdout)
    for argv in helps:
        code, out, err = results[" ".join(argv)]
        assert (code, err) == (0, ""), argv
        assert out.startswith("usage: nodeheal"), argv
    code, out, err = results[f"explain {event} --config {ROOT / 'cdk.json'} --json"]
    assert code == 0, err
    assert json.loads(out)["plannedAction"] == "replace"
    for command in ("demo", "simulate"):
        code, _, err = results[command]
        assert code == 2
        assert f"nodeheal {command} needs the 'demo' extra" in err
        assert "pip install -e '.[demo]'" in err


def pinned_versions(path: Path) -> dict[str, str]:
    """Canonical name -> pinned version of a requirements file (``-r`` lines not followed)."""
    found: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-r"):
            requirement = Requirement(line)
            exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            found[canonicalize_name(requirement.name)] = exact[0] if exact else ""
    return found


def test_prometheus_client_is_an_exporter_dependency_and_not_in_the_lambda_asset() -> None:
    image = pinned_versions(ROOT / "deploy" / "exporter" / "requirements.txt")
    repository = pinned_versions(ROOT / "requirements.txt")
    assert image["prometheus-client"] == repository["prometheus-client"]
    # The image's pins are the versions the tests ran.
    assert {name: repository.get(name) for name in image} == image
    assert "prometheus-client" in declared()
    # The Lambda asset is built from lambdas/requirements.txt alone (nodeheal/cdk/lambda_asset.py).
    assert "prometheus-client" not in pinned_versions(ROOT / "lambdas" / "requirements.txt")


#: Imports every handler module with prometheus_client unimportable, as in the Lambda asset.
LAMBDA_PROBE = """
import importlib, sys
sys.modules["prometheus_client"] = None
for name in {modules!r}:
    importlib.import_module(name)
print(sorted(m for m in sys.modules if m.startswith("nodeheal.exporter")))
"""


def test_no_lambda_handler_imports_the_exporters_metrics() -> None:
    modules = sorted(
        f"lambdas.{path.stem}" for path in (ROOT / "lambdas").glob("*.py") if path.stem != "__init__"
    )
    assert "lambdas.ingest" in modules
    completed = subprocess.run(
        [sys.executable, "-c", LAMBDA_PROBE.format(modules=modules)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "nodeheal.exporter.metrics" not in completed.stdout
