"""The ``nodeheal`` command: one entry point, one module per subcommand under nodeheal.commands.

Exit codes: 0 success, 1 the command ran but found a problem (or a runtime failure), 2 bad input
or usage. Errors are one clear line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from nodeheal.errors import ConfigurationError, InvalidEventError, NodeHealError

#: Subcommand modules, in the order ``--help`` lists them. Each defines
#: ``register(subparsers) -> None`` and sets ``func`` (args -> exit code) on its parser.
COMMAND_MODULES: tuple[str, ...] = (
    "nodeheal.commands.demo",
    "nodeheal.commands.explain",
    "nodeheal.commands.test_pattern",
    "nodeheal.commands.history",
    "nodeheal.commands.inject",
    "nodeheal.commands.admission",
    "nodeheal.commands.doctor",
    "nodeheal.commands.exporter",
    "nodeheal.commands.simulate",
)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodeheal",
        description="NodeHeal: auto-remediation of unhealthy GPU nodes on Amazon EKS.",
    )
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
