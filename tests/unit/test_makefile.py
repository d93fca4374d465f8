"""The Makefile checks the interpreter before it installs anything, rebuilds a virtualenv made with
another one, cleans it away, and tells how to run the CLI after ``make demo``. Each set-up step
prints one timed line, nothing when it is already done, and its output only when it fails.

Each test runs ``make`` on a copy of the Makefile in a temporary directory with fake interpreters:
shell scripts that answer the Makefile's version and base-interpreter probes, make a fake
virtualenv, and log what pip was asked; pip "fails" when ``FAKE_PIP_FAILS`` is set. Nothing is
installed and nothing touches the network.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What the Makefile's rules name as prerequisites or run; copied so make sees a checkout.
CHECKOUT_FILES = (
    "Makefile",
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-scan.txt",
    "pyproject.toml",
    "package.json",
    "package-lock.json",
    "lambdas/requirements.txt",
    "scripts/run-step",
)
PIP = "-m pip --disable-pip-version-check install --progress-bar off"
#: Lines the fake pip prints when it fails: more than a failing step shows.
FAILING_PIP_LINES = 60

#: A virtualenv's python: answers the probes for its version, logs pip calls (printing what pip
#: would, or failing with FAKE_PIP_FAILS set), makes the nodeheal script ``pip install -e .``
#: would make, and fills the Lambda wheelhouse as ``nodeheal.cdk.lambda_asset download`` does.
VENV_PYTHON = """#!/bin/sh
here="$(cd "$(dirname "$0")" && pwd)"
case "$*" in
  *version_info*) echo {version} ;;
  *_base_executable*) echo {base} ;;
  "{pip} --no-deps -e .")
    echo "pip $*" >> "$here/../pip.log"
    printf '#!/bin/sh\\necho "nodeheal $*"\\n' > "$here/nodeheal"; chmod +x "$here/nodeheal" ;;
  "{pip} --no-compile -r requirements-dev.txt")
    echo "pip $*" >> "$here/../pip.log"
    if [ -n "${{FAKE_PIP_FAILS:-}}" ]; then
      i=1; while [ $i -le {failing_lines} ]; do echo "pip output line $i"; i=$((i + 1)); done
      echo "ERROR: No matching distribution found for boto3==1.44.0" >&2
      exit 1
    fi
    echo "Collecting boto3==1.44.0"; echo "Successfully installed boto3-1.44.0" ;;
  "-m pip "*) echo "pip $*" >> "$here/../pip.log"; echo "Requirement already satisfied: pip" ;;
  *sysconfig*purelib*) echo "$here/../site-packages" ;;
  "-m compileall -q -j 0 "*) echo "compileall $6" >> "$here/../pip.log" ;;
  "-m venv "*) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
  "-m nodeheal.cdk.lambda_asset download")
    mkdir -p build/wheelhouse && cp lambdas/requirements.txt build/wheelhouse/requirements.txt
    echo "downloaded" >> "$here/../wheels.log"; echo "12 wheels in build/wheelhouse" ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""

#: npm: ``npm ci`` makes node_modules and says what it added.
FAKE_NPM = """#!/bin/sh
[ "$1" = ci ] || {{ echo "unexpected: npm $*" >&2; exit 1; }}
mkdir -p node_modules && echo "added 310 packages in 9s"
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


def venv_python(version: str, base: str) -> str:
    return VENV_PYTHON.format(version=version, base=base, pip=PIP, failing_lines=FAILING_PIP_LINES)


def interpreter(path: Path, version: str) -> Path:
    base = f"/opt/python{version.rsplit('.', 1)[0]}/bin/python{version.rsplit('.', 1)[0]}"
    return executable(path, BASE_PYTHON.format(version=version, base=base, venv=venv_python(version, base)))


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in CHECKOUT_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    executable(tmp_path / "shims" / "npm", FAKE_NPM.format())
    return tmp_path


def make(
    checkout: Path, *args: str, python3: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``make ARGS`` in the copy, with the fake npm first on PATH; ``python3`` is what a bare
    ``python3`` runs."""
    shims = checkout / "shims"
    if python3 is not None:
        (shims / "python3").unlink(missing_ok=True)
        (shims / "python3").symlink_to(python3)
    inherited = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHON", "MAKEFLAGS", "MFLAGS", "NODEHEAL_WHEELHOUSE")
    }
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=checkout,
        env={**inherited, "PATH": f"{shims}:{os.environ['PATH']}", **(env or {})},
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
        checkout / ".venv" / "bin" / "python", venv_python("3.10.12", "/opt/python3.10/bin/python3.10")
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
    installs = (checkout / ".venv" / "pip.log").read_text()
    assert f"pip {PIP} --no-compile -r requirements-dev.txt" in installs
    # Installed uncompiled, then compiled on every core.
    assert f"compileall {checkout / '.venv' / 'bin' / '..' / 'site-packages'}" in installs
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
    assert (checkout / "build" / "set-up" / "python-packages.log").is_file()
    result = make(checkout, "clean", python3=interpreter(checkout / "py310", "3.10.12"))
    assert result.returncode == 0, result.stderr
    assert not (checkout / ".venv").exists()
    assert not (checkout / "build").exists()


