"""AWS access shared by the operator subcommands: session, ledger table lookup, error translation.

Every AWS failure becomes one line naming what was being done and what AWS said, never a
traceback: missing credentials or region and a stack that does not exist are the operator's input
(exit 2); an AWS call refused or unreachable is a runtime failure (exit 1).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from nodeheal import stack_outputs
from nodeheal.errors import ConfigurationError, NodeHealError

DEFAULT_STACK = "NodeHeal"
LEDGER_OUTPUT = stack_outputs.LEDGER_TABLE_NAME
BUS_OUTPUT = stack_outputs.EVENT_BUS_NAME
STATE_MACHINE_OUTPUT = stack_outputs.STATE_MACHINE_ARN
#: The ``--region`` help of every command: the order :func:`resolve_region` follows.
REGION_HELP = "AWS region (default: AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region)"


class AwsCallError(NodeHealError):
    """An AWS call failed: the resource is missing, access was denied, or AWS could not be reached."""


def add_aws_arguments(parser: argparse.ArgumentParser, *, table: bool = True) -> None:
    group = parser.add_argument_group("AWS")
    group.add_argument("--region", help=REGION_HELP)
    group.add_argument("--profile", help="AWS named profile (default: AWS_PROFILE / the default chain)")
    group.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        help=f"CloudFormation stack whose outputs name the resources (default: {DEFAULT_STACK})",
    )
    if table:
        group.add_argument("--table", help=f"ledger table name (default: the stack's {LEDGER_OUTPUT} output)")


def resolve_region(flag: str | None, environ: Mapping[str, str], profile_region: str | None) -> str | None:
    """The region every AWS client of the CLI uses: ``--region``, else ``AWS_REGION``, else
    ``AWS_DEFAULT_REGION``, else the profile's region (the AWS config file); None when none says.

    boto3 alone reads ``AWS_DEFAULT_REGION`` and the profile, not ``AWS_REGION``, which is what
    CloudShell, Lambda and the other SDKs set; the exporter honours it for the same reason
    (:func:`nodeheal.exporter.settings.resolve_region`).
    """
    for candidate in (flag, environ.get("AWS_REGION"), environ.get("AWS_DEFAULT_REGION"), profile_region):
        region = (candidate or "").strip()
        if region:
            return region
    return None


def session(args: argparse.Namespace) -> Any:
    """A boto3 session with a region and credentials, or a ConfigurationError saying what is missing."""
    import boto3
    import botocore.session
    from botocore.exceptions import BotoCoreError, ProfileNotFound

    core = botocore.session.Session(profile=args.profile or None)
    try:
        profile_region = core.get_scoped_config().get("region")
    except ProfileNotFound as exc:
        raise ConfigurationError(str(exc)) from None
    except BotoCoreError as exc:
        raise ConfigurationError(f"cannot read the AWS config file: {exc}") from None
    region = resolve_region(args.region, os.environ, profile_region)
    if region is None:
        raise ConfigurationError(
            "no AWS region: pass --region, set AWS_REGION (or AWS_DEFAULT_REGION), or give the "
            "profile a region (aws configure set region REGION)"
        )
    boto_session = boto3.Session(botocore_session=core, region_name=region)
    try:
        credentials = boto_session.get_credentials()
    except BotoCoreError as exc:
        raise ConfigurationError(f"cannot load AWS credentials: {exc}") from None
    if credentials is None:
        raise ConfigurationError(
            "no AWS credentials found: set AWS_PROFILE (or pass --profile), export "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or log in with `aws sso login`"
        )
    return boto_session


def stack_output(boto_session: Any, stack: str, output: str) -> str:
    """One output of a deployed stack; ConfigurationError when the stack or the output is missing."""
    with aws_errors(f"describe stack {stack}"):
        try:
            stacks = boto_session.client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
        except Exception as exc:
            if _code(exc) == "ValidationError":
                raise ConfigurationError(
                    f"stack {stack} does not exist in {boto_session.region_name}: pass --stack or --region, "
                    "or name the resource directly"
                ) from None
            raise
    for item in stacks[0].get("Outputs", []) if stacks else []:
        if item.get("OutputKey") == output:
            return str(item["OutputValue"])
    raise ConfigurationError(f"stack {stack} has no {output} output; is it a NodeHeal stack?")


def ledger_table(args: argparse.Namespace, boto_session: Any) -> str:
    return str(args.table) if args.table else stack_output(boto_session, args.stack, LEDGER_OUTPUT)


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


@contextmanager
def aws_errors(action: str) -> Iterator[None]:
    """Translate botocore failures inside the block into one-line NodeHeal errors."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
    )

    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Error"))
        message = str(error.get("Message", "")) or str(exc)
        if code in ("ExpiredToken", "ExpiredTokenException", "UnrecognizedClientException"):
            raise ConfigurationError(
                f"{action}: the AWS credentials were refused ({code}: {message})"
            ) from None
        raise AwsCallError(f"{action}: {code}: {message}") from None
    except (NoCredentialsError, NoRegionError) as exc:
        raise ConfigurationError(f"{action}: {exc}") from None
    except EndpointConnectionError as exc:
        raise AwsCallError(f"{action}: cannot reach AWS: {exc}") from None
    except BotoCoreError as exc:
        raise AwsCallError(f"{action}: {exc}") from None
