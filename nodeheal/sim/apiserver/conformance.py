"""What the fake API server served, so that its conformance table is complete by construction.

Every response the server sends is recorded as a row key: the method, the route template (the
real server's REST path with ``{namespace}`` and ``{name}`` for the variable parts; ``?watch`` for a
watch), and the status code (``ERROR <code>`` for an ERROR event inside a watch stream). The test
suite collects the keys of every run and fails when one has no row in ``docs/fake-apiserver.md``:
a new request or answer cannot appear without someone writing down what the real server does.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: The table's first three columns: | `METHOD` | `path` | status |.
_ROW = re.compile(r"^\|\s*`?(?P<method>[A-Z]+)`?\s*\|\s*`(?P<path>[^`]+)`\s*\|\s*(?P<status>[^|]+?)\s*\|")


@dataclass(frozen=True, order=True, slots=True)
class RowKey:
    method: str
    path: str
    status: str

    def describe(self) -> str:
        return f"| `{self.method}` | `{self.path}` | {self.status} |"


_lock = threading.Lock()
_served: set[RowKey] = set()


def record(method: str, path: str, status: int | str) -> None:
    """Note one response (called by the server for every response it sends)."""
    with _lock:
        _served.add(RowKey(method, path, str(status)))


def served() -> set[RowKey]:
    with _lock:
        return set(_served)


def table_rows(document: Path) -> set[RowKey]:
    """The row keys of the conformance table in ``document``."""
    rows: set[RowKey] = set()
    if not document.exists():
        return rows
    for line in document.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            rows.add(RowKey(match["method"], match["path"], match["status"].strip("` ")))
    return rows


def missing_rows(seen: Iterable[RowKey], document: Path) -> list[RowKey]:
    """The keys served but not in the table, in order."""
    return sorted(set(seen) - table_rows(document))
