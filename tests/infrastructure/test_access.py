"""Least privilege: every grant in the template follows from the task's TaskSpec."""

from __future__ import annotations

from typing import Any

import pytest

from nodeheal.cdk.workflow_tasks import (
    ALL_TASKS,
    COUNT_SIGNALS_TASK,
    FINALIZER_TASK,
    INGEST_TASK,
    WORKFLOW_TASKS,
    LedgerItem,
    TaskSpec,
)
from nodeheal.deploy_config import CONTEXT_KEY
from tests.infrastructure.conftest import (
    ROOT,
    Synthesized,
    actions_of,
    cdk_json_context,
    resources_of,
    role_logical_id,
    role_statements,
    synthesize,
)


def statements_with(statements: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [s for s in statements if any(a.startswith(prefix) for a in actions_of(s))]


def cluster_arn(cluster: str) -> dict[str, Any]:
    return {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, ":eks:", {"Ref": "AWS::Region"}, ":",
             {"Ref": "AWS::AccountId"}, f":cluster/{cluster}"],
        ]
    }  # fmt: skip


INSTANCE_ARN = {
    "Fn::Join": [
        "",
        ["arn:", {"Ref": "AWS::Partition"}, ":ec2:", {"Ref": "AWS::Region"}, ":",
         {"Ref": "AWS::AccountId"}, ":instance/*"],
    ]
}  # fmt: skip


