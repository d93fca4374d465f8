"""``python -m nodeheal.exporter``: the same as ``nodeheal exporter``.

The image's entry point. It builds only the exporter's parser, so the image does not need the
dependencies of the other ``nodeheal`` subcommands (the policy, the workflow's AWS adapters).
"""

import argparse
import sys

from nodeheal.errors import ConfigurationError
from nodeheal.exporter.main import run
from nodeheal.exporter.settings import add_arguments

#: A usage error, as argparse and the nodeheal CLI report one (nodeheal.cli.EXIT_USAGE).
EXIT_USAGE = 2

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
