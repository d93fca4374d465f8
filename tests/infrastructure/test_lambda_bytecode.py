"""The Lambda asset's bytecode (nodeheal.cdk.bytecode): compiled for the runtime's Python when this
machine has one, used by that Python without compiling, identical from one build to the next."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeheal.cdk import bytecode
from nodeheal.cdk.bytecode import (
    INTERPRETER_VARIABLE,
    LAMBDA_TASK_ROOT,
    UNCHECKED_HASH_FLAGS,
    BytecodeError,
    Compiler,
    find_compiler,
    identify,
    missing_bytecode,
    ship_bytecode,
)
from nodeheal.cdk.lambda_asset import PYTHON_VERSION, WHEELHOUSE, build, wheelhouse_is_current

RUNTIME_COMPILER = find_compiler(PYTHON_VERSION)
needs_wheelhouse = pytest.mark.skipif(
    not wheelhouse_is_current(WHEELHOUSE), reason="no Lambda wheelhouse: run `make lambda-deps`"
)


@pytest.fixture(scope="module")
def asset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Compiler]]:
    """The asset as a synth on this machine builds it, compiled for this interpreter if the
    runtime's Python is not here (the tests then check the mechanism, not the version)."""
    if not wheelhouse_is_current(WHEELHOUSE):
        pytest.skip("no Lambda wheelhouse: run `make lambda-deps`")
    directory = tmp_path_factory.mktemp("asset")
    compiler = RUNTIME_COMPILER or identify(sys.executable)
    result = build(directory, compiler=compiler)
    assert result.compiler == compiler
    yield directory, compiler


def _pyc_header(path: Path) -> tuple[bytes, int]:
    data = path.read_bytes()
    return data[:4], int.from_bytes(data[4:8], "little")


def test_every_module_of_the_asset_has_unchecked_hash_bytecode(asset: tuple[Path, Compiler]) -> None:
    directory, compiler = asset
    assert missing_bytecode(directory, compiler.cache_tag) == []
    pycs = bytecode.compiled_files(directory, compiler.cache_tag)
    assert len(pycs) == len(list(directory.rglob("*.py")))
    for pyc in pycs:
        magic, flags = _pyc_header(pyc)
        assert magic.hex() == compiler.magic_hex, pyc
        # Hash-based and unchecked: a zip's timestamps can never make Lambda ignore the file.
        assert flags == UNCHECKED_HASH_FLAGS, pyc


def test_the_code_names_the_files_where_lambda_unpacks_them(asset: tuple[Path, Compiler]) -> None:
    directory, compiler = asset
    probe = (
        "import marshal, sys; code = marshal.loads(open(sys.argv[1], 'rb').read()[16:]); "
        "print(code.co_filename)"
    )
    pyc = directory / "nodeheal" / "workflow" / "__pycache__" / f"guard.{compiler.cache_tag}.pyc"
    named = subprocess.run(
        [compiler.executable, "-I", "-c", probe, str(pyc)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert named == f"{LAMBDA_TASK_ROOT}/nodeheal/workflow/guard.py"


@needs_wheelhouse
def test_two_builds_of_the_same_sources_are_byte_identical(
    asset: tuple[Path, Compiler], tmp_path: Path
) -> None:
    """The asset's hash is its content's (AssetHashType.OUTPUT): bytecode that changed from one
    synth to the next would redeploy every function at every ``cdk deploy``."""
    first, compiler = asset
    build(tmp_path, compiler=compiler)
    mine = {path.relative_to(first): path.read_bytes() for path in first.rglob("*") if path.is_file()}
    again = {path.relative_to(tmp_path): path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    assert mine.keys() == again.keys()
    assert [name for name in mine if mine[name] != again[name]] == []


#: Imports modules of the asset and lists those that Python compiled from source on the way.
LOAD_PROBE = """
import importlib._bootstrap_external as external, json, sys
sys.path.insert(0, sys.argv[1])
compiled = []
original = external.SourceLoader.source_to_code
def source_to_code(self, data, path, *, _optimize=-1):
    compiled.append(path)
    return original(self, data, path, _optimize=_optimize)
external.SourceLoader.source_to_code = source_to_code
import aws_lambda_powertools.logging, nodeheal.config, nodeheal.workflow.state, nodeheal.workflow.guard
print(json.dumps({"compiled": [p for p in compiled if p.startswith(sys.argv[1])],
                  "loaded": nodeheal.config.__file__}))
"""


def test_the_runtimes_python_loads_the_bytecode_without_compiling(asset: tuple[Path, Compiler]) -> None:
    directory, compiler = asset
    completed = subprocess.run(
        # -I: no PYTHONPATH, no user site; the asset alone goes first on sys.path, as /var/task.
        [compiler.executable, "-I", "-c", LOAD_PROBE, str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["loaded"] == str(directory / "nodeheal" / "config.py")
    assert result["compiled"] == []


def test_a_named_interpreter_of_another_version_is_an_error(tmp_path: Path) -> None:
    other = "3.11" if sys.version_info[:2] != (3, 11) else "3.10"
    with pytest.raises(BytecodeError, match=rf"is Python {sys.version_info[0]}\.{sys.version_info[1]}"):
        find_compiler(other, environ={INTERPRETER_VARIABLE: sys.executable, "PATH": ""})


def test_a_named_interpreter_that_does_not_run_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BytecodeError, match="cannot run"):
        find_compiler("3.12", environ={INTERPRETER_VARIABLE: str(tmp_path / "python3.12"), "PATH": ""})


def test_a_broken_interpreter_on_path_is_passed_over(tmp_path: Path) -> None:
    """A pyenv shim answers ``python3.12: command not found`` unless that version is selected."""
    shim = tmp_path / "bin" / "python3.99"
    shim.parent.mkdir()
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.99: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    environ = {"PATH": str(shim.parent), "PYENV_ROOT": str(tmp_path / "no-pyenv")}
    assert find_compiler("3.99", environ=environ) is None


def test_a_version_pyenv_installed_is_found_newest_first(tmp_path: Path) -> None:
    root = tmp_path / "pyenv"
    for patch in ("1", "10", "2"):
        binary = root / "versions" / f"{sys.version_info[0]}.{sys.version_info[1]}.{patch}" / "bin"
        binary.mkdir(parents=True)
        link = binary / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        link.symlink_to(sys.executable)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = bytecode._candidates(version, {"PATH": "", "PYENV_ROOT": str(root)})
    assert [Path(c).parents[1].name for c in candidates] == [f"{version}.10", f"{version}.2", f"{version}.1"]


def test_without_a_compiler_the_asset_keeps_its_sources_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "module.py").write_text("VALUE = 1\n")
    monkeypatch.setattr(bytecode, "find_compiler", lambda version: None)
    result = ship_bytecode(tmp_path, "3.99")
    assert result.compiler is None and result.compiled_files == 0
    assert "no Python 3.99 here" in result.skipped_because
    assert INTERPRETER_VARIABLE in result.skipped_because
    assert not list(tmp_path.rglob("__pycache__"))


def test_a_module_that_does_not_compile_fails_the_build(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def (:\n")
    with pytest.raises(BytecodeError, match=r"broken\.py"):
        ship_bytecode(tmp_path, "unused", identify(sys.executable))
