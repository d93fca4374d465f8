"""AWS access shared by the operator subcommands: session, ledger table lookup, error translation.

Every AWS failure becomes one line naming what was being done and what AWS said, never a
traceback: missing credentials or region and a stack that does not exist are the operator's input
(exit 2); an AWS call refused or unreachable is a runtime failure (exit 1).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nodeheal import stack_outputs
from nodeheal.errors import ConfigurationError, NodeHealError

DEFAULT_STACK = "NodeHeal"
LEDGER_OUTPUT = stack_outputs.LEDGER_TABLE_NAME
BUS_OUTPUT = stack_outputs.EVENT_BUS_NAME
STATE_MACHINE_OUTPUT = stack_outputs.STATE_MACHINE_ARN


class AwsCallError(NodeHealError):
    """An AWS call failed: the resource is missing, access was denied, or AWS could not be reached."""


def add_aws_arguments(parser: argparse.ArgumentParser, *, table: bool = True) -> None:
    group = parser.add_argument_group("AWS")
    group.add_argument("--region", help="AWS region (default: AWS_REGION / the profile's region)")
    group.add_argument("--profile", help="AWS named profile (default: AWS_PROFILE / the default chain)")
    group.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        help=f"CloudFormation stack whose outputs name the resources (default: {DEFAULT_STACK})",
    )
    if table:
        group.add_argument("--table", help=f"ledger table name (default: the stack's {LEDGER_OUTPUT} output)")


def session(args: argparse.Namespace) -> Any:
    """A boto3 session with a region and credentials, or a ConfigurationError saying what is missing."""
    import boto3
    from botocore.exceptions import BotoCoreError, ProfileNotFound

    try:
        boto_session = boto3.Session(profile_name=args.profile or None, region_name=args.region or None)
    except ProfileNotFound as exc:
        raise ConfigurationError(str(exc)) from None
    if not boto_session.region_name:
        raise ConfigurationError("no AWS region: pass --region or set AWS_REGION")
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
