"""Which KMS key protects what.

Without ``security.kmsKeyArn`` the stack owns one customer managed key for the messages it holds:
the notifications topic and the two dead-letter queues. They need a customer managed key, not
the AWS managed ``alias/aws/sns`` or ``alias/aws/sqs``: CloudWatch alarms publish to the topic as
``cloudwatch.amazonaws.com`` and EventBridge writes undeliverable events to the delivery DLQ as
``events.amazonaws.com``, and an AWS managed key's policy cannot be edited to let either in
("Configure KMS permissions for AWS services",
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html).
The ledger and the log groups keep their services' own encryption.

With ``security.kmsKeyArn`` that key protects all of them: the ledger, every log group, the topic and
the queues. It is imported, so its key policy is the owner's to write: README "Hardening" lists
what it must allow. A CloudFormation rule refuses a deployment to another Region than the key's
before any resource is touched, since none of these services can use a key from another Region.
"""

from __future__ import annotations

from aws_cdk import Aws, CfnRule, CfnRuleAssertion, Fn, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from nodeheal.deploy_config import CustomerKey

#: Service principals the stack-owned key admits, with why. Each may only encrypt and decrypt data
#: keys; the key policy's account statement (CDK's default) leaves every other use to IAM.
MESSAGE_KEY_SERVICES: dict[str, str] = {
    "cloudwatch.amazonaws.com": "AllowCloudWatchAlarmsToPublish",
    "events.amazonaws.com": "AllowEventBridgeToWriteDeadLetters",
}
MESSAGE_KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey*")


class EncryptionConstruct(Construct):
    def __init__(self, scope: Construct, id_: str, *, customer_key: CustomerKey | None) -> None:
        super().__init__(scope, id_)
        #: The owner's key, or None: then the ledger and the log groups use their services' keys.
        self.customer_key: kms.IKey | None = None
        if customer_key is not None:
            self.customer_key = kms.Key.from_key_arn(self, "CustomerKey", customer_key.arn)
            self._build_region_rule(customer_key)
        #: The key of the topic and the dead-letter queues.
        self.messages_key: kms.IKey = self.customer_key or self._build_messages_key()

    def _build_messages_key(self) -> kms.Key:
        key = kms.Key(
            self,
            "MessagesKey",
            description="NodeHeal notifications topic and dead-letter queues",
            enable_key_rotation=True,
            # The topic delivers at once and the queues hold dead letters a person reads within
            # their 14-day retention: nothing outlives the stack that needs this key.
            removal_policy=RemovalPolicy.DESTROY,
        )
        for service, sid in MESSAGE_KEY_SERVICES.items():
            key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=sid,
                    principals=[iam.ServicePrincipal(service)],
                    actions=list(MESSAGE_KEY_ACTIONS),
                    resources=["*"],
                )
            )
        return key

    def _build_region_rule(self, customer_key: CustomerKey) -> None:
        CfnRule(
            self,
            "CustomerKeyRegion",
            assertions=[
                CfnRuleAssertion(
                    assert_=Fn.condition_equals(Aws.REGION, customer_key.region),
                    assert_description=(
                        f"security.kmsKeyArn is a key in {customer_key.region}: deploy the stack in "
                        "that Region, or name a key of the stack's Region (DynamoDB, CloudWatch Logs, "
                        "SNS and SQS use keys of their own Region only)."
                    ),
                )
            ],
        )
