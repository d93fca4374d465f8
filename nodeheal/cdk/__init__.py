"""NodeHeal for AWS CDK apps (``pip install 'nodeheal[cdk]'``): the :class:`NodeHeal` construct.

Importing this package imports ``aws_cdk``; the CLI and the Lambda handlers never do.
"""

from nodeheal.cdk.nodeheal_construct import NodeHeal
from nodeheal.deploy_config import NodeHealConfig

__all__ = ["NodeHeal", "NodeHealConfig"]
