"""``nodeheal doctor`` against a deployment: the synthesized stack in moto and the fake API server.

The deployment is the template's own (tests/deployment.py): its outputs, rules, alarms, functions
and access entries; the cluster enforces NodeHeal's RBAC. Heartbeats are counted by the real ingest
handler, whose metric record is delivered to CloudWatch as Lambda delivers it. Each test breaks one
thing a person can get wrong and checks doctor names it, with its fix, and that doctor itself
changed nothing, in AWS or in the cluster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from nodeheal.aws.eks_access import ClusterAccess
from nodeheal.cli import main
from nodeheal.commands import doctor_report
from nodeheal.doctor import RBAC_FIX, sample_heartbeat_event
from nodeheal.rbac import KUBERNETES_RULES
from nodeheal.sim.apiserver.authorizer import (
    AUTHENTICATED_GROUP,
    FunctionCredentials,
    RbacAuthorizer,
    UserInfo,
    nodeheal_authorizer,
)
from nodeheal.sim.apiserver.objects import make_node
from nodeheal.sim.apiserver.server import FakeKubeApiServer
from nodeheal.sim.local_aws import LocalAws
from nodeheal.sim.stack.context import CLUSTER
from nodeheal.sim.stack.process_templates import synthesized
from tests.deployment import DoctorDeployment, deploy_for_doctor, eventbridge_stand_in
from tests.unit.workflow.fakes import INSTANCE

pytestmark = pytest.mark.slow

NODE = "gpu-a"
XID_79 = {
    "type": "GPUProblem",
    "status": "True",
    "reason": "GPUHardwareError",
    "message": "NVRM: Xid (PCI:0000:53:00): 79, pid=2411, name=python3, GPU has fallen off the bus.",
}
CHECKS = [
    "stack",
    "workflow",
    "cluster",
    "kubernetes",
    *(f"access:{function}" for function in KUBERNETES_RULES),
    "heartbeat",
    "rule",
    "heartbeat-rule",
]
#: The AWS operations doctor may call: each reads.
READ_ONLY = {
    "DescribeStacks",
    "DescribeStateMachine",
    "GetFunctionConfiguration",
    "ListRules",
    "ListTargetsByRule",
    "TestEventPattern",
    "DescribeAlarms",
    "GetMetricStatistics",
    "GetItem",
    "Query",
}


@dataclass
class World:
    aws: LocalAws
    server: FakeKubeApiServer
    authorizer: RbacAuthorizer
    deployment: DoctorDeployment
    kubeconfig: Path
    #: Every AWS operation doctor's session called, in order.
    operations: list[str]


def write_kubeconfig(path: Path, server: str, token: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sim", "cluster": {"server": server}}],
                "users": [{"name": "sre", "user": {"token": token}}],
                "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sre"}}],
                "current-context": "sim",
            }
        )
    )
    return path


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    authorizer = nodeheal_authorizer()
    with (
        FakeKubeApiServer(authorizer=authorizer) as server,
        LocalAws(
            synthesized(), kube_provider_factory=FunctionCredentials(server.url, authorizer, CLUSTER)
        ) as aws,
    ):
        deployment = deploy_for_doctor(aws)
        server.store.add(make_node(NODE, instance_id=INSTANCE, extra_conditions=[XID_79]))
        operations: list[str] = []
        # The person's session: every operation recorded; TestEventPattern answered by moto's matcher.
        person = boto3.Session(region_name=aws.region)
        person.events.register("provide-client-params", lambda model, **_: operations.append(model.name))
        eventbridge_stand_in(person.events)
        monkeypatch.setattr(doctor_report, "session", lambda args: person)
        monkeypatch.setattr(doctor_report, "eks_access", lambda boto_session: deployment.eks)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, authorizer.admin_token())
        yield World(aws, server, authorizer, deployment, kubeconfig, operations)


def heartbeat(world: World, capsys: pytest.CaptureFixture[str], *, at: datetime | None = None) -> None:
    """The exporter's heartbeat through the real ingest handler; its metric record (Embedded Metric
    Format, on stdout) is delivered to CloudWatch as Lambda delivers it, ``at`` a moment of the past
    if given."""
    now = datetime.now(UTC)
    event = sample_heartbeat_event(CLUSTER, f"nodeheal.exporter.{CLUSTER}", world.aws.region, now)
    capsys.readouterr()
    result = world.aws.call_handler(world.aws.function_logical_id("lambdas.ingest.handler"), event)
    assert result == {"status": "heartbeat", "cluster": CLUSTER}
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert records, "the ingest handler emitted no metric record"
    for record in records:
        meta = record["_aws"]
        for directive in meta["CloudWatchMetrics"]:
            dimensions = [{"Name": key, "Value": record[key]} for key in directive["Dimensions"][0]]
            stamp = at or datetime.fromtimestamp(meta["Timestamp"] / 1000, UTC)
            world.aws.client("cloudwatch").put_metric_data(
                Namespace=directive["Namespace"],
                MetricData=[
                    {
                        "MetricName": metric["Name"],
                        "Dimensions": dimensions,
                        # A value or, when one invocation added it more than once, a list of them.
                        "Values": [float(v) for v in _values(record[metric["Name"]])],
                        "Unit": metric.get("Unit", "None"),
                        "Timestamp": stamp,
                    }
                    for metric in directive["Metrics"]
                ],
            )


def _values(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@dataclass
class Run:
    code: int
    out: str
    err: str

    def lines(self) -> dict[str, str]:
        """Check name -> its line (without the ok/failed word)."""
        found = {}
        for line in self.out.splitlines()[1:-1]:
            verdict, check, rest = line.split(maxsplit=2)
            found[check] = f"{verdict} {rest}"
        return found

    def verdicts(self) -> dict[str, str]:
        return {check: line.split()[0] for check, line in self.lines().items()}


def doctor(world: World, capsys: pytest.CaptureFixture[str], *extra: str, cluster: str = CLUSTER) -> Run:
    capsys.readouterr()
    argv = [
        "doctor",
        "--cluster",
        cluster,
        "--region",
        world.aws.region,
        "--kubeconfig",
        str(world.kubeconfig),
    ]
    with world.aws.between_invocations():
        code = main([*argv, *extra])
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def aws_state(world: World) -> Any:
    """Everything doctor could have written to: the ledger, executions, rules, alarms, stack, functions."""
    client = world.aws.client
    return (
        sorted(
            json.dumps(item, sort_keys=True)
            for item in client("dynamodb").scan(TableName=world.aws.table_name)["Items"]
        ),
        client("stepfunctions").list_executions(stateMachineArn=world.aws.state_machine_arn)["executions"],
        client("events").list_rules(EventBusName=world.aws.event_bus_name)["Rules"],
        [(a["AlarmName"], a["StateValue"]) for a in client("cloudwatch").describe_alarms()["MetricAlarms"]],
        client("cloudformation").describe_stacks(StackName="NodeHeal")["Stacks"][0]["Outputs"],
        [f["Environment"] for f in client("lambda").list_functions()["Functions"]],
    )


def test_a_working_deployment_passes_and_doctor_changes_nothing(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    heartbeat(world, capsys)
    before = (aws_state(world), world.server.store.resource_version)
    run = doctor(world, capsys, "--node", NODE)
    assert run.code == 0, run.out + run.err
    assert run.verdicts() == dict.fromkeys([*CHECKS, "node"], "ok")
    lines = run.lines()
    assert "mode full" in lines["workflow"]
    assert "RBAC allows all" in lines["access:drain"] and "create pods/eviction" in lines["access:drain"]
    assert "heard" in lines["heartbeat"] and "alarm after 10 min of silence" in lines["heartbeat"]
    assert f"nodeheal.exporter.{CLUSTER}" in lines["rule"]
    assert f"{NODE} ({INSTANCE}; mode full)" in lines["node"]
    assert "GPUProblem=True (GPUHardwareError) -> replace; Admit admits it" in lines["node"]
    assert run.out.splitlines()[-1] == f"{len(CHECKS) + 1} of {len(CHECKS) + 1} checks ok"

    # Read-only: nothing changed in AWS or in the cluster, and every call was a read.
    assert (aws_state(world), world.server.store.resource_version) == before
    assert set(world.operations) <= READ_ONLY, set(world.operations) - READ_ONLY
    assert world.operations.count("TestEventPattern") == 2
    reviews = r"^/apis/authorization\.k8s\.io/v1/(self)?subjectaccessreviews$"
    faults = world.server.faults
    assert faults.served("POST") == faults.served("POST", reviews) > 0
    assert faults.served("PUT") == faults.served("PATCH") == faults.served("DELETE") == 0
    assert world.deployment.eks.calls and set(world.deployment.eks.calls) <= {
        "DescribeCluster",
        "DescribeAccessEntry",
    }


def test_json_says_the_same_as_the_lines(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    heartbeat(world, capsys)
    text = doctor(world, capsys, "--node", NODE)
    document = doctor(world, capsys, "--node", NODE, "--json")
    assert document.code == text.code == 0
    report = json.loads(document.out)
    assert report["ok"] is True and report["cluster"] == CLUSTER and report["stack"] == "NodeHeal"

    # The two runs are seconds apart: the heartbeat's age may differ, nothing else.
    def same(summary: str) -> str:
        return re.sub(r"heard \S+ ago", "heard ... ago", summary)

    assert [(c["check"], c["ok"], same(c["summary"])) for c in report["checks"]] == [
        (check, verdict == "ok", same(text.lines()[check].split(" ", 1)[1]))
        for check, verdict in text.verdicts().items()
    ]
    node = next(c for c in report["checks"] if c["check"] == "node")["details"]
    [condition] = node["conditions"]
    assert condition["decision"]["action"] == "replace" and condition["acts"] is True
    drain = next(c for c in report["checks"] if c["check"] == "access:drain")["details"]
    assert (
        drain["user"]
        == f"arn:aws:sts::123456789012:assumed-role/{drain['role'].rsplit('/', 1)[-1]}/NodeHeal-drain"
    )
    assert drain["groups"] == ["nodeheal-drain", AUTHENTICATED_GROUP]


def test_missing_rbac_for_a_function_is_named_with_the_manifest_to_apply(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    heartbeat(world, capsys)
    world.authorizer.unbind("nodeheal-drain")
    run = doctor(world, capsys)
    assert run.code == 1
    line = run.lines()["access:drain"]
    assert line.startswith(
        "failed RBAC refuses drain (nodeheal-drain): get nodes, list pods, delete pods, create pods/eviction"
    )
    assert line.endswith(f"; fix: {RBAC_FIX}")
    assert [check for check, verdict in run.verdicts().items() if verdict == "failed"] == ["access:drain"]


def test_a_missing_access_entry_is_named(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    heartbeat(world, capsys)
    role = world.deployment.outputs["RemediatorRoleAdmitArn"]
    del world.deployment.eks.entries[(CLUSTER, role)]
    line = doctor(world, capsys).lines()["access:admit"]
    assert line.startswith(f"failed no EKS access entry for {role.rsplit('/', 1)[-1]} in {CLUSTER}")
    assert "npx cdk deploy NodeHeal" in line


def test_silent_and_stale_heartbeats_fail_with_the_alarm_window(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    silent = doctor(world, capsys)
    assert silent.code == 1
    line = silent.lines()["heartbeat"]
    assert line.startswith(
        f"failed no exporter heartbeat from {CLUSTER} within 10 min (none in the last 3 h 0 min"
    )
    assert "kubectl -n nodeheal get pods" in line and "NODEHEAL_CLUSTER_NAME=training-on-eks" in line
    heartbeat(world, capsys, at=datetime.now(UTC) - timedelta(minutes=30))
    stale = doctor(world, capsys).lines()["heartbeat"]
    assert "(last heard 3" in stale and "min ago" in stale
    heartbeat(world, capsys)
    assert doctor(world, capsys).verdicts()["heartbeat"] == "ok"


def test_a_cluster_the_stack_does_not_serve(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.deployment.eks.clusters["inference"] = ClusterAccess("ACTIVE", "API")
    run = doctor(world, capsys, cluster="inference")
    assert run.code == 1
    lines = run.lines()
    assert lines["stack"].startswith("failed stack NodeHeal: missing output(s) ExporterRoleArnInference")
    assert "inference is not one of the stack's clusters: add it to `clusters`" in lines["stack"]
    assert lines["access:admit"].startswith("failed no EKS access entry")
    assert lines["heartbeat"].startswith("failed the stack has no heartbeat alarm for inference")
    assert lines["rule"].startswith(
        "failed rule IngestRule30A020D8 does not match a sample GPUProblem=True event"
    )
    assert "detail.cluster" in lines["rule"]
    assert lines["heartbeat-rule"].startswith("failed")


def test_a_person_who_may_not_review_access_is_told_what_to_ask_for(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    heartbeat(world, capsys)
    token = world.authorizer.token_for(UserInfo("developer", (AUTHENTICATED_GROUP,)))
    write_kubeconfig(world.kubeconfig, world.server.url, token)
    run = doctor(world, capsys)
    lines = run.lines()
    assert lines["kubernetes"].startswith(
        "failed your Kubernetes credentials may not create subjectaccessreviews.authorization.k8s.io"
    )
    assert all(lines[f"access:{f}"].startswith("failed not checked") for f in KUBERNETES_RULES)
    assert run.code == 1


def test_the_node_decision_uses_the_mode_the_function_runs_with(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A redeploy in dry-run changes the functions' environment (D4); the settings still say full."""
    heartbeat(world, capsys)
    functions = world.aws.client("lambda")
    environment = functions.get_function_configuration(FunctionName="NodeHeal-admit")["Environment"][
        "Variables"
    ]
    functions.update_function_configuration(
        FunctionName="NodeHeal-admit", Environment={"Variables": {**environment, "NODEHEAL_MODE": "dry-run"}}
    )
    lines = doctor(world, capsys, "--node", NODE).lines()
    assert "mode dry-run (NODEHEAL_MODE of NodeHeal-admit; the settings say full" in lines["workflow"]
    assert (
        "none (planned replace); Admit records what it would do (replace); touches nothing" in lines["node"]
    )


