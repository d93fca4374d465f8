"""Bytecode for the Lambda asset, so a cold function loads its modules instead of compiling them.

A Lambda function's code directory is read-only: Python cannot write the ``__pycache__`` it
would keep anywhere else, so a function whose asset carries only sources compiles every module it
imports at every cold start (measured by ``benchmarks/cold_start.py``: about 110 ms for NodeHeal's
own modules and 45 ms for Powertools, more than the rest of the import). The asset therefore
carries ``__pycache__/*.cpython-312.pyc`` files next to its sources, compiled by a CPython of the
runtime's version.

The files are *unchecked hash-based* pycs (PEP 552): the interpreter uses them without comparing
them with the source's modification time, which a zip archive does not preserve (CDK writes fixed
timestamps so that an unchanged asset hashes the same). The asset is immutable once built, so
nothing can make them stale; a source edited in the Lambda console would be ignored in favour of its
pyc, which is why the asset is rebuilt, never edited. Files are compiled in one process, in sorted
order, under the names they have on Lambda (``/var/task/...``, not the temporary bundling
directory), so the same sources give the same bytes and an unchanged asset keeps its hash.

Bytecode is specific to a minor version. The compiler is ``NODEHEAL_BYTECODE_PYTHON`` when set,
else this interpreter when it is the runtime's version, else ``python3.12`` on ``PATH``, else a 3.12
that pyenv has installed; with none, the asset carries sources only (it works, and each cold start
costs the compile) and the build says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Names a CPython of a given version to compile with (an explicit choice: it must be that version).
INTERPRETER_VARIABLE = "NODEHEAL_BYTECODE_PYTHON"

#: Asks an interpreter for its version and the pyc tag and magic number it writes.
_IDENTIFY = (
    "import sys, importlib.util, json; print(json.dumps("
    "[sys.version_info[:2], sys.implementation.cache_tag, importlib.util.MAGIC_NUMBER.hex()]))"
)

#: Where Lambda unpacks a function's code (``LAMBDA_TASK_ROOT``).
LAMBDA_TASK_ROOT = "/var/task"

#: PEP 552 flags word of an unchecked hash-based pyc: bit 0 hash-based, bit 1 check_source unset.
UNCHECKED_HASH_FLAGS = 0b01


class BytecodeError(RuntimeError):
    """Bytecode was asked for and could not be compiled as asked."""


@dataclass(frozen=True, slots=True)
class Compiler:
    """A CPython that compiles bytecode for one minor version."""

    executable: str
    version: tuple[int, int]
    #: ``sys.implementation.cache_tag``: the pyc file names' middle part, e.g. ``cpython-312``.
    cache_tag: str
    magic_hex: str

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


@dataclass(frozen=True, slots=True)
class BytecodeResult:
    """What the build shipped, for its report."""

    compiler: Compiler | None
    compiled_files: int
    #: Why there is no bytecode ("" when there is).
    skipped_because: str = ""


def identify(executable: str) -> Compiler:
    """The interpreter at ``executable``, as it reports itself; BytecodeError if it cannot run."""
    try:
        completed = subprocess.run(
            [executable, "-I", "-c", _IDENTIFY], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as exc:
        raise BytecodeError(f"cannot run {executable}: {exc}") from exc
    if completed.returncode != 0:
        raise BytecodeError(f"{executable} failed to report its version: {completed.stderr.strip()}")
    (major, minor), cache_tag, magic_hex = json.loads(completed.stdout)
    return Compiler(executable, (int(major), int(minor)), str(cache_tag), str(magic_hex))


def find_compiler(version: str, *, environ: Mapping[str, str] | None = None) -> Compiler | None:
    """A CPython of ``version`` (``"3.12"``) to compile with, or None when this machine has none.

    ``NODEHEAL_BYTECODE_PYTHON``, when set, must name one: a wrong version there is an error, not
    a silent fallback to sources.
    """
    env = os.environ if environ is None else environ
    wanted = tuple(int(part) for part in version.split("."))
    named = env.get(INTERPRETER_VARIABLE, "").strip()
    if named:
        compiler = identify(named)
        if compiler.version != wanted:
            raise BytecodeError(
                f"{INTERPRETER_VARIABLE}={named} is Python {compiler.version_text}; "
                f"the Lambda runtime runs Python {version}"
            )
        return compiler
    if sys.version_info[:2] == wanted and sys.implementation.name == "cpython":
        return identify(sys.executable)
    for candidate in _candidates(version, env):
        try:
            compiler = identify(candidate)
        except BytecodeError:
            continue  # e.g. a pyenv shim for a version that is installed but not selected
        if compiler.version == wanted:
            return compiler
    return None


def _candidates(version: str, env: Mapping[str, str]) -> list[str]:
    """``python3.12`` on PATH, then the 3.12 interpreters pyenv has installed (newest first):
    pyenv's shim answers only for the versions selected in the current directory."""
    found = [path for path in [shutil.which(f"python{version}", path=env.get("PATH"))] if path]
    pyenv_root = Path(env.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installed = sorted(
        (pyenv_root / "versions").glob(f"{version}.*/bin/python{version}"),
        key=lambda path: _patch_level(path.parents[1].name),
        reverse=True,
    )
    return [*found, *(str(path) for path in installed)]


def _patch_level(name: str) -> int:
    patch = name.split(".")[2] if name.count(".") >= 2 else ""
    return int(patch) if patch.isdigit() else -1


def compile_tree(directory: Path, compiler: Compiler) -> int:
    """Compile every ``.py`` under ``directory`` into unchecked hash-based pycs; the file count.

    A file that does not compile is an error: an asset with a module its runtime cannot load
    must not ship.
    """
    completed = subprocess.run(
        [
            compiler.executable,
            "-I",
            "-m",
            "compileall",
            "-q",
            "--invalidation-mode",
            "unchecked-hash",
            # The file names recorded in the code objects: where Lambda unpacks the asset, not the
            # bundling directory (a temporary one, which would change the bytes at every build).
            "-d",
            LAMBDA_TASK_ROOT,
            str(directory),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if completed.returncode != 0:
        raise BytecodeError(
            f"compiling {directory} with {compiler.executable} failed:\n"
            f"{(completed.stdout + completed.stderr).strip()[-2000:]}"
        )
    return len(compiled_files(directory, compiler.cache_tag))


def compiled_files(directory: Path, cache_tag: str) -> list[Path]:
    return sorted(directory.rglob(f"__pycache__/*.{cache_tag}.pyc"))


def missing_bytecode(directory: Path, cache_tag: str) -> list[Path]:
    """Sources under ``directory`` with no pyc for ``cache_tag`` next to them."""
    return [
        source
        for source in sorted(directory.rglob("*.py"))
        if not (source.parent / "__pycache__" / f"{source.stem}.{cache_tag}.pyc").is_file()
    ]


def ship_bytecode(directory: Path, version: str, compiler: Compiler | None = None) -> BytecodeResult:
    """Compile ``directory`` for Python ``version`` if a compiler is at hand (``compiler``, or one
    :func:`find_compiler` finds); otherwise leave it sources-only and say why."""
    chosen = compiler or find_compiler(version)
    if chosen is None:
        return BytecodeResult(
            None,
            0,
            skipped_because=(
                f"no Python {version} here to compile it with (set {INTERPRETER_VARIABLE} or put "
                f"python{version} on PATH); the functions compile their modules at each cold start"
            ),
        )
    return BytecodeResult(chosen, compile_tree(directory, chosen))
