"""``demo`` and ``simulate`` from a built (non-editable) install say what is wrong and what to do.

They run the checkout's ``stacks/`` and ``lambdas/``, which a built package does not carry. Run
inside the checkout, the person is where they should be: what they lack is an editable install.
Run elsewhere, they need the checkout too. The package is made to look installed under a
site-packages directory, with neither ``stacks`` nor ``lambdas`` importable.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodeheal.commands import demo
from nodeheal.errors import ConfigurationError
from tests.unit.cli.conftest import Result

Cli = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def built_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The installed package's directory, in a virtualenv's site-packages."""
    package = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "nodeheal"
    (package / "commands").mkdir(parents=True)
    monkeypatch.setattr(demo, "__file__", str(package / "commands" / "demo.py"))
    find_spec = importlib.util.find_spec

    def not_importable(name: str, package: str | None = None) -> Any:
        return None if name in ("stacks", "lambdas") else find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", not_importable)
    return package


def refusal() -> str:
    with pytest.raises(ConfigurationError) as refused:
        demo.make_sources_importable()
    return str(refused.value)


@pytest.mark.parametrize("where", [".", "docs"])
def test_inside_the_checkout_it_asks_for_an_editable_install(
    built_package: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.chdir(ROOT / where)
    message = refusal()
    assert f"installed from a built package ({built_package})" in message
    assert f"not from this checkout ({ROOT})" in message
    assert "pip install -e '.[demo]'" in message
    assert "make demo" in message
    assert "run it there" not in message


def test_outside_a_checkout_it_asks_for_a_clone_installed_editable(
    built_package: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    message = refusal()
    assert f"installed from a built package ({built_package})" in message
    assert "checkout" in message and "this checkout" not in message
    assert "clone" in message
    assert "pip install -e '.[demo]'" in message


def test_the_command_says_it_in_one_line(
    cli: Cli, built_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    result = cli("simulate", "--seed", "0")
    assert result.code == 2
    assert result.err.startswith("nodeheal simulate: nodeheal is installed from a built package")
    assert result.err.count("\n") == 1


def test_an_editable_install_runs_from_its_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    # The package's own directory is the checkout's: nothing to refuse.
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, package=None: None if name in ("stacks", "lambdas") else find_spec(name, package),
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    demo.make_sources_importable()
    assert sys.path[0] == str(ROOT)
