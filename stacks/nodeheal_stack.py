"""The NodeHeal stack of this repository's app: the :class:`~nodeheal.cdk.NodeHeal` construct and the
outputs operators look up (:meth:`~nodeheal.cdk.NodeHeal.add_stack_outputs`)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from nodeheal.cdk import NodeHeal
from nodeheal.deploy_config import NodeHealConfig

#: The construct's id: CDK leaves "Default" out of logical IDs, so every resource keeps the logical ID
#: it had when the stack built the capabilities itself (a changed ID would replace the resource).
NODEHEAL_CONSTRUCT_ID = "Default"


class NodeHealStack(Stack):
    def __init__(self, scope: Construct, id_: str, *, config: NodeHealConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            id_,
            description="NodeHeal: event-driven remediation of unhealthy GPU nodes on Amazon EKS",
            **kwargs,
        )
        self.config = config
        self.nodeheal = NodeHeal(self, NODEHEAL_CONSTRUCT_ID, config=config)
        # The capabilities under their old names: tests and tools address them through the stack.
        self.encryption = self.nodeheal.encryption
        self.ledger = self.nodeheal.ledger
        self.notifications = self.nodeheal.notifications
        self.workflow = self.nodeheal.workflow
        self.ingest = self.nodeheal.ingest
        self.finalizer = self.nodeheal.finalizer
        self.access = self.nodeheal.access
        self.exporter_access = self.nodeheal.exporter_access
        self.event_schemas = self.nodeheal.event_schemas
        self.observability = self.nodeheal.observability
        self.nodeheal.add_stack_outputs()
