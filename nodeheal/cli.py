"""The ``nodeheal`` command: one entry point, one module per subcommand under nodeheal.commands.

Exit codes: 0 success, 1 the command ran but found a problem (or a runtime failure), 2 bad input
or usage, 141 the reader of stdout went away (a pipe into ``head``). Errors are one clear line on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import nodeheal
from nodeheal.errors import ConfigurationError, InvalidEventError, NodeHealError

#: Subcommand modules, in the order ``--help`` lists them. Each defines
#: ``register(subparsers) -> None`` and sets ``func`` (args -> exit code) on its parser.
COMMAND_MODULES: tuple[str, ...] = (
    "nodeheal.commands.demo",
    "nodeheal.commands.explain",
    "nodeheal.commands.rule_matching",
    "nodeheal.commands.history",
    "nodeheal.commands.inject",
    "nodeheal.commands.breaker",
    "nodeheal.commands.pause",
    "nodeheal.commands.retry",
    "nodeheal.commands.doctor_report",
    "nodeheal.commands.exporter",
    "nodeheal.commands.simulate",
)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
#: The reader of stdout went away (``nodeheal explain | head -1``): 128 + SIGPIPE (13), what a
#: shell reports for cat or grep when SIGPIPE ends them. Not 0, which would claim every line was
#: delivered, and not 1 or 2, which mean the command found a problem or was misused: under
#: ``set -o pipefail`` a script treats nodeheal as it treats any other tool cut off by its reader.
EXIT_PIPE_CLOSED = 141


#: The distribution whose metadata names the version (pyproject.toml's ``[project] name``).
DISTRIBUTION = "nodeheal"


def package_version() -> str:
    """The installed distribution's version, what ``pip show nodeheal`` reports.

    Code run from a source tree that was never installed (``PYTHONPATH=.``, the Lambda asset) has
    no distribution metadata; then the package's own ``__version__`` answers, which a test holds
    equal to pyproject.toml, marked so nobody mistakes it for an installed release.
    """
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return f"{nodeheal.__version__} (not installed: run from a source tree)"


class _VersionAction(argparse.Action):
    """``--version``, reading the metadata only when asked (every other command skips the lookup)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str = argparse.SUPPRESS,
        help: str = "print the version and exit",
    ) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        print(f"{parser.prog} {package_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodeheal",
        description="NodeHeal: auto-remediation of unhealthy GPU nodes on Amazon EKS.",
    )
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # a subcommand this build does not ship
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every command's output goes through here, so a closed pipe is handled once."""
    try:
        try:
            return _run(argv)
        finally:
            # Flushed here rather than at interpreter exit, whatever ended the command (argparse's
            # --help exits through SystemExit), so a reader that went away is caught below.
            sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """The Python docs' recipe (library/signal, "Note on SIGPIPE"): point stdout at devnull, so the
    flush at interpreter exit does not fail again, and exit quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a file descriptor (captured in tests)
        pass
    return EXIT_PIPE_CLOSED


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (InvalidEventError, ConfigurationError) as exc:
        print(f"nodeheal {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NodeHealError as exc:
        print(f"nodeheal {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
