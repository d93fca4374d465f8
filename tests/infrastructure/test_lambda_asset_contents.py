"""What the Lambda asset carries of the sources: the handlers and the nodeheal modules they import
(nodeheal.cdk.import_closure), enough for every handler to import, and nothing only the simulation,
the command line or the local harness runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeheal.cdk.bytecode import identify, missing_bytecode
from nodeheal.cdk.import_closure import (
    ImportClosureError,
    SourceModule,
    import_closure,
    package_modules,
    shipped_files,
)
from nodeheal.cdk.lambda_asset import (
    HANDLERS,
    WHEELHOUSE,
    LambdaAssetError,
    build,
    shipped_modules,
    shipped_sources,
    wheelhouse_is_current,
)

HANDLER_MODULES = sorted(f"lambdas.{path.stem}" for path in HANDLERS.glob("*.py") if path.stem != "__init__")
#: Modules of nodeheal that no function runs.
NEVER_SHIPPED = (
    "nodeheal/sim",
    "nodeheal/commands",
    "nodeheal/cli.py",
    "nodeheal/cdk",
    "nodeheal/__main__.py",
)

#: Imports every handler in an interpreter that sees the asset and this venv's installed packages
#: (for boto3 and botocore, which the runtime provides), and nothing of the checkout; prints where
#: each nodeheal module came from.
IMPORT_CHILD = """
import importlib, json, sys
asset, site_packages, modules = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path[:] = [asset, *sys.path[1:], site_packages]
for name in modules:
    importlib.import_module(name)
print(json.dumps(sorted(
    getattr(module, "__file__", None) or "" for name, module in sys.modules.items()
    if name.split(".")[0] in ("nodeheal", "lambdas")
)))
"""


@pytest.fixture(scope="module")
def asset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The asset, compiled for this interpreter (the one that imports it below)."""
    if not wheelhouse_is_current(WHEELHOUSE):
        pytest.skip("no Lambda wheelhouse: run `make lambda-deps`")
    directory = tmp_path_factory.mktemp("asset")
    build(directory, compiler=identify(sys.executable))
    yield directory


def test_the_asset_carries_nothing_the_functions_do_not_run(asset: Path) -> None:
    for path in NEVER_SHIPPED:
        assert not (asset / path).exists(), path
    # The fake Kubernetes API server and the local AWS harness, wherever they move to.
    assert not list((asset / "nodeheal").rglob("*apiserver*")), "the fake API server"
    assert not list((asset / "nodeheal").rglob("local_aws*")), "the local AWS harness"
    for source in (asset / "nodeheal").rglob("*.py"):
        assert "ThreadingHTTPServer" not in source.read_text(), source
    assert not (asset / "lambdas" / "requirements.txt").exists()
    # What every function needs is there: the handlers, the runtime, a package's data.
    assert {f"lambdas.{path.stem}" for path in (asset / "lambdas").glob("*.py")} >= set(HANDLER_MODULES)
    assert (asset / "nodeheal" / "runtime.py").is_file()
    assert (asset / "nodeheal" / "policy" / "xid_catalog.csv").is_file()


def test_what_is_shipped_has_its_bytecode(asset: Path) -> None:
    compiler = identify(sys.executable)
    assert missing_bytecode(asset / "nodeheal", compiler.cache_tag) == []
    assert missing_bytecode(asset / "lambdas", compiler.cache_tag) == []


def test_every_handler_imports_from_the_asset_alone(asset: Path) -> None:
    site_packages = sysconfig.get_paths()["purelib"]
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_METRICS_NAMESPACE": "NodeHeal",
    }
    # -I: no PYTHONPATH, no user site, not the working directory; -S: no site, so the .pth files of
    # this venv (an editable install of the checkout) are not read.
    completed = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            IMPORT_CHILD,
            str(asset),
            site_packages,
            json.dumps(HANDLER_MODULES),
        ],
        capture_output=True,
        text=True,
        cwd=asset,
        env=environment,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    files = json.loads(completed.stdout)
    assert files and all(file.startswith(str(asset)) for file in files if file), files


def test_the_shipped_modules_leave_out_the_simulation_and_the_command_line() -> None:
    names = set(shipped_modules())
    assert set(HANDLER_MODULES) <= names
    assert not any(name.startswith(("nodeheal.sim", "nodeheal.commands", "nodeheal.cdk")) for name in names)
    assert "nodeheal.cli" not in names
    assert all(source.is_file() for source in shipped_sources().values())


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture
def synthetic(tmp_path: Path) -> dict[str, Path]:
    """A handlers package and a library package: each kind of import the closure must follow."""
    _package(
        tmp_path / "handlers",
        {
            "__init__.py": "",
            "main.py": (
                "import importlib\n"
                "from typing import TYPE_CHECKING\n"
                "from lib import eager\n"
                "if TYPE_CHECKING:\n"
                "    from lib import typing_only\n"
                "else:\n"
                "    import lib.runtime_branch\n"
                "def handler(event, context):\n"
                "    from lib.deep import lazy\n"
                "    return importlib.import_module('lib.by_name')\n"
            ),
        },
    )
    _package(
        tmp_path / "lib",
        {
            "__init__.py": "",
            "data.csv": "a,b\n",
            "eager.py": "from . import relative\n",
            "relative.py": "from .deep import *\n",
            "typing_only.py": "",
            "runtime_branch.py": "",
            "by_name.py": "",
            "unused.py": "",
            "deep/__init__.py": "",
            "deep/lazy.py": "from ..sub.leaf import x\n",
            "deep/other.py": "",
            "sub/__init__.py": "",
            "sub/leaf.py": "x = 1\n",
            "sub/notes.txt": "",
        },
    )
    return {"handlers": tmp_path / "handlers", "lib": tmp_path / "lib"}


def test_the_closure_follows_lazy_relative_and_literal_imports(synthetic: dict[str, Path]) -> None:
    modules = import_closure(package_modules("handlers", synthetic["handlers"]), synthetic)
    assert set(modules) == {
        "handlers",
        "handlers.main",
        "lib",
        "lib.eager",
        "lib.relative",
        "lib.runtime_branch",
        "lib.by_name",
        "lib.deep",
        "lib.deep.lazy",  # imported only inside the handler function
        "lib.sub",  # the parent package of a module shipped
        "lib.sub.leaf",
    }
    files = {str(path) for path in shipped_files(modules.values(), synthetic)}
    assert {"lib/data.csv", "lib/sub/notes.txt", "lib/sub/__init__.py", "lib/deep/lazy.py"} <= files
    assert not {"lib/unused.py", "lib/typing_only.py", "lib/deep/other.py"} & files


def test_the_asset_ships_a_module_imported_only_inside_a_function(synthetic: dict[str, Path]) -> None:
    files = shipped_sources(synthetic, "handlers")
    assert Path("lib/deep/lazy.py") in files


def test_a_module_loaded_by_a_computed_name_fails_the_build(synthetic: dict[str, Path]) -> None:
    (synthetic["lib"] / "by_name.py").write_text(
        "import importlib\nNAME = 'lib.x'\nimportlib.import_module(NAME)\n"
    )
    with pytest.raises(ImportClosureError, match=r"by_name\.py:3: a module loaded by a computed name"):
        import_closure([SourceModule("lib.by_name", synthetic["lib"] / "by_name.py")], synthetic)
    with pytest.raises(LambdaAssetError, match="computed name"):
        shipped_sources(synthetic, "handlers")
