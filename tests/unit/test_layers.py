"""The layers (D21 in docs/architecture.md), as `.importlinter` writes them down, hold; and the
graph they are checked on holds every module of NodeHeal.

import-linter builds its graph with grimp, which leaves out a directory without an
``__init__.py`` inside a regular package without a word (grimp#298): a contract about such a
directory would pass while checking nothing. So the graph itself is checked here first.
"""

from __future__ import annotations

import configparser
import logging
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nodeheal"
CONTRACTS = ROOT / ".importlinter"


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("nodeheal", exclude_type_checking_imports=False, cache_dir=None)


def test_every_package_directory_has_an_init_file() -> None:
    missing = sorted(
        str(directory.relative_to(ROOT))
        for directory in {path.parent for path in PACKAGE.rglob("*.py")}
        if "__pycache__" not in directory.parts and not (directory / "__init__.py").exists()
    )
    assert not missing, f"directories the import graph would leave out: {missing}"


def test_every_module_is_in_the_import_graph(graph: grimp.ImportGraph) -> None:
    modules = {_module_of(path) for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts}
    assert modules - graph.modules == set()
    assert len(modules) > 150  # the walk found the source, not an empty directory


def test_the_contract_file_names_only_modules_that_exist(graph: grimp.ImportGraph) -> None:
    """A renamed module must be renamed in the contracts too: a contract naming a module that is
    gone would quietly stop checking it."""
    config = configparser.ConfigParser()
    config.read(CONTRACTS)
    named = {
        line.strip()
        for section in config.sections()
        if section.startswith("importlinter:contract:")
        for key in ("source_modules", "forbidden_modules", "ancestors")
        for line in config[section].get(key, "").splitlines()
        if line.strip()
    }
    assert named, "no module named in the contracts"
    assert named - graph.modules == set()


def test_the_layers_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """`lint-imports` in-process: every contract of `.importlinter` is kept (its report on failure)."""
    # lint_imports configures its logging with logging.config.dictConfig, whose default disables
    # every logger that exists then: nodeheal.kube.client and the others would stay silent for
    # every later test of this worker (a caplog assertion then failed by test order).
    loggers = [
        logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    disabled = [logger.disabled for logger in loggers]
    try:
        status = lint_imports(config_filename=str(CONTRACTS), no_cache=True, no_logo=True)
    finally:
        for logger, was_disabled in zip(loggers, disabled, strict=True):
            logger.disabled = was_disabled
    report = capsys.readouterr().out
    assert status == 0, report
    assert "0 broken" in report, report
