"""``nodeheal doctor --stack NAME --cluster NAME [--node NAME]``: is this deployment working?

A read-only acceptance check of one cluster's deployment (the checks are :mod:`nodeheal.doctor`).
Every line is ``ok`` or ``failed`` with the fix; the exit code is 1 when any check failed, 2 on bad
input or missing AWS credentials. AWS is reached with the person's credentials (``--region``,
``--profile``), the cluster as every other subcommand reaches it (a kubeconfig, or ``--eks``).
"""

from __future__ import annotations

import argparse
from typing import Any

from nodeheal.aws.eks_access import BotoEksAccess, EksAccess
from nodeheal.commands.aws_access import add_aws_arguments, session
from nodeheal.commands.kube_access import add_kube_arguments, kube_transport
from nodeheal.commands.output import print_json
from nodeheal.doctor import Inputs, KubeSide, Report, examine
from nodeheal.errors import ConfigurationError
from nodeheal.timestamps import utc_now
from nodeheal.workflow.preview import LedgerReader

EXIT_FAILED = 1
#: Width of the check column: the longest check name, ``access:check-recovery``.
CHECK_WIDTH = 22


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "doctor",
        help="check a deployment end to end, read-only: stack, access, rules, heartbeats, a node's decision",
        description=(
            "Check one cluster's NodeHeal deployment without changing anything: the stack and its "
            "outputs, the workflow and its mode, the EKS access entries and the RBAC each function "
            "needs (access reviews), the exporter's heartbeats, the deployed rules against sample "
            "events (EventBridge TestEventPattern) and, with --node, what NodeHeal would do about that "
            "node now. Each line says ok or failed with the fix; the exit code is 1 if any failed."
        ),
    )
    parser.add_argument("--cluster", required=True, help="EKS cluster name (one of the stack's clusters)")
    parser.add_argument(
        "--node",
        metavar="NAME",
        help="also show what NodeHeal would do about this node now (nothing is started)",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as one JSON document")
    add_aws_arguments(parser, table=False)
    add_kube_arguments(parser)
    parser.set_defaults(func=run)


def eks_access(boto_session: Any) -> EksAccess:
    return BotoEksAccess(boto_session.client("eks"))


def run(args: argparse.Namespace) -> int:
    cluster = str(args.cluster).strip()
    if not cluster:
        raise ConfigurationError("--cluster must name an EKS cluster")
    if args.node is not None and not str(args.node).strip():
        raise ConfigurationError("--node must name a node")
    if args.eks and (args.kubeconfig or args.context):
        raise ConfigurationError("--eks reaches the cluster through AWS; drop --kubeconfig/--context")
    boto_session = session(args)
    from nodeheal.aws.deployment import BotoDeployment

    def kube() -> KubeSide:
        from nodeheal.kube.access_review import AccessReviews
        from nodeheal.kube.nodes import NodeOperations

        transport = kube_transport(args, cluster)
        return KubeSide(reviews=AccessReviews(transport), nodes=NodeOperations(transport))

    def ledger(table: str) -> LedgerReader:
        from nodeheal.aws.ledger import Ledger

        return Ledger(boto_session.client("dynamodb"), table)

    report = examine(
        Inputs(
            stack=args.stack,
            cluster=cluster,
            region=str(boto_session.region_name),
            deployment=BotoDeployment(boto_session),
            eks=eks_access(boto_session),
            kube=kube,
            ledger=ledger,
            now=utc_now(),
            node=args.node.strip() if args.node else None,
        )
    )
    if args.json:
        print_json(report.to_json())
    else:
        print_report(report)
    return 0 if report.ok else EXIT_FAILED


def print_report(report: Report) -> None:
    """One line per check: ``ok`` or ``failed``, the check, what was found and, when failed, the fix."""
    print(
        f"nodeheal doctor: stack {report.stack}, cluster {report.cluster}, region {report.region} (read-only)"
    )
    for check in report.checks:
        line = f"{'ok' if check.ok else 'failed':<7} {check.check:<{CHECK_WIDTH}} {check.summary}"
        print(f"{line}; fix: {check.fix}" if check.fix else line)
    failed = sum(1 for check in report.checks if not check.ok)
    print(
        f"{len(report.checks) - failed} of {len(report.checks)} checks ok"
        + (f", {failed} failed" if failed else "")
    )
