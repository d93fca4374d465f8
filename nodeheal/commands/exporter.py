"""``nodeheal exporter``: watch Node conditions and ship their transitions to EventBridge."""

from __future__ import annotations

import argparse
from typing import Any

from nodeheal.exporter.main import run
from nodeheal.exporter.settings import add_arguments


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "exporter",
        help="watch Node conditions and ship transitions to EventBridge (runs until stopped)",
        description=(
            "Watch Node conditions and ship their transitions to EventBridge. It runs until stopped "
            "and logs JSON lines: one JSON object per line on stdout, so it has no --json. Every flag "
            "can also be set through the environment variable named in its help; flags win. Each "
            "flag's help gives its type, range and default."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(func=run)
