"""Human notifications: one SNS topic, encrypted, with the configured e-mail subscriptions and,
optionally, a Slack channel through AWS Chatbot.

The topic's key comes from :mod:`nodeheal.cdk.constructs.encryption`: a customer managed key, never
alias/aws/sns, because CloudWatch alarms cannot publish to a topic encrypted with the AWS managed
key, whose policy cannot grant cloudwatch.amazonaws.com."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_chatbot as chatbot
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from nodeheal.deploy_config import SlackChannel


class NotificationsConstruct(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        emails: Sequence[str],
        key: kms.IKey,
        slack: SlackChannel | None = None,
        name_prefix: str = "NodeHeal",
        topic: sns.ITopic | None = None,
    ) -> None:
        """``topic``: an existing topic to publish to instead of a new one encrypted with ``key``; the
        e-mail subscriptions and the Slack channel are added to it all the same."""
        super().__init__(scope, id_)
        self.key = key
        self.topic_is_owned = topic is None
        self.topic: sns.ITopic = self._build_topic(key) if topic is None else topic
        self._build_email_subscriptions(self.topic, emails)
        self.slack = self._build_slack(slack, name_prefix) if slack else None

    def _build_topic(self, key: kms.IKey) -> sns.Topic:
        return sns.Topic(
            self,
            "Topic",
            display_name="NodeHeal",
            master_key=key,
            enforce_ssl=True,
        )

    @staticmethod
    def _build_email_subscriptions(topic: sns.ITopic, emails: Sequence[str]) -> None:
        for email in emails:
            topic.add_subscription(subscriptions.EmailSubscription(email))

    def _build_slack(self, slack: SlackChannel, name_prefix: str) -> chatbot.SlackChannelConfiguration:
        # Chatbot only relays the topic's messages: its role gets no permissions, and the guardrail
        # caps what anyone could later attach to it at reading CloudWatch.
        return chatbot.SlackChannelConfiguration(
            self,
            "Slack",
            slack_channel_configuration_name=f"{name_prefix}-notifications"[:128],
            slack_workspace_id=slack.workspace_id,
            slack_channel_id=slack.channel_id,
            notification_topics=[self.topic],
            guardrail_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("CloudWatchReadOnlyAccess")],
            logging_level=chatbot.LoggingLevel.ERROR,
            user_role_required=False,
        )
