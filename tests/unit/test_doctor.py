"""The doctor's checks over in-memory ports: every way a check fails, and what it tells the person.

tests/e2e/test_doctor.py runs the command against the synthesized stack in moto and the fake API
server; here each failure the e2e setup cannot easily produce (a stack mid-update, a disabled rule,
an AWS call refused...) is checked on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from nodeheal import stack_outputs
from nodeheal.actions import Mode
from nodeheal.aws.deployment import AlarmView, BotoDeployment, DeployedRule, StackView
from nodeheal.aws.eks_access import ClusterAccess
from nodeheal.config import RemediationSettings, ReplaceSettings
from nodeheal.doctor import (
    REVIEW_ACCESS,
    CheckResult,
    Inputs,
    KubeSide,
    Report,
    examine,
    needed_permissions,
    sample_fault_event,
)
from nodeheal.errors import KubernetesApiUnavailableError
from nodeheal.events import EXPORTER_HEARTBEATS_METRIC
from nodeheal.grants import Permission
from nodeheal.kube.access_review import AccessAnswer
from nodeheal.kube_views import LiveNode
from nodeheal.patterns import match
from nodeheal.rbac import KUBERNETES_RULES, NODE_DELETE, NODECLAIM_DELETE
from nodeheal.workflow.preview import LedgerReader
from tests.clock import NOW
from tests.deployment import MemoryEksAccess
from tests.unit.workflow.fakes import CLUSTER

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "arn:aws:sns:us-west-2:123456789012:NodeHeal-topic"
STATE_MACHINE = "arn:aws:states:us-west-2:123456789012:stateMachine:NodeHeal-remediation"
PATTERN = {
    "source": [{"prefix": "nodeheal.exporter."}, "nodeheal.exporter"],
    "detail-type": ["Node Condition Changed"],
    "detail": {"cluster": [CLUSTER], "condition": {"type": ["GPUProblem"], "status": ["True"]}},
}
HEARTBEAT_PATTERN = {
    "source": [{"prefix": "nodeheal.exporter."}],
    "detail-type": ["Exporter Heartbeat"],
    "detail": {"cluster": [CLUSTER]},
}


def role(function: str) -> str:
    return f"arn:aws:iam::123456789012:role/NodeHeal-{function}-role"


def outputs() -> dict[str, str]:
    values = dict.fromkeys(stack_outputs.required_outputs([CLUSTER], KUBERNETES_RULES), "x")
    values[stack_outputs.STATE_MACHINE_ARN] = STATE_MACHINE
    values[stack_outputs.NOTIFICATIONS_TOPIC_ARN] = TOPIC
    values[stack_outputs.EVENT_BUS_NAME] = "nodeheal"
    values[stack_outputs.LEDGER_TABLE_NAME] = "ledger"
    for function in KUBERNETES_RULES:
        values[stack_outputs.remediator_role_output(function)] = role(function)
    return values


def refused(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, operation)


@dataclass
class FakeDeployment:
    view: StackView | None = field(
        default_factory=lambda: StackView("NodeHeal", "UPDATE_COMPLETE", outputs())
    )
    machine_status: str = "ACTIVE"
    #: Settings that say full while the environment says dry-run: the environment decides (D4).
    settings: RemediationSettings = field(default_factory=lambda: RemediationSettings(mode=Mode.FULL))
    mode: Mode | None = Mode.DRY_RUN
    rule_list: list[DeployedRule] = field(
        default_factory=lambda: [
            DeployedRule("ingest", PATTERN, "ENABLED", 1),
            DeployedRule("heartbeats", HEARTBEAT_PATTERN, "ENABLED", 1),
        ]
    )
    heard: datetime | None = NOW - timedelta(seconds=50)
    #: Operation name -> the error its call raises.
    failing: dict[str, Exception] = field(default_factory=dict)

    def _call(self, operation: str) -> None:
        if operation in self.failing:
            raise self.failing[operation]

    def stack(self, name: str) -> StackView | None:
        self._call("DescribeStacks")
        return self.view

    def state_machine(self, arn: str) -> tuple[str, RemediationSettings]:
        self._call("DescribeStateMachine")
        return self.machine_status, self.settings

    def function_mode(self, function_name: str) -> Mode | None:
        self._call("GetFunctionConfiguration")
        return self.mode

    def rules(self, bus: str) -> list[DeployedRule]:
        self._call("ListRules")
        return self.rule_list

    def matches(self, pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
        self._call("TestEventPattern")
        return match(pattern, event).matched

    def alarms_notifying(self, topic_arn: str) -> list[AlarmView]:
        self._call("DescribeAlarms")
        alarm = AlarmView(
            "heartbeat", "NodeHeal", EXPORTER_HEARTBEATS_METRIC, {"cluster": CLUSTER}, 60, 10, "OK"
        )
        return [alarm] if topic_arn == TOPIC else []

    def last_datapoint(self, alarm: AlarmView, since: datetime, until: datetime) -> datetime | None:
        self._call("GetMetricStatistics")
        return self.heard if self.heard is not None and since <= self.heard <= until else None


@dataclass
class FakeReviews:
    """RBAC as the shipped manifest grants it, unless told otherwise."""

    may_review: bool = True
    denied: set[tuple[str, Permission]] = field(default_factory=set)
    asked: list[tuple[str, tuple[str, ...], Permission]] = field(default_factory=list)

    def may_i(self, permission: Permission, namespace: str = "") -> AccessAnswer:
        return AccessAnswer(self.may_review if permission == REVIEW_ACCESS else True)

    def may(
        self, user: str, groups: Sequence[str], permission: Permission, namespace: str = ""
    ) -> AccessAnswer:
        self.asked.append((user, tuple(groups), permission))
        return AccessAnswer((groups[0], permission) not in self.denied)


class NoNodes:
    def get(self, name: str) -> LiveNode | None:
        return None

    def list(self, label_selector: str | None = None) -> list[LiveNode]:
        return []


def eks() -> MemoryEksAccess:
    memory = MemoryEksAccess(clusters={CLUSTER: ClusterAccess("ACTIVE", "API")})
    for function in KUBERNETES_RULES:
        memory.add(CLUSTER, role(function), (f"nodeheal-{function}",))
    return memory


def no_ledger(table: str) -> LedgerReader:
    raise AssertionError("no node check here")


@dataclass
class Doctor:
    deployment: FakeDeployment = field(default_factory=FakeDeployment)
    eks: MemoryEksAccess = field(default_factory=eks)
    reviews: FakeReviews = field(default_factory=FakeReviews)
    kube_error: Exception | None = None

    def run(self, cluster: str = CLUSTER) -> Report:
        def kube() -> KubeSide:
            if self.kube_error is not None:
                raise self.kube_error
            return KubeSide(self.reviews, NoNodes())

        return examine(
            Inputs(
                stack="NodeHeal",
                cluster=cluster,
                region="us-west-2",
                deployment=self.deployment,
                eks=self.eks,
                kube=kube,
                ledger=no_ledger,
                now=NOW,
            )
        )


def checks(report: Report) -> dict[str, CheckResult]:
    return {check.check: check for check in report.checks}


def failed(report: Report) -> list[str]:
    return [check.check for check in report.checks if not check.ok]


def test_a_healthy_deployment_is_all_ok() -> None:
    report = Doctor().run()
    assert report.ok and failed(report) == []
    assert checks(report)["workflow"].summary.endswith(
        "mode dry-run (NODEHEAL_MODE of NodeHeal-admit; the settings say full, the function's environment "
        "decides (D4))"
    )


@pytest.mark.parametrize(
    ("status", "fix"),
    [
        ("UPDATE_IN_PROGRESS", "wait for the stack operation to finish"),
        ("UPDATE_ROLLBACK_COMPLETE", "the last update was rolled back and the previous version runs"),
        ("ROLLBACK_COMPLETE", "a ROLLBACK_COMPLETE stack must be deleted before it is deployed again"),
    ],
)
def test_a_stack_that_is_not_settled_fails(status: str, fix: str) -> None:
    doctor = Doctor()
    assert doctor.deployment.view is not None
    doctor.deployment.view = replace(doctor.deployment.view, status=status, status_reason="because")
    stack = checks(doctor.run())["stack"]
    assert not stack.ok and stack.summary == f"stack NodeHeal: status {status} (because)"
    assert fix in stack.fix


def test_an_older_stack_without_an_output_is_told_to_deploy_this_release() -> None:
    doctor = Doctor()
    view = doctor.deployment.view
    assert view is not None
    doctor.deployment.view = replace(
        view, outputs={k: v for k, v in view.outputs.items() if k != stack_outputs.DASHBOARD_URL}
    )
    report = doctor.run()
    stack = checks(report)["stack"]
    assert stack.summary == "stack NodeHeal: missing output(s) DashboardUrl"
    assert stack.fix.startswith("deploy this release of NodeHeal")
    # What the outputs that are there allow is still checked.
    assert failed(report) == ["stack"]


def test_an_aws_call_refused_names_the_action_and_where_the_list_is() -> None:
    doctor = Doctor()
    doctor.deployment.failing["GetMetricStatistics"] = refused("GetMetricStatistics")
    heartbeat = checks(doctor.run())["heartbeat"]
    assert heartbeat.summary == "GetMetricStatistics: AccessDeniedException: not authorized"
    assert "may not call GetMetricStatistics" in heartbeat.fix and "docs/operations.md" in heartbeat.fix


def test_a_workflow_that_is_not_active_fails_and_an_unreadable_one_stops_the_rule_checks() -> None:
    doctor = Doctor()
    doctor.deployment.machine_status = "DELETING"
    assert checks(doctor.run())["workflow"].fix == "deploy the stack again (npx cdk deploy NodeHeal)"
    doctor = Doctor()
    doctor.deployment.failing["DescribeStateMachine"] = refused("DescribeStateMachine")
    report = checks(doctor.run())
    assert report["rule"].summary == "not checked: it needs the workflow check"
    assert report["heartbeat-rule"].summary == "not checked: it needs the workflow check"


def test_without_a_mode_in_the_environment_the_settings_decide() -> None:
    doctor = Doctor()
    doctor.deployment.mode = None
    assert checks(doctor.run())["workflow"].summary.endswith("mode full (the deployed settings)")


def test_an_unreachable_cluster_api_says_how_to_reach_it() -> None:
    doctor = Doctor(kube_error=KubernetesApiUnavailableError("connection refused"))
    report = checks(doctor.run())
    assert report["kubernetes"].summary == f"cannot ask the API server of {CLUSTER}: connection refused"
    assert "--kubeconfig/--context" in report["kubernetes"].fix and "--eks" in report["kubernetes"].fix
    assert report["access:admit"].summary == "not checked: it needs the kubernetes check (access reviews)"


def test_the_access_review_names_the_functions_session_and_every_group() -> None:
    doctor = Doctor()
    doctor.run()
    users = {(user, groups) for user, groups, _ in doctor.reviews.asked}
    assert (
        "arn:aws:sts::123456789012:assumed-role/NodeHeal-admit-role/NodeHeal-admit",
        ("nodeheal-admit", "system:authenticated"),
    ) in users
    asked = {p for user, _, p in doctor.reviews.asked if user.endswith("/NodeHeal-terminate")}
    assert asked == set(needed_permissions("terminate", RemediationSettings()))


def test_node_deletion_is_asked_only_when_configured() -> None:
    delete = next(NODE_DELETE.rules[0].permissions())
    assert delete not in needed_permissions("terminate", RemediationSettings())
    assert delete in needed_permissions("terminate", RemediationSettings(delete_node_after_terminate=True))
    assert delete not in needed_permissions("reboot", RemediationSettings(delete_node_after_terminate=True))


def test_nodeclaim_deletion_is_asked_only_with_replace_method_delete_nodeclaim() -> None:
    wanted = set(NODECLAIM_DELETE.rules[0].permissions())
    by_nodeclaim = RemediationSettings(replace=ReplaceSettings(method="delete-nodeclaim"))
    assert not wanted & set(needed_permissions("terminate", RemediationSettings()))
    assert wanted <= set(needed_permissions("terminate", by_nodeclaim))
    assert not wanted & set(needed_permissions("reboot", by_nodeclaim))


def test_a_custom_group_prefix_gets_the_render_command() -> None:
    doctor = Doctor()
    doctor.eks.add(CLUSTER, role("drain"), ("acme-drain",))
    doctor.reviews.denied = {("acme-drain", p) for p in needed_permissions("drain", None)}
    drain = checks(doctor.run())["access:drain"]
    assert not drain.ok and drain.summary.startswith("RBAC refuses drain (acme-drain): get nodes, list pods")
    assert drain.fix == (
        "render the RBAC for your group prefix and apply it: NODEHEAL_GROUP_PREFIX=acme make rbac && "
        "kubectl apply -f deploy/rbac/remediator.yaml"
    )


def test_an_access_entry_of_another_type_fails() -> None:
    doctor = Doctor()
    key = (CLUSTER, role("cordon"))
    doctor.eks.entries[key] = replace(doctor.eks.entries[key], type="EC2_LINUX")
    cordon = checks(doctor.run())["access:cordon"]
    assert cordon.summary == "the access entry of NodeHeal-cordon-role is of type EC2_LINUX, not STANDARD"
    assert "aws eks delete-access-entry" in cordon.fix


@pytest.mark.parametrize(
    ("seconds_ago", "ok"),
    [(600 + 59, True), (600 + 61, False)],
    ids=["window-plus-one-period", "older"],
)
def test_the_heartbeat_window_is_the_alarms(seconds_ago: int, ok: bool) -> None:
    """A datapoint is stamped with the start of its minute: one period of slack past the window."""
    doctor = Doctor()
    doctor.deployment.heard = NOW - timedelta(seconds=seconds_ago)
    heartbeat = checks(doctor.run())["heartbeat"]
    assert heartbeat.ok is ok
    assert heartbeat.details["windowMinutes"] == 10


def test_a_disabled_rule_and_a_rule_without_a_target() -> None:
    doctor = Doctor()
    doctor.deployment.rule_list[0] = replace(doctor.deployment.rule_list[0], state="DISABLED")
    doctor.deployment.rule_list[1] = replace(doctor.deployment.rule_list[1], targets=0)
    report = checks(doctor.run())
    assert report["rule"].fix == "aws events enable-rule --name ingest --event-bus-name nodeheal"
    assert report["heartbeat-rule"].summary == "rule heartbeats has no target: matched events reach nothing"


def test_a_bus_without_the_rules_and_rules_that_cannot_be_listed() -> None:
    doctor = Doctor()
    doctor.deployment.rule_list = []
    report = checks(doctor.run())
    assert report["rule"].summary == "no rule on bus nodeheal takes 'Node Condition Changed' events"
    doctor = Doctor()
    doctor.deployment.failing["ListRules"] = refused("ListRules")
    report = checks(doctor.run())
    assert report["rule"].summary.startswith("ListRules: AccessDeniedException")
    assert report["heartbeat-rule"].summary == "not checked: it needs the rule check"


def test_the_sample_fault_is_in_the_deployed_scope() -> None:
    settings = RemediationSettings.from_json(
        {
            **RemediationSettings().to_json(),
            "scope": {
                "conditions": [{"type": "AcceleratedHardwareReady", "statuses": ["False"]}],
                "nodeLabels": {"karpenter.sh/nodepool": ["gpu", "training"]},
            },
        }
    )
    event = sample_fault_event(CLUSTER, settings, "nodeheal.exporter.training-on-eks", "us-west-2", NOW)
    detail = event["detail"]
    assert (detail["condition"]["type"], detail["condition"]["status"]) == (
        "AcceleratedHardwareReady",
        "False",
    )
    assert detail["node"]["labels"] == {"karpenter.sh/nodepool": "gpu"}
    assert detail["schemaVersion"] == "1.1" and detail["node"]["uid"]
    assert {"version", "id", "account", "time", "region", "resources", "source", "detail-type"} <= set(event)


def test_operations_lists_every_check_and_every_aws_action_doctor_calls() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Checking a deployment") : text.index("## Rolling out safely")]
    listed = set(re.findall(r"^\| `([a-z:<>-]+)`", section, flags=re.MULTILINE))
    listed |= set(re.findall(r"^\| `[a-z-]+`, `([a-z-]+)`", section, flags=re.MULTILINE))
    produced = {c.check.split(":")[0] for c in Doctor().run().checks} | {"node"}
    assert {c.split(":")[0] for c in listed} == produced
    actions = set(re.findall(r"`([a-z0-9]+:[A-Za-z]+)`", section))
    fake_calls = {"DescribeStacks", "DescribeStateMachine", "GetFunctionConfiguration", "ListRules"}
    fake_calls |= {"TestEventPattern", "DescribeAlarms", "GetMetricStatistics"}
    assert fake_calls <= {action.split(":")[1] for action in actions}


def test_long_lookbacks_widen_the_period_to_stay_within_one_call() -> None:
    client = boto3.client("cloudwatch", region_name="us-west-2")
    session = type("Session", (), {"client": lambda self, service: client})()
    alarm = AlarmView(
        "a",
        "NodeHeal",
        EXPORTER_HEARTBEATS_METRIC,
        {"cluster": CLUSTER, "service": "nodeheal"},
        60,
        1440,
        "OK",
    )
    until = NOW
    since = until - timedelta(minutes=1440)
    with Stubber(client) as stubber:
        stubber.add_response(
            "get_metric_statistics",
            {
                "Label": EXPORTER_HEARTBEATS_METRIC,
                "Datapoints": [{"Timestamp": NOW - timedelta(hours=2), "Sum": 1.0}],
            },
            {
                "Namespace": "NodeHeal",
                "MetricName": EXPORTER_HEARTBEATS_METRIC,
                "Dimensions": [
                    {"Name": "cluster", "Value": CLUSTER},
                    {"Name": "service", "Value": "nodeheal"},
                ],
                "StartTime": since,
                # 24 h and one period at 60 s would be 1441 datapoints, over the limit of one call.
                "EndTime": until + timedelta(seconds=120),
                "Period": 120,
                "Statistics": ["Sum"],
            },
        )
        assert BotoDeployment(session).last_datapoint(alarm, since, until) == NOW - timedelta(hours=2)
        stubber.assert_no_pending_responses()


def test_testeventpattern_is_read_from_the_documented_answer() -> None:
    """``{"Result": true|false}`` (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_TestEventPattern.html)."""
    client = boto3.client("events", region_name="us-west-2")
    session = type("Session", (), {"client": lambda self, service: client})()
    event = {
        "source": "nodeheal.exporter.training-on-eks",
        "detail-type": "Node Condition Changed",
        "detail": {},
    }
    with Stubber(client) as stubber:
        for answer in (True, False):
            stubber.add_response(
                "test_event_pattern",
                {"Result": answer},
                {"EventPattern": json.dumps(PATTERN), "Event": json.dumps(event)},
            )
            assert BotoDeployment(session).matches(PATTERN, event) is answer
        stubber.add_response("test_event_pattern", {})
        with pytest.raises(ValueError, match="without a result"):
            BotoDeployment(session).matches(PATTERN, event)
