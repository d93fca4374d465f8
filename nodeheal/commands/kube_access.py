"""Cluster access shared by the subcommands that read or write Kubernetes with a person's rights.

A kubeconfig (the default, as kubectl reads it, exec plugins and client certificates included) or
``--eks``: the endpoint and CA from ``eks:DescribeCluster`` and a bearer token minted from the AWS
credentials, as ``aws eks get-token`` does.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nodeheal.errors import ConfigurationError

if TYPE_CHECKING:
    from nodeheal.kube.transport import KubeTransport


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    access = parser.add_argument_group("cluster access (default: kubeconfig, or in-cluster)")
    access.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    access.add_argument("--context", help="kubeconfig context (default: the current one)")
    access.add_argument(
        "--eks", action="store_true", help="reach the cluster through EKS (DescribeCluster + IAM token)"
    )


def kube_transport(args: argparse.Namespace, cluster: str) -> KubeTransport:
    """A transport to ``cluster``; ``args`` carries the access flags (and --region/--profile for --eks)."""
    if args.eks:
        if args.kubeconfig or args.context:
            raise ConfigurationError("--eks reaches the cluster through AWS; drop --kubeconfig/--context")
        from nodeheal.commands.aws_access import aws_errors, session
        from nodeheal.kube.client import EksClientProvider

        boto_session = session(args)
        with aws_errors(f"describe EKS cluster {cluster}"):
            provider = EksClientProvider(
                boto_session.client("eks"), boto_session, region=str(boto_session.region_name)
            )
            return provider.transport(cluster)
    from nodeheal.exporter.kubeclient import load_api_client
    from nodeheal.kube.transport import GeneratedClientTransport

    # A kubeconfig may name exec plugins or client certificates: the kubernetes package reads them.
    return GeneratedClientTransport(load_api_client(args.kubeconfig or "", args.context or ""))
