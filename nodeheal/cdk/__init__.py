"""NodeHeal for AWS CDK apps (``pip install 'nodeheal[cdk]'``): the :class:`NodeHeal` construct.

Importing this package imports ``aws_cdk``; the CLI and the Lambda handlers never do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodeheal.deploy_config import NodeHealConfig

if TYPE_CHECKING:
    from nodeheal.cdk.nodeheal_construct import NodeHeal

__all__ = ["NodeHeal", "NodeHealConfig"]


def __getattr__(name: str) -> Any:
    # Imported on first use: `python -m nodeheal.cdk.lambda_asset` (and synth_summary) import this
    # package first, and an eager import of the construct would load the module being run twice.
    if name == "NodeHeal":
        from nodeheal.cdk.nodeheal_construct import NodeHeal

        return NodeHeal
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
