"""mypy follows only the aws-cdk-lib modules NodeHeal's code imports (pyproject.toml: following all
~350 took three quarters of a cold type check). A module imported but not on that list would be
``Any`` to mypy, its every use unchecked: this test keeps the list and the imports together."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_PACKAGES = ("aws_cdk", "kubernetes.client.models", "kubernetes.client.api", "moto")


def _mypy_overrides() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["mypy"]["overrides"])


def _followed_cdk_modules() -> set[str]:
    followed: set[str] = set()
    for override in _mypy_overrides():
        if override.get("follow_imports") == "normal":
            modules = override["module"]
            followed.update([modules] if isinstance(modules, str) else list(modules))  # type: ignore[arg-type]
    return followed


def _checked_sources() -> list[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    files: list[Path] = []
    for entry in config["tool"]["mypy"]["files"]:
        path = ROOT / entry
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def _imported_cdk_modules(source: Path) -> set[str]:
    """``aws_cdk`` and ``aws_cdk.aws_x`` for ``from aws_cdk import aws_x``, ``import aws_cdk.aws_x``
    and ``from aws_cdk.aws_x import Y``; names that are not modules (``Duration``) count as the root."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "aws_cdk":
            if node.module == "aws_cdk":
                for alias in node.names:
                    is_module = alias.name[:1].islower()
                    modules.add(f"aws_cdk.{alias.name}" if is_module else "aws_cdk")
            else:
                modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names if alias.name.split(".")[0] == "aws_cdk")
    return modules


def test_every_cdk_module_the_code_imports_is_followed_by_mypy() -> None:
    followed = _followed_cdk_modules()
    imported = {module: source for source in _checked_sources() for module in _imported_cdk_modules(source)}
    missing = {
        module: str(source.relative_to(ROOT)) for module, source in imported.items() if module not in followed
    }
    assert not missing, (
        "add these to the follow_imports = normal override in pyproject.toml, or mypy treats them as Any: "
        f"{missing}"
    )
    assert "aws_cdk.aws_lambda" in imported  # the scan sees the stacks' imports at all


def test_the_followed_list_names_only_modules_the_code_imports() -> None:
    # A stale entry costs type-check time for nothing.
    imported = {module for source in _checked_sources() for module in _imported_cdk_modules(source)}
    assert _followed_cdk_modules() - imported == set()


def test_the_packages_skipped_are_the_generated_ones_named() -> None:
    skipped = {
        module.removesuffix(".*")
        for override in _mypy_overrides()
        if override.get("follow_imports") == "skip"
        for module in override["module"]  # type: ignore[union-attr]
    }
    assert skipped == set(SKIPPED_PACKAGES)
