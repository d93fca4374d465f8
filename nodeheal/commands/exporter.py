"""``nodeheal exporter``: watch Node conditions and ship their transitions to EventBridge."""

from __future__ import annotations

import argparse
from typing import Any

from nodeheal.exporter.settings import add_arguments, load_settings


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


def run(args: argparse.Namespace) -> int:
    # Imports kept inside: `nodeheal --help` must not pay for boto3 and the kubernetes client.
    from nodeheal.exporter.app import Exporter, make_events_client
    from nodeheal.exporter.kubeclient import load_api_client
    from nodeheal.exporter.logs import configure_logging

    settings = load_settings(vars(args))
    configure_logging(settings.log_level)
    # The events client first: a missing region is a configuration error worth reporting before
    # anything talks to the API server.
    events_client = make_events_client(settings.aws_region)
    exporter = Exporter(settings, load_api_client(settings.kubeconfig, settings.kube_context), events_client)
    return exporter.run_forever()
