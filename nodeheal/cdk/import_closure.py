"""Which source modules the Lambda asset ships: those its handlers import, followed through the code.

The asset carries the handlers' package whole and, of the other source packages, only the modules
the handlers import, directly or through one another. The closure is read from the sources at build
time (``ast``), so it follows the code as modules move between packages:

* every ``import`` and ``from ... import`` counts, wherever it stands: at module level, or inside a
  function (a lazy import runs when the function does); only the body of an ``if TYPE_CHECKING:``
  block is left out, since it never runs;
* ``from package import name`` ships ``package.name`` when that is a module; relative imports are
  resolved against the importing module's package;
* a module ships with every package above it (its ``__init__.py``, which Python runs first), and a
  package ships with the data files next to its ``__init__.py`` (read with ``importlib.resources``);
* ``importlib.import_module("literal")`` is followed like an import; a call with any other argument
  is an error, since no reading of the source can tell what it loads.

Modules outside the source packages (the standard library, the wheels) are not followed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Calls that load a module by its name as a string.
_DYNAMIC_IMPORTS = {("importlib", "import_module"), ("", "import_module"), ("", "__import__")}
#: Never data: build and editor leftovers next to the sources.
_NOT_DATA_SUFFIXES = (".py", ".pyc", ".pyo")


class ImportClosureError(RuntimeError):
    """A shipped module imports something the closure cannot follow or must not ship."""


@dataclass(frozen=True, slots=True)
class SourceModule:
    """One module of the source packages: its dotted name and file."""

    name: str
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def package(self) -> str:
        """The package relative imports in this module are resolved against."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def find_module(name: str, roots: Mapping[str, Path]) -> SourceModule | None:
    """The module ``name`` in the source packages (``roots``: top-level package -> directory)."""
    top, _, rest = name.partition(".")
    if top not in roots:
        return None
    base = roots[top].joinpath(*rest.split(".")) if rest else roots[top]
    if (base / "__init__.py").is_file():
        return SourceModule(name, base / "__init__.py")
    if rest and base.with_suffix(".py").is_file():
        return SourceModule(name, base.with_suffix(".py"))
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _call_name(func: ast.expr) -> tuple[str, str]:
    if isinstance(func, ast.Name):
        return "", func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id, func.attr
    return "", ""


def _resolve(module: SourceModule, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.package.split(".")
    if level - 1 >= len(parts):
        raise ImportClosureError(f"{module.path}: a relative import goes above the top-level package")
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{target}" if target else base


def imported_names(module: SourceModule) -> set[str]:
    """Every module name ``module`` may import when it runs (candidates: some are not modules)."""
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    names: set[str] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            names.add(base)
            # ``from package import name``: name may be a submodule (kept if it is one).
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and _call_name(node.func) in _DYNAMIC_IMPORTS:
            argument = node.args[0] if node.args else None
            if not (isinstance(argument, ast.Constant) and isinstance(argument.value, str)):
                raise ImportClosureError(
                    f"{module.path}:{node.lineno}: a module loaded by a computed name; "
                    "import it by a literal name so that the Lambda asset can ship it"
                )
            names.add(argument.value)
        pending.extend(ast.iter_child_nodes(node))
    return names


def import_closure(entries: Iterable[SourceModule], roots: Mapping[str, Path]) -> dict[str, SourceModule]:
    """The modules of ``roots`` that ``entries`` import, transitively, with their parent packages
    (``entries`` included): dotted name -> module."""
    shipped: dict[str, SourceModule] = {}
    pending = list(entries)
    while pending:
        module = pending.pop()
        if module.name in shipped:
            continue
        shipped[module.name] = module
        parents = [module.name.rsplit(".", depth)[0] for depth in range(1, module.name.count(".") + 1)]
        for name in [*parents, *imported_names(module)]:
            # ``import a.b.c`` runs a, a.b and a.b.c: each existing prefix is a module to ship.
            parts = name.split(".")
            for length in range(1, len(parts) + 1):
                found = find_module(".".join(parts[:length]), roots)
                if found is not None and found.name not in shipped:
                    pending.append(found)
    return shipped


def package_modules(package: str, directory: Path) -> list[SourceModule]:
    """Every module of the package at ``directory`` (the handlers, shipped whole)."""
    modules = []
    for path in sorted(directory.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        relative = path.relative_to(directory).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        modules.append(SourceModule(".".join((package, *parts)), path))
    return modules


def shipped_files(modules: Iterable[SourceModule], roots: Mapping[str, Path]) -> dict[Path, Path]:
    """The files that carry ``modules``: path in the asset -> source file. A package brings the
    data files of its own directory (not those of its subpackages, which ship as modules do)."""
    files: dict[Path, Path] = {}
    for module in modules:
        top = module.name.partition(".")[0]
        root = roots[top]
        files[Path(top) / module.path.relative_to(root)] = module.path
        if module.is_package:
            for data in sorted(module.path.parent.iterdir()):
                if data.is_file() and not data.name.endswith(_NOT_DATA_SUFFIXES):
                    files[Path(top) / data.relative_to(root)] = data
    return files
