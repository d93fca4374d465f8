"""``python -m nodeheal.exporter``: the same as ``nodeheal exporter``.

The image's entry point. It builds only the exporter's parser, so the image does not need the
dependencies of the other ``nodeheal`` subcommands (the policy, the workflow's AWS adapters).
"""

import argparse
import sys

from nodeheal.cli import EXIT_USAGE
from nodeheal.commands.exporter import run
from nodeheal.errors import ConfigurationError
from nodeheal.exporter.settings import add_arguments

parser = argparse.ArgumentParser(
    prog="python -m nodeheal.exporter",
    description="Watch Node conditions and ship their transitions to EventBridge.",
)
add_arguments(parser)
arguments = parser.parse_args()
try:
    sys.exit(run(arguments))
except ConfigurationError as exc:
    print(f"nodeheal exporter: {exc}", file=sys.stderr)
    sys.exit(EXIT_USAGE)
except KeyboardInterrupt:
    sys.exit(130)
