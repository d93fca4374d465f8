"""The Makefile checks the interpreter before it installs anything, rebuilds a virtualenv made with
another one, cleans it away, and tells how to run the CLI after ``make demo``.

Each test runs ``make`` on a copy of the Makefile in a temporary directory with fake interpreters:
shell scripts that answer the Makefile's version and base-interpreter probes, make a fake
virtualenv, and log what pip was asked. Nothing is installed and nothing touches the network.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What the Makefile's rules name as prerequisites; copied so make sees a checkout.
CHECKOUT_FILES = ("Makefile", "requirements.txt", "requirements-dev.txt", "pyproject.toml")

#: A virtualenv's python: answers the probes for its version, logs pip calls, and makes the
#: nodeheal script ``pip install -e .`` would make.
VENV_PYTHON = """#!/bin/sh
here="$(cd "$(dirname "$0")" && pwd)"
case "$*" in
  *version_info*) echo {version} ;;
  *_base_executable*) echo {base} ;;
  "-m pip install --quiet --no-deps -e .")
    echo "pip $*" >> "$here/../pip.log"
    printf '#!/bin/sh\\necho "nodeheal $*"\\n' > "$here/nodeheal"; chmod +x "$here/nodeheal" ;;
  "-m pip "*) echo "pip $*" >> "$here/../pip.log" ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""

#: A base interpreter: answers the probes and makes a virtualenv of itself with ``-m venv DIR``.
BASE_PYTHON = """#!/bin/sh
case "$*" in
  *version_info*) echo {version} ;;
  *_base_executable*) echo {base} ;;
  "-m venv "*)
    mkdir -p "$3/bin"
    cat > "$3/bin/python" <<'VENV'
{venv}VENV
    chmod +x "$3/bin/python" ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def interpreter(path: Path, version: str) -> Path:
    base = f"/opt/python{version.rsplit('.', 1)[0]}/bin/python{version.rsplit('.', 1)[0]}"
    venv = VENV_PYTHON.format(version=version, base=base)
    return executable(path, BASE_PYTHON.format(version=version, base=base, venv=venv))


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in CHECKOUT_FILES:
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def make(checkout: Path, *args: str, python3: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``make ARGS`` in the copy; ``python3`` is what a bare ``python3`` runs (first on PATH)."""
    path = os.environ["PATH"]
    if python3 is not None:
        shims = checkout / "shims"
        shims.mkdir(exist_ok=True)
        (shims / "python3").unlink(missing_ok=True)
        (shims / "python3").symlink_to(python3)
        path = f"{shims}:{path}"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHON", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=checkout,
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_python_3_10_is_refused_before_anything_is_installed(checkout: Path) -> None:
    old = interpreter(checkout / "py310", "3.10.12")
    result = make(checkout, "demo", f"PYTHON={old}")
    assert result.returncode != 0
    assert f"NodeHeal needs Python 3.11 or newer, and {old} is 3.10.12" in result.stderr
    assert "run make demo PYTHON=python3.11" in result.stderr
    assert not (checkout / ".venv").exists()


def test_a_bare_python3_that_is_too_old_names_the_fix(checkout: Path) -> None:
    result = make(checkout, "bootstrap", python3=interpreter(checkout / "py310", "3.10.12"))
    assert result.returncode != 0
    assert "python3 is 3.10.12" in result.stderr
    assert "PYTHON=python3.11" in result.stderr


def test_an_interpreter_that_does_not_run_is_named(checkout: Path) -> None:
    result = make(checkout, "test", f"PYTHON={checkout / 'missing-python'}")
    assert result.returncode != 0
    assert f"cannot run {checkout / 'missing-python'}" in result.stderr


def test_a_venv_made_with_another_interpreter_is_recreated_with_python(checkout: Path) -> None:
    # A virtualenv left by an earlier run on Python 3.10.
    executable(
        checkout / ".venv" / "bin" / "python",
        VENV_PYTHON.format(version="3.10.12", base="/opt/python3.10/bin/python3.10"),
    )
    new = interpreter(checkout / "py312", "3.12.4")
    dry = make(checkout, "-n", ".venv/.installed", f"PYTHON={new}")
    assert dry.returncode == 0, dry.stderr
    assert "a real run recreates it" in dry.stdout
    assert "3.10.12" in (checkout / ".venv" / "bin" / "python").read_text(), "make -n changes nothing"
    result = make(checkout, ".venv/.installed", f"PYTHON={new}")
    assert result.returncode == 0, result.stderr
    assert ".venv was made with /opt/python3.10/bin/python3.10 3.10.12" in result.stdout
    assert "recreating it" in result.stdout
    probe = subprocess.run(
        [checkout / ".venv" / "bin" / "python", "-c", "import sys; print(sys.version_info)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "3.12.4"
    assert (
        "pip -m pip install --quiet -r requirements-dev.txt" in (checkout / ".venv" / "pip.log").read_text()
    )
    # The same interpreter again: nothing to rebuild.
    again = make(checkout, ".venv/.installed", f"PYTHON={new}")
    assert again.returncode == 0, again.stderr
    assert "recreating" not in again.stdout
    assert "is up to date" in again.stdout
    # Without PYTHON, a working venv is kept even when the bare python3 is too old.
    kept = make(checkout, ".venv/.installed", python3=interpreter(checkout / "py310", "3.10.12"))
    assert kept.returncode == 0, kept.stderr
    assert "is up to date" in kept.stdout


def test_make_demo_ends_by_saying_how_to_run_the_cli(checkout: Path) -> None:
    result = make(checkout, "demo", f"PYTHON={interpreter(checkout / 'py311', '3.11.9')}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.rstrip().splitlines()
    assert "nodeheal demo" in lines[-4]
    assert lines[-2:] == [
        "The nodeheal CLI is .venv/bin/nodeheal (make does not put it on your PATH):",
        "  .venv/bin/nodeheal --help        or: source .venv/bin/activate && nodeheal --help",
    ]


def test_clean_removes_the_venv_whatever_the_interpreter(checkout: Path) -> None:
    assert (
        make(checkout, ".venv/.installed", f"PYTHON={interpreter(checkout / 'py311', '3.11.9')}").returncode
        == 0
    )
    (checkout / "build").mkdir()
    result = make(checkout, "clean", python3=interpreter(checkout / "py310", "3.10.12"))
    assert result.returncode == 0, result.stderr
    assert not (checkout / ".venv").exists()
    assert not (checkout / "build").exists()