#: A set-up step's line: its name and its time.
STEP_LINE = re.compile(r"^set-up: (?P<step>[A-Za-z ]+) \.\.\. \d+\.\d s$")


def set_up_steps(output: str) -> list[str]:
    """The steps whose lines ``output`` shows; fails on a set-up line of another shape."""
    steps = []
    for line in output.splitlines():
        if line.startswith("set-up:"):
            match = STEP_LINE.match(line)
            assert match, line
            steps.append(match["step"])
    return steps


def test_each_set_up_step_prints_one_timed_line_and_none_of_its_output(checkout: Path) -> None:
    python = interpreter(checkout / "py311", "3.11.9")
    result = make(checkout, "bootstrap", "lambda-deps", f"PYTHON={python}")
    assert result.returncode == 0, result.stderr
    steps = set_up_steps(result.stdout)
    # The three installs run at once and print in the order they finish: the two virtualenvs' after
    # the virtualenv, npm's whenever; the Lambda wheels, downloaded with the virtualenv's pip, last.
    assert sorted(steps) == sorted(
        ["virtualenv", "Python packages", "security scanner", "npm packages", "Lambda wheels"]
    )
    assert steps.index("virtualenv") < min(steps.index("Python packages"), steps.index("security scanner"))
    assert steps[-1] == "Lambda wheels", steps
    assert result.stdout.count("\n") == 5, result.stdout
    assert result.stderr == ""
    # What pip, npm and the wheel download printed is in the logs, not on the terminal.
    logs = checkout / "build" / "set-up"
    assert "Successfully installed boto3-1.44.0" in (logs / "python-packages.log").read_text()
    assert "added 310 packages" in (logs / "npm-packages.log").read_text()
    assert "12 wheels in build/wheelhouse" in (logs / "lambda-wheels.log").read_text()
    for noise in ("Collecting", "Successfully installed", "added 310", "wheels in", "pip install"):
        assert noise not in result.stdout


def test_a_step_already_done_prints_nothing(checkout: Path) -> None:
    python = interpreter(checkout / "py311", "3.11.9")
    assert make(checkout, "bootstrap", "lambda-deps", f"PYTHON={python}").returncode == 0
    again = make(checkout, "bootstrap", "lambda-deps", f"PYTHON={python}")
    assert again.returncode == 0, again.stderr
    assert set_up_steps(again.stdout) == []
    assert (checkout / ".venv" / "wheels.log").read_text().count("downloaded") == 1
    # A changed requirement is one step again, the others stay quiet.
    requirements = checkout / "lambdas" / "requirements.txt"
    requirements.write_text(requirements.read_text() + "\n")
    changed = make(checkout, "bootstrap", "lambda-deps", f"PYTHON={python}")
    assert changed.returncode == 0, changed.stderr
    assert set_up_steps(changed.stdout) == ["Lambda wheels"]


