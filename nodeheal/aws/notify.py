"""Human notifications through SNS (e-mail, chat integrations, paging).

SNS refuses a subject that is longer than 100 characters, contains a line break or control
character, is not ASCII, or does not start with a letter, digit or punctuation mark. Subjects are
built from node names, condition reasons and kernel messages, so they are cleaned here rather than
trusted: a notification about a dead GPU must not itself fail on a stray character.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from nodeheal.workflow.ports import Notification

MAX_SUBJECT_LENGTH = 100
#: SNS's message limit is 256 KB of UTF-8; leave room for the envelope e-mail adds.
MAX_MESSAGE_BYTES = 250 * 1024
ELLIPSIS = "..."
_WHITESPACE_RUN = re.compile(r"\s+")


def clean_subject(subject: str) -> str:
    """An SNS-acceptable subject: ASCII, one line, starting with a visible character, <= 100 chars."""
    # NFKD splits accented letters into letter + mark, so "Noeud défaillant" keeps its letters.
    ascii_text = unicodedata.normalize("NFKD", subject).encode("ascii", "ignore").decode("ascii")
    printable = "".join(ch if ch.isprintable() else " " for ch in ascii_text)
    text = _WHITESPACE_RUN.sub(" ", printable).strip()
    if len(text) > MAX_SUBJECT_LENGTH:
        text = text[: MAX_SUBJECT_LENGTH - len(ELLIPSIS)].rstrip() + ELLIPSIS
    return text


def clean_message(message: str) -> str:
    encoded = message.encode("utf-8")
    if len(encoded) <= MAX_MESSAGE_BYTES:
        return message
    marker = "\n[truncated]"
    cut = encoded[: MAX_MESSAGE_BYTES - len(marker.encode("utf-8"))]
    # errors="ignore" drops a multi-byte character the cut split in half.
    return cut.decode("utf-8", errors="ignore") + marker


class SnsNotifier:
    def __init__(self, sns_client: Any, topic_arn: str) -> None:
        self._sns = sns_client
        self._topic_arn = topic_arn

    @property
    def topic_arn(self) -> str:
        return self._topic_arn

    def publish(self, notification: Notification) -> str:
        """Publish and return the SNS message id."""
        request: dict[str, Any] = {
            "TopicArn": self._topic_arn,
            "Message": clean_message(notification.message) or "(empty)",
        }
        subject = clean_subject(notification.subject)
        if subject:
            request["Subject"] = subject
        attributes = {
            name: {"DataType": "String", "StringValue": value}
            # SNS rejects an attribute with an empty value; an empty value carries nothing to filter on.
            for name, value in notification.attributes.items()
            if value
        }
        if attributes:
            request["MessageAttributes"] = attributes
        response = self._sns.publish(**request)
        return str(response["MessageId"])
