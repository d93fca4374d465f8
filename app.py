#!/usr/bin/env python3
"""CDK entry point: ``cdk synth`` / ``cdk deploy`` (see cdk.json for every setting).

Configuration errors are reported all at once, with a non-zero exit, before any construct exists.
cdk-nag's AwsSolutions pack validates the synthesized templates unless the ``nag`` context is false
(``cdk synth -c nag=false``).
"""

from __future__ import annotations

import fnmatch
import sys
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from nodeheal.cdk.lambda_asset import LambdaAssetError, check_wheelhouse
from nodeheal.deploy_config import CONTEXT_KEY, NodeHealConfig
from nodeheal.errors import ConfigurationError
from stacks.nodeheal_stack import NodeHealStack

NAG_CONTEXT_KEY = "nag"
#: Set by the CDK CLI: glob patterns of the stacks whose assets must be bundled.
BUNDLING_STACKS_CONTEXT_KEY = "aws:cdk:bundling-stacks"


def bundling_required(bundling_stacks: Any, stack_name: str) -> bool:
    """Whether the CLI asked for this stack's assets (``cdk ls`` and friends pass an empty list)."""
    patterns = ["**"] if bundling_stacks is None else list(bundling_stacks)
    return any(fnmatch.fnmatchcase(stack_name, pattern) for pattern in patterns)


def nag_enabled(value: Any) -> bool:
    """Context from ``-c nag=false`` arrives as a string, from cdk.json as a boolean."""
    return value not in (False, "false", "False", "0", "no")


def main() -> int:
    app = App()
    try:
        config = NodeHealConfig.from_cdk_context(app.node.try_get_context(CONTEXT_KEY))
    except ConfigurationError as exc:
        print(f"NodeHeal configuration error: {exc}", file=sys.stderr)
        return 2
    if bundling_required(app.node.try_get_context(BUNDLING_STACKS_CONTEXT_KEY), config.stack_name):
        # Assets bundle while the stack is constructed; checking first turns a jsii stack trace
        # into one line on a fresh clone. The bundler checks again for other entry points.
        try:
            check_wheelhouse()
        except LambdaAssetError as exc:
            print(f"NodeHeal Lambda asset: {exc}", file=sys.stderr)
            return 2
    NodeHealStack(app, config.stack_name, config=config)
    if nag_enabled(app.node.try_get_context(NAG_CONTEXT_KEY)):
        Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