def test_a_failing_pip_shows_the_end_of_its_output_and_the_log_and_fails(checkout: Path) -> None:
    python = interpreter(checkout / "py311", "3.11.9")
    result = make(checkout, "demo", f"PYTHON={python}", env={"FAKE_PIP_FAILS": "1"})
    assert result.returncode != 0
    assert set_up_steps(result.stdout) == ["virtualenv"]
    log = Path("build/set-up/python-packages.log")
    err = result.stderr
    assert re.search(r"^set-up: Python packages failed after \d+\.\d s \(exit status 1\)", err, re.MULTILINE)
    # pip's error is its last line; the start of a long output stays in the log.
    assert "    ERROR: No matching distribution found for boto3==1.44.0" in err
    assert f"pip output line {FAILING_PIP_LINES}" in err
    assert "pip output line 1\n" not in err
    assert f"the whole output: {log}" in err
    whole = (checkout / log).read_text()
    assert "pip output line 1\n" in whole and "No matching distribution" in whole
    assert "Error 1" in err  # make stopped there: nothing ran on top of a broken install
    assert not (checkout / ".venv" / ".installed").exists()
    assert "nodeheal demo" not in result.stdout
    # Fixed, the next run installs and goes on.
    fixed = make(checkout, "demo", f"PYTHON={python}")
    assert fixed.returncode == 0, fixed.stderr
    assert set_up_steps(fixed.stdout) == ["Python packages"]


def run_step(tmp_path: Path, *command: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ROOT / "scripts" / "run-step", "set-up: example", str(tmp_path / "logs" / "example.log"), *command],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, **env},
    )


def test_run_step_keeps_the_status_of_a_failing_command(tmp_path: Path) -> None:
    result = run_step(tmp_path, "sh", "-c", "seq 1 40; echo 'the real cause' >&2; exit 3")
    assert result.returncode == 3
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert re.match(r"set-up: example failed after \d+\.\d s \(exit status 3\)", lines[0])
    assert lines[1:-1] == [f"    {n}" for n in range(17, 41)] + ["    the real cause"]
    assert lines[-1] == f"the whole output: {tmp_path / 'logs' / 'example.log'}"
    assert (tmp_path / "logs" / "example.log").read_text().splitlines()[0] == "1"


def test_run_step_of_a_command_that_does_not_exist_names_it(tmp_path: Path) -> None:
    result = run_step(tmp_path, "no-such-command-here", RUN_STEP_TAIL_LINES="5")
    assert result.returncode == 127
    assert "no-such-command-here" in result.stderr


def test_run_step_prints_its_time_and_nothing_else_when_the_command_succeeds(tmp_path: Path) -> None:
    result = run_step(tmp_path, "sh", "-c", "echo lots of output; echo and warnings >&2")
    assert result.returncode == 0
    assert re.fullmatch(r"set-up: example \.\.\. \d+\.\d s\n", result.stdout)
    assert result.stderr == ""
    assert (tmp_path / "logs" / "example.log").read_text() == "lots of output\nand warnings\n"


def test_run_step_needs_a_label_a_log_and_a_command(tmp_path: Path) -> None:
    result = subprocess.run(
        [ROOT / "scripts" / "run-step", "set-up: example"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_bootstrap_installs_the_scanner_in_its_own_virtualenv(checkout: Path) -> None:
    """checkov's boto3 pin conflicts with NodeHeal's, so ``make test``'s bootstrap gives it
    ``.venv-checkov``, made from the project's interpreter; ``make clean`` removes it too."""
    python = interpreter(checkout / "py311", "3.11.9")
    result = make(checkout, ".venv-checkov/.installed", f"PYTHON={python}")
    assert result.returncode == 0, result.stderr
    assert set_up_steps(result.stdout) == ["virtualenv", "security scanner"]
    installs = (checkout / ".venv-checkov" / "pip.log").read_text()
    assert f"pip {PIP} -r requirements-scan.txt" in installs
    assert "requirements-dev.txt" not in installs
    # The project's own virtualenv only provided the interpreter: nothing was installed into it.
    assert not (checkout / ".venv" / "pip.log").exists()
    assert make(checkout, "clean", f"PYTHON={python}").returncode == 0
    assert not (checkout / ".venv-checkov").exists()


def test_pin_image_runs_the_release_step_with_the_image(checkout: Path) -> None:
    image = f"registry.example.com/nodeheal-exporter@sha256:{'0' * 64}"
    result = make(
        checkout, "-n", "pin-image", f"IMAGE={image}", f"PYTHON={interpreter(checkout / 'py311', '3.11.9')}"
    )
    assert result.returncode == 0, result.stderr
    assert f'.venv/bin/python -m nodeheal.image_pin "{image}"' in result.stdout.splitlines()
