"""cdk-nag AwsSolutions: zero unacknowledged findings, and every acknowledgment carries a reason.

cdk-nag 3 is a CDK policy-validation plugin: findings land in the assembly's validation report
(errors also fail synthesis in-process), acknowledgments are ``aws:cdk:acknowledged-rules`` metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack, Validations
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

from tests.infrastructure.conftest import Synthesized

ACKNOWLEDGED = "aws:cdk:acknowledged-rules"


def acknowledgments(root: IConstruct) -> dict[str, dict[str, Any]]:
    """Construct path -> {rule id: reason} for every acknowledgment under ``root``."""
    found: dict[str, dict[str, Any]] = {}
    for construct in root.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == ACKNOWLEDGED:
                # Stored as "<namespace>::<rule id>"; the namespace is CDK's, the rule id cdk-nag's.
                rules = {rule_id.split("::", 1)[1]: reason for rule_id, reason in entry.data.items()}
                found.setdefault(construct.node.path, {}).update(rules)
    return found


@pytest.fixture(params=["default", "full", "keyed"])
def synthesized(request: pytest.FixtureRequest) -> Synthesized:
    return request.getfixturevalue(f"{request.param}_stack")  # type: ignore[no-any-return]


def test_validation_report_has_no_findings(synthesized: Synthesized) -> None:
    # A report is only written for plugins with findings; each must be empty.
    report = synthesized.validation_report
    findings = [
        (plugin["pluginName"], violation["ruleName"], violation["severity"], constructs["constructPath"])
        for plugin in report["pluginReports"]
        for violation in plugin.get("violations", [])
        for constructs in violation["violatingConstructs"]
    ]
    assert findings == []


def test_no_cdk_warnings_or_errors(synthesized: Synthesized) -> None:
    annotations = Annotations.from_stack(synthesized.stack)
    assert annotations.find_error("*", Match.any_value()) == []
    assert annotations.find_warning("*", Match.any_value()) == []


def test_every_acknowledgment_names_an_awssolutions_rule_and_a_reason(synthesized: Synthesized) -> None:
    found = acknowledgments(synthesized.stack)
    assert found, "the stack acknowledges findings; none found means the metadata format changed"
    for path, rules in found.items():
        for rule_id, reason in rules.items():
            assert rule_id.startswith("AwsSolutions-"), (path, rule_id)
            assert isinstance(reason, str) and len(reason.split()) >= 6, (path, rule_id, reason)


def test_acknowledged_rules_are_the_expected_ones(default_stack: Synthesized) -> None:
    rule_ids = {rule_id.split("[")[0] + ("[" + rule_id.split("[")[1].split("::")[0] if "[" in rule_id else "")
                for rules in acknowledgments(default_stack.stack).values() for rule_id in rules}  # fmt: skip
    assert rule_ids == {
        "AwsSolutions-L1",
        "AwsSolutions-IAM5[Resource",
        "AwsSolutions-IAM5[Action",
        "AwsSolutions-SQS3",
    }


def test_nag_reports_an_unacknowledged_finding(tmp_path: Path) -> None:
    """Guards the test above: a non-compliant resource must surface in the report."""
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Probe")
    sqs.Queue(stack, "Plain", encryption=sqs.QueueEncryption.UNENCRYPTED)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(RuntimeError, match="AwsSolutions-SQS"):
        app.synth()