def test_every_function_has_its_own_role(default_stack: Synthesized) -> None:
    roles = [role_logical_id(default_stack, spec.name) for spec in ALL_TASKS]
    assert len(set(roles)) == len(ALL_TASKS)
    for role_id in roles:
        trust = default_stack.json["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]
        assert trust["Statement"] == [
            {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
        ]


@pytest.mark.parametrize("spec", ALL_TASKS, ids=lambda spec: spec.name)
def test_ec2_grants_follow_the_spec(default_stack: Synthesized, spec: TaskSpec) -> None:
    ec2 = statements_with(role_statements(default_stack, spec.name), "ec2:")
    mutations = [s for s in ec2 if set(actions_of(s)) & {"ec2:TerminateInstances", "ec2:RebootInstances"}]
    granted = {a for s in mutations for a in actions_of(s)}
    assert granted == set(spec.ec2_mutations)
    for statement in mutations:
        assert resources_of(statement) == [INSTANCE_ARN], "EC2 mutations must never be on '*'"
        assert "Condition" in statement
    star_ec2 = {a for s in ec2 if "*" in resources_of(s) for a in actions_of(s) if a.startswith("ec2:")}
    assert star_ec2 == ({"ec2:DescribeInstances"} if spec.ec2_describe else set()) | set(spec.ec2_reads)
    assert all(a.startswith("ec2:Describe") for a in star_ec2), "only reads may be on '*'"
    # What IAM cannot limit by tag (ReportInstanceStatus) is on the instances, without a condition.
    untagged = [s for s in ec2 if set(actions_of(s)) & set(spec.ec2_untagged_instance_actions)]
    assert {a for s in untagged for a in actions_of(s)} == set(spec.ec2_untagged_instance_actions)
    for statement in untagged:
        assert resources_of(statement) == [INSTANCE_ARN]
        assert "Condition" not in statement


def test_replacing_through_karpenter_takes_terminate_instances_away(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """replace.method delete-nodeclaim: Karpenter terminates the instance, so the terminate role
    keeps the ownership check (DescribeInstances) and may not terminate anything itself."""
    context = {**cdk_json_context()[CONTEXT_KEY], "replace": {"method": "delete-nodeclaim"}}
    karpenter = synthesize(tmp_path_factory.mktemp("delete-nodeclaim"), context)
    terminate = {
        a for s in role_statements(karpenter, "terminate") for a in actions_of(s) if a.startswith("ec2:")
    }
    # The impaired report still goes to EC2 before Karpenter terminates the instance.
    assert terminate == {"ec2:DescribeInstances", "ec2:ReportInstanceStatus"}
    reboot = {a for s in role_statements(karpenter, "reboot") for a in actions_of(s) if a.startswith("ec2:")}
    assert reboot == {"ec2:DescribeInstances", "ec2:RebootInstances"}


@pytest.mark.parametrize("action", ["ec2:TerminateInstances", "ec2:RebootInstances"])
def test_ec2_mutations_require_a_cluster_ownership_tag(full_stack: Synthesized, action: str) -> None:
    spec = next(spec for spec in WORKFLOW_TASKS if action in spec.ec2_mutations)
    conditions = [
        s["Condition"]
        for s in statements_with(role_statements(full_stack, spec.name), "ec2:")
        if action in actions_of(s)
    ]
    expected = []
    for cluster in full_stack.config.clusters:
        expected += [
            {"StringEquals": {f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"}},
            {"StringEquals": {"aws:ResourceTag/eks:cluster-name": cluster}},
            {"StringEquals": {"aws:ResourceTag/eks:eks-cluster-name": cluster}},
        ]
    assert sorted(map(str, conditions)) == sorted(map(str, expected))


#: EC2 actions granted without the ownership-tag condition: reads (no resource-level support) and
#: the impaired report (the Service Authorization Reference lists no tag condition key for it).
UNCONDITIONED_EC2 = frozenset(
    {"ec2:DescribeInstances", "ec2:DescribeCapacityReservations", "ec2:ReportInstanceStatus"}
)


def test_no_role_has_an_ec2_mutation_without_a_condition(full_stack: Synthesized) -> None:
    for policy in full_stack.resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = actions_of(statement)
            if any(a.startswith("ec2:") and a not in UNCONDITIONED_EC2 for a in actions):
                assert statement.get("Condition"), statement
                assert "*" not in resources_of(statement)
            if "ec2:ReportInstanceStatus" in actions:
                # No tag condition exists for it: limited to the account's instances instead.
                assert resources_of(statement) == [INSTANCE_ARN], statement


@pytest.mark.parametrize("spec", ALL_TASKS, ids=lambda spec: spec.name)
def test_describe_cluster_only_on_configured_clusters(full_stack: Synthesized, spec: TaskSpec) -> None:
    eks = statements_with(role_statements(full_stack, spec.name), "eks:")
    if not spec.kubernetes:
        assert eks == []
        return
    (statement,) = eks
    assert actions_of(statement) == ["eks:DescribeCluster"]
    # Order is CDK's (policy minimization sorts resources), not the config's.
    assert sorted(map(str, resources_of(statement))) == sorted(
        str(cluster_arn(c)) for c in full_stack.config.clusters
    )


def test_one_access_entry_per_kubernetes_role_and_cluster(full_stack: Synthesized) -> None:
    entries = full_stack.resources("AWS::EKS::AccessEntry").values()
    pairs = {
        (entry["Properties"]["PrincipalArn"]["Fn::GetAtt"][0], entry["Properties"]["ClusterName"])
        for entry in entries
    }
    expected = {
        (role_logical_id(full_stack, spec.name), cluster)
        for spec in WORKFLOW_TASKS
        if spec.kubernetes
        for cluster in full_stack.config.clusters
    }
    assert pairs == expected
    assert len(entries) == len(expected)
    for entry in entries:
        assert entry["Properties"]["Type"] == "STANDARD"
        assert "AccessPolicies" not in entry["Properties"], "RBAC, not an EKS access policy, grants verbs"


@pytest.mark.parametrize("stack", ["default_stack", "full_stack"])
def test_defect_10_each_function_is_in_its_own_kubernetes_group(
    request: pytest.FixtureRequest, stack: str
) -> None:
    synthesized: Synthesized = request.getfixturevalue(stack)
    prefix = synthesized.config.kubernetes_group_prefix
    delete_nodes = synthesized.config.remediation.delete_node_after_terminate
    by_role = {
        entry["Properties"]["PrincipalArn"]["Fn::GetAtt"][0]: entry["Properties"]["KubernetesGroups"]
        for entry in synthesized.resources("AWS::EKS::AccessEntry").values()
    }
    for spec in WORKFLOW_TASKS:
        if not spec.kubernetes:
            continue
        expected = [f"{prefix}-{spec.name}"]
        if spec.name == "terminate" and delete_nodes:
            expected.append(f"{prefix}-terminate-delete-nodes")
        assert by_role[role_logical_id(synthesized, spec.name)] == expected, spec.name
    # The full context turns deleteNodeAfterTerminate on and the default leaves it off: both paths.
    assert (stack == "full_stack") is delete_nodes


def ledger_statements(synthesized: Synthesized, spec: TaskSpec) -> list[dict[str, Any]]:
    return statements_with(role_statements(synthesized, spec.name), "dynamodb:")


def table_arn(synthesized: Synthesized) -> dict[str, Any]:
    table_id = next(iter(synthesized.resources("AWS::DynamoDB::Table")))
    return {"Fn::GetAtt": [table_id, "Arn"]}


def ledger_grants(statements: list[dict[str, Any]]) -> set[tuple[frozenset[str], tuple[str, ...], str]]:
    """(actions, leading keys, resource) of each statement, order-free (policy minimization sorts)."""
    return {
        (
            frozenset(actions_of(statement)),
            tuple(sorted(statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])),
            str(statement["Resource"]),
        )
        for statement in statements
    }


@pytest.mark.parametrize("spec", ALL_TASKS, ids=lambda spec: spec.name)
def test_ledger_access_follows_the_spec(full_stack: Synthesized, spec: TaskSpec) -> None:
    """Item actions only, on the table only (no index, Scan, batch or table actions), each limited
    to the partition keys of the items the task touches in the configured clusters."""
    clusters = full_stack.config.clusters
    statements = ledger_statements(full_stack, spec)
    assert len(statements) == len(spec.ledger)
    assert all(set(statement) == {"Action", "Condition", "Effect", "Resource"} for statement in statements)
    assert ledger_grants(statements) == {
        (
            frozenset(grant.actions),
            tuple(sorted(key for item in grant.items for key in item.leading_keys(clusters))),
            str(table_arn(full_stack)),
        )
        for grant in spec.ledger
    }


def test_defect_10_ingest_writes_only_dropped_event_records(default_stack: Synthesized) -> None:
    assert ledger_statements(default_stack, INGEST_TASK) == [
        {
            "Action": "dynamodb:PutItem",
            "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["DROPPED#*"]}},
            "Effect": "Allow",
            "Resource": table_arn(default_stack),
        }
    ]


def test_the_counting_function_touches_only_windows_and_dropped_event_records(
    full_stack: Synthesized,
) -> None:
    """D22: its own grant. It reads and writes the windows of the configured clusters' instances
    and records the Events it drops; no lock, record, budget or episode of the steps."""
    windows = sorted(f"SIGNALS#{cluster}#*" for cluster in full_stack.config.clusters)
    assert ledger_grants(ledger_statements(full_stack, COUNT_SIGNALS_TASK)) == {
        (frozenset({"dynamodb:GetItem", "dynamodb:PutItem"}), tuple(windows), str(table_arn(full_stack))),
        (frozenset({"dynamodb:PutItem"}), ("DROPPED#*",), str(table_arn(full_stack))),
    }


def test_only_the_counting_function_writes_windows_and_only_the_provers_read_them() -> None:
    """Admit and every step that proves the condition still bad before it mutates
    (guard.before_mutation with require_bad) prove a counted signal by its window (D22): they
    may read it (GetItem), never write it. Uncordon and the ends of an execution do not read it."""
    access: dict[str, set[str]] = {}
    for spec in ALL_TASKS:
        for grant in spec.ledger:
            if LedgerItem.SIGNALS in grant.items:
                access.setdefault(spec.name, set()).update(grant.actions)
    provers = {"admit", "cordon", "drain", "force-drain", "terminate", "reboot"}
    assert access == {
        **{name: {"dynamodb:GetItem"} for name in provers},
        "count-signals": {"dynamodb:GetItem", "dynamodb:PutItem"},
    }


def test_defect_10_no_function_may_scan_delete_broadly_or_touch_the_index(full_stack: Synthesized) -> None:
    for spec in ALL_TASKS:
        for statement in ledger_statements(full_stack, spec):
            actions = set(actions_of(statement))
            assert actions <= {
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
                "dynamodb:Query",
            }
            assert resources_of(statement) == [table_arn(full_stack)], spec.name
            assert statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"], spec.name
    # Only the steps that take or give back a node's lock may delete, and only lock items.
    deletes = {
        spec.name: grant.items
        for spec in ALL_TASKS
        for grant in spec.ledger
        if "dynamodb:DeleteItem" in grant.actions
    }
    assert deletes == dict.fromkeys(("admit", "record", "record-failure", "finalize"), (LedgerItem.LOCK,))
    # Updates are the mutating steps' claims on the lock they hold (nodeheal.workflow.guard),
    # admit marking a busy, less severe holder (contend) and ending an episode in its memory
    # (clear_sightings, D19); the ends of an execution withdraw its contender mark from the lock
    # (withdraw_contention): nothing else.
    updates: dict[str, set[LedgerItem]] = {}
    for spec in ALL_TASKS:
        for grant in spec.ledger:
            if "dynamodb:UpdateItem" in grant.actions:
                updates.setdefault(spec.name, set()).update(grant.items)
    steps = {"admit", "cordon", "drain", "force-drain", "terminate", "reboot", "uncordon"}
    ends = {"record", "record-failure", "finalize"}
    assert set(updates) == steps | ends
    assert updates["admit"] == {LedgerItem.LOCK, LedgerItem.EPISODE}, updates
    assert all(updates[name] == {LedgerItem.LOCK} for name in (steps - {"admit"}) | ends), updates
    # The episode memory every one of them keeps (remember_sighting, D2) is a conditional PutItem
    # of one entry; the records, the admission state and the end marker are put by their owners.
    episode_writers = {
        spec.name
        for spec in ALL_TASKS
        for grant in spec.ledger
        if "dynamodb:PutItem" in grant.actions and LedgerItem.EPISODE in grant.items
    }
    assert episode_writers == steps
    # Only admit and reboot read the memory back (Query of one instance's partition).
    readers = {
        spec.name
        for spec in ALL_TASKS
        for grant in spec.ledger
        if "dynamodb:Query" in grant.actions and LedgerItem.EPISODE in grant.items
    }
    assert readers == {"admit", "reboot"}


@pytest.mark.parametrize("spec", ALL_TASKS, ids=lambda spec: spec.name)
def test_only_publishers_may_publish_and_only_to_the_topic(
    default_stack: Synthesized, spec: TaskSpec
) -> None:
    topic_id = next(iter(default_stack.resources("AWS::SNS::Topic")))
    sns = statements_with(role_statements(default_stack, spec.name), "sns:")
    if not spec.publishes_notifications:
        assert sns == []
        return
    assert [(actions_of(s), resources_of(s)) for s in sns] == [(["sns:Publish"], [{"Ref": topic_id}])]


@pytest.mark.parametrize("spec", ALL_TASKS, ids=lambda spec: spec.name)
def test_only_ingest_and_the_counting_function_start_executions(
    default_stack: Synthesized, spec: TaskSpec
) -> None:
    state_machine_id = next(iter(default_stack.resources("AWS::StepFunctions::StateMachine")))
    states = statements_with(role_statements(default_stack, spec.name), "states:")
    if spec is FINALIZER_TASK:
        # It only reads executions back: describe and history of this machine's, and the listing.
        assert sorted(a for s in states for a in actions_of(s)) == [
            "states:DescribeExecution",
            "states:GetExecutionHistory",
            "states:ListExecutions",
        ]
        return
    if spec not in (INGEST_TASK, COUNT_SIGNALS_TASK):
        assert states == []
        return
    assert [(actions_of(s), resources_of(s)) for s in states] == [
        (["states:StartExecution"], [{"Ref": state_machine_id}])
    ]


def test_no_statement_grants_a_wildcard_action(full_stack: Synthesized) -> None:
    for policy in full_stack.resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            for action in actions_of(statement):
                assert not action.endswith(":*") and action != "*", action


def test_vpc_access_policy_only_on_vpc_attached_roles(full_stack: Synthesized) -> None:
    for spec in ALL_TASKS:
        role = full_stack.json["Resources"][role_logical_id(full_stack, spec.name)]
        managed = str(role["Properties"].get("ManagedPolicyArns", []))
        assert ("AWSLambdaVPCAccessExecutionRole" in managed) is spec.kubernetes


def test_exporter_gets_a_pod_identity_association_per_cluster(full_stack: Synthesized) -> None:
    associations = full_stack.resources("AWS::EKS::PodIdentityAssociation")
    clusters = sorted(a["Properties"]["ClusterName"] for a in associations.values())
    assert clusters == sorted(full_stack.config.clusters)
    for association in associations.values():
        assert association["Properties"]["Namespace"] == "nodeheal"
        assert association["Properties"]["ServiceAccount"] == "nodeheal-exporter"
    policies = full_stack.resources("AWS::Events::EventBusPolicy")
    # Per cluster an Allow and a Deny of other sources, and the Deny of every other principal.
    assert len(policies) == 2 * len(full_stack.config.clusters) + 1


def readme_ledger_cell(spec: TaskSpec) -> str:
    """How the README's IAM table names a task's ledger grants."""
    if not spec.ledger:
        return "\N{EN DASH}"
    return "; ".join(
        "/".join(action.removeprefix("dynamodb:") for action in grant.actions)
        + " on "
        + ", ".join(f"`{item.leading_keys(['<cluster>'])[0]}`" for item in grant.items)
        for grant in spec.ledger
    )


@pytest.mark.parametrize("spec", ALL_TASKS, ids=lambda spec: spec.name)
def test_defect_10_readme_iam_table_states_the_ledger_grants(spec: TaskSpec) -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| function | AWS permissions |") :].split("\n\n")[0]
    rows = [
        line
        for line in table.splitlines()
        if spec.name in [name.strip() for name in line.split("|")[1].split(",")]
    ]
    assert len(rows) == 1, f"one README IAM row for {spec.name}"
    assert rows[0].rstrip().endswith(f"| {readme_ledger_cell(spec)} |"), rows[0]
