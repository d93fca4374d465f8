"""The exporter's process: settings, logging, the EventBridge client, then the watch, until stopped.

Both entry points run it: ``python -m nodeheal.exporter`` (the image's) and ``nodeheal exporter``.
"""

from __future__ import annotations

import argparse

from nodeheal.exporter.settings import load_settings


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
