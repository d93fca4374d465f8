"""``nodeheal --version``: the installed distribution's version, or the source tree's, marked."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

import nodeheal
from nodeheal.cli import DISTRIBUTION, main

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def version_output(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    # A subcommand is required, but --version answers (and exits 0) before that is checked.
    assert version_output(capsys) == f"nodeheal {importlib.metadata.version(DISTRIBUTION)}\n"
    assert importlib.metadata.version(DISTRIBUTION) == PYPROJECT_VERSION


def test_without_metadata_the_source_trees_version_is_marked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert version_output(capsys) == f"nodeheal {PYPROJECT_VERSION} (not installed: run from a source tree)\n"


def test_the_packages_own_version_is_pyprojects() -> None:
    # The fallback must never name another release than the one the tree builds.
    assert nodeheal.__version__ == PYPROJECT_VERSION