def test_a_missing_node_and_a_healthy_node(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    heartbeat(world, capsys)
    missing = doctor(world, capsys, "--node", "gpu-z").lines()["node"]
    assert (
        missing
        == f"failed node gpu-z does not exist in {CLUSTER}; fix: check the name with `kubectl get nodes`"
    )
    world.server.store.add(make_node("gpu-b", instance_id="i-0bbb1234def567890"))
    healthy = doctor(world, capsys, "--node", "gpu-b").lines()["node"]
    assert healthy.endswith("no bad condition: NodeHeal would do nothing")


def test_a_cluster_that_ignores_access_entries(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.deployment.eks.clusters[CLUSTER] = ClusterAccess("ACTIVE", "CONFIG_MAP")
    lines = doctor(world, capsys).lines()
    assert lines["cluster"].endswith(
        f"fix: aws eks update-cluster-config --name {CLUSTER} --access-config authenticationMode=API_AND_CONFIG_MAP"
    )
    assert (
        lines["access:admit"]
        == "failed not checked: it needs the cluster check; fix: fix the cluster check first"
    )


def test_no_stack_no_checks(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.aws.client("cloudformation").delete_stack(StackName="NodeHeal")
    run = doctor(world, capsys)
    assert run.code == 1
    lines = run.lines()
    assert lines["stack"].startswith(f"failed stack NodeHeal does not exist in {world.aws.region}")
    assert lines["workflow"].startswith("failed not checked")
    assert lines["rule"].startswith("failed not checked")


def test_bad_input_is_a_usage_error(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor(world, capsys, cluster=" ").code == 2
    assert doctor(world, capsys, "--node", "").code == 2
    conflicting = doctor(world, capsys, "--eks")
    assert conflicting.code == 2 and "drop --kubeconfig/--context" in conflicting.err
