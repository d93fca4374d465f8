"""The demo shows the notification about its node as a subscriber of the topic received it: the
subject, the message attributes and the body, exactly as SNS delivered them."""

from __future__ import annotations

from types import SimpleNamespace

from nodeheal.commands.demo import notification_section
from nodeheal.sim.local_pipeline.wiring import ReceivedNotification

TOPIC_ARN = "arn:aws:sns:us-west-2:123456789012:NodeHeal-notifications"
SUBJECT_NODE = "ip-10-0-136-45.us-west-2.compute.internal"
OTHER_NODE = "ip-10-0-40-80.us-west-2.compute.internal"


def received(node: str, outcome: str, body: str) -> ReceivedNotification:
    return ReceivedNotification(
        subject=f"NodeHeal {outcome}: {node} (training-on-eks) Xid 79",
        message=body,
        attributes={"severity": "info", "node": node, "outcome": outcome},
    )


def pipeline(*notifications: ReceivedNotification) -> SimpleNamespace:
    return SimpleNamespace(notifications=list(notifications), aws=SimpleNamespace(topic_arn=TOPIC_ARN))


def test_the_subjects_notification_is_shown_whole_and_the_others_counted() -> None:
    mine = received(SUBJECT_NODE, "replaced", "Outcome:   replaced - instance i-1 terminated\nInstance:  i-1")
    other = received(OTHER_NODE, "refused", "Outcome:   refused")
    text = notification_section(pipeline(mine, other), SUBJECT_NODE)
    assert text.splitlines() == [
        "notification about ip-10-0-136-45, as a subscriber of topic NodeHeal-notifications received it:",
        f"  Subject: NodeHeal replaced: {SUBJECT_NODE} (training-on-eks) Xid 79",
        f"  Message attributes: node={SUBJECT_NODE}, outcome=replaced, severity=info",
        "",
        "  Outcome:   replaced - instance i-1 terminated",
        "  Instance:  i-1",
        "",
        "1 more notification(s): the timeline's sns lines give their subjects",
    ]


def test_the_latest_about_the_node_is_the_one_shown() -> None:
    first = received(SUBJECT_NODE, "rebooted", "Outcome:   rebooted")
    second = received(SUBJECT_NODE, "replaced", "Outcome:   replaced")
    assert "  Outcome:   replaced" in notification_section(pipeline(first, second), SUBJECT_NODE)


def test_with_none_about_the_node_the_latest_is_shown() -> None:
    text = notification_section(pipeline(received(OTHER_NODE, "failed", "Outcome:   failed")), SUBJECT_NODE)
    assert text.startswith("notification about ip-10-0-40-80,")
    assert "more notification" not in text


def test_no_notification_says_so() -> None:
    assert notification_section(pipeline(), SUBJECT_NODE) == (
        "notifications: none published to topic NodeHeal-notifications"
    )
