"""The ledger: one DynamoDB table for per-node locks, remediation records, budgets and breaker state.

Key schema is the contract of ``nodeheal.aws.ledger`` (single-table design): ``pk``/``sk`` strings,
TTL ``expiresAt`` (epoch seconds) so expired locks and old records disappear on their own, and the
``byCluster`` index (``gsi1pk``/``gsi1sk``) for a cluster's history in time order.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "expiresAt"
CLUSTER_INDEX = "byCluster"
CLUSTER_INDEX_PARTITION_KEY = "gsi1pk"
CLUSTER_INDEX_SORT_KEY = "gsi1sk"


class LedgerConstruct(Construct):
    def __init__(self, scope: Construct, id_: str, *, encryption_key: kms.IKey | None = None) -> None:
        super().__init__(scope, id_)
        self.table = self._build_table(encryption_key)
        self._build_cluster_index(self.table)

    def _build_table(self, key: kms.IKey | None) -> dynamodb.Table:
        return dynamodb.Table(
            self,
            "Table",
            # Without security.kmsKeyArn, DynamoDB's own key (no KMS cost, no key policy to keep).
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED if key else None,
            encryption_key=key,
            partition_key=dynamodb.Attribute(name=PARTITION_KEY, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=SORT_KEY, type=dynamodb.AttributeType.STRING),
            # Traffic is a trickle with storms; on-demand needs no capacity planning for either.
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=TTL_ATTRIBUTE,
            # The records are the audit trail of every node NodeHeal touched: keep them on stack
            # deletion and refuse accidental table deletion. No fixed table name, so a redeploy after
            # `cdk destroy` creates a new table beside the kept one instead of failing on its name
            # (removing the kept one: docs/deploy.md, "Uninstall").
            removal_policy=RemovalPolicy.RETAIN,
            deletion_protection=True,
        )

    @staticmethod
    def _build_cluster_index(table: dynamodb.Table) -> None:
        table.add_global_secondary_index(
            index_name=CLUSTER_INDEX,
            partition_key=dynamodb.Attribute(
                name=CLUSTER_INDEX_PARTITION_KEY, type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(name=CLUSTER_INDEX_SORT_KEY, type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )
