"""Output shared by the subcommands: JSON for machines, aligned tables for people, confirmations."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from nodeheal.errors import ConfigurationError


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, sort_keys=False, default=str))


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
    """``columns`` is (key, header); cells are shown as text, the last column is never padded."""
    cells = [[header for _, header in columns]]
    cells.extend([_cell(row.get(key)) for key, _ in columns] for row in rows)
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        padded = [text.ljust(width) for text, width in zip(line[:-1], widths[:-1], strict=True)]
        print("  ".join([*padded, line[-1]]).rstrip())


def print_fields(fields: Sequence[tuple[str, Any]], *, wrap: int | None = None, indent: str = "") -> None:
    """``label: value`` lines with the values aligned; ``wrap`` folds long values at that width,
    continuing under the value (a reason of several hundred characters stays readable)."""
    width = max((len(label) for label, _ in fields), default=0) + 1
    hanging = indent + " " * (width + 1)
    for label, value in fields:
        line = f"{indent}{label + ':':<{width}} {_cell(value)}"
        if wrap is None or len(line) <= wrap:
            print(line)
            continue
        print(
            textwrap.fill(
                _cell(value),
                width=wrap,
                initial_indent=f"{indent}{label + ':':<{width}} ",
                subsequent_indent=hanging,
                break_on_hyphens=False,
            )
        )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    text = str(value)
    return text if text else "-"


def confirm(question: str, *, assume_yes: bool) -> bool:
    """Ask on the terminal; without one, only ``--yes`` may proceed (never hang a script on input)."""
    if assume_yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigurationError("stdin is not a terminal: pass --yes to confirm")
    print(f"{question} [y/N] ", end="", flush=True, file=sys.stderr)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")
