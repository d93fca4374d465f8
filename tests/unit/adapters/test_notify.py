"""SNS notifier against moto, and the subject rules SNS enforces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodeheal.aws.notify import (
    MAX_MESSAGE_BYTES,
    MAX_SUBJECT_LENGTH,
    SnsNotifier,
    clean_message,
    clean_subject,
)
from nodeheal.workflow.ports import Notification

REGION = "us-west-2"


@pytest.fixture
def topic() -> Iterator[tuple[Any, Any, str]]:
    """An SNS topic with an SQS queue subscribed (raw delivery off), to read what was published."""
    with mock_aws():
        sns = boto3.client("sns", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        topic_arn = sns.create_topic(Name="nodeheal")["TopicArn"]
        queue_url = sqs.create_queue(QueueName="probe")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
        yield sns, (sqs, queue_url), topic_arn


def _received(probe: Any) -> dict[str, Any]:
    sqs, queue_url = probe
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    assert len(messages) == 1
    return dict(json.loads(messages[0]["Body"]))


def test_publish_delivers_subject_message_and_string_attributes(topic: tuple[Any, Any, str]) -> None:
    sns, probe, topic_arn = topic
    notifier = SnsNotifier(sns, topic_arn)
    message_id = notifier.publish(
        Notification(
            subject="NodeHeal replaced ip-10-0-1-2 (Xid 79)",
            message="GPU has fallen off the bus; instance terminated.",
            attributes={"cluster": "training-on-eks", "action": "replace", "empty": ""},
        )
    )
    assert message_id
    body = _received(probe)
    assert body["MessageId"] == message_id
    assert body["Subject"] == "NodeHeal replaced ip-10-0-1-2 (Xid 79)"
    assert body["Message"] == "GPU has fallen off the bus; instance terminated."
    assert body["MessageAttributes"] == {
        "cluster": {"Type": "String", "Value": "training-on-eks"},
        "action": {"Type": "String", "Value": "replace"},
    }


def test_publish_cleans_a_subject_sns_would_reject(topic: tuple[Any, Any, str]) -> None:
    sns, probe, topic_arn = topic
    subject = "  Nœud défaillant\n" + "x" * 300
    SnsNotifier(sns, topic_arn).publish(Notification(subject=subject, message="m", attributes={}))
    received = _received(probe)["Subject"]
    assert received == clean_subject(subject)
    assert received.startswith("Nud defaillant x")  # "œ" has no ASCII decomposition
    assert len(received) == MAX_SUBJECT_LENGTH
    assert received.endswith("...")
    assert received.isascii()


def test_blank_subject_is_omitted(topic: tuple[Any, Any, str]) -> None:
    sns, probe, topic_arn = topic
    SnsNotifier(sns, topic_arn).publish(Notification(subject="\n\t ", message="m", attributes={}))
    body = _received(probe)
    assert body.get("Subject") in (None, "")
    assert body["Message"] == "m"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("plain subject", "plain subject"),
        ("tab\tand\r\nnewline", "tab and newline"),
        ("GPU 🔥 down", "GPU down"),
        ("\x00\x07bell", "bell"),
        ("é" * 200, "e" * 97 + "..."),
        ("a" * MAX_SUBJECT_LENGTH, "a" * MAX_SUBJECT_LENGTH),
    ],
)
def test_clean_subject(raw: str, expected: str) -> None:
    assert clean_subject(raw) == expected


def test_long_message_is_truncated_on_a_character_boundary() -> None:
    message = "€" * MAX_MESSAGE_BYTES
    cleaned = clean_message(message)
    assert len(cleaned.encode("utf-8")) <= MAX_MESSAGE_BYTES
    assert cleaned.endswith("[truncated]")
    assert clean_message("short") == "short"


@pytest.mark.parametrize("name", ["AWS.reserved", "has space", "", "x" * 257])
def test_invalid_attribute_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="attribute name"):
        Notification(subject="s", message="m", attributes={name: "v"})
