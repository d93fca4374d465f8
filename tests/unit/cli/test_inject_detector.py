"""``nodeheal inject --via kmsg`` and the policy it explains with, against the fake API server and
moto, with the real ``kubernetes`` client and the operator's own RBAC role. These tests prove the
requests NodeHeal sends (the pod, its line, its cleanup; the deployed settings read), not what the
detector on a real node does with them."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import kubernetes_validate
import pytest

from nodeheal import injected_faults
from nodeheal.commands.inject import XID_REASONS, xid_message
from nodeheal.config import RemediationSettings
from nodeheal.grants import Permission
from nodeheal.kube.client import http_transport
from nodeheal.kube.fault_injection import exec_in_pod, generated_client
from nodeheal.rbac import FAULT_INJECTOR, function_roles, render_fault_injector_manifest
from nodeheal.sim.apiserver import ClusterStore, FakeKubeApiServer, make_node, make_pod
from nodeheal.sim.apiserver.authorizer import AUTHENTICATED_GROUP, RbacAuthorizer, RoleBinding, UserInfo
from nodeheal.sim.apiserver.podexec import ExecResult
from tests.unit.cli.conftest import REGION, STATE_MACHINE_ARN, Aws, Result

Cli = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[3]
NODE = "gpu-a"
GPU_MONITOR = ROOT / "deploy" / "node-problem-detector" / "gpu-monitor.json"


class ContainerRecorder:
    """The simulated container runtime: records each pod it runs and answers its exit code."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.exit_code = 0
        self.message = ""
        self._lock = threading.Lock()

    def __call__(self, pod: dict[str, Any]) -> tuple[int, str]:
        with self._lock:
            self.pods.append(pod)
        return self.exit_code, self.message


@pytest.fixture
def runtime() -> ContainerRecorder:
    return ContainerRecorder()


class DcgmiRecorder:
    """The fake container runtime's exec: records each command and answers like dcgmi."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, list[str]]] = []
        self.result = ExecResult(0, "Successfully injected field info.\n")

    def __call__(self, pod: dict[str, Any], container: str, argv: Any) -> ExecResult:
        self.calls.append((pod["metadata"]["name"], container, list(argv)))
        return self.result


@pytest.fixture
def dcgmi() -> DcgmiRecorder:
    return DcgmiRecorder()


DCGM_LABELS = {"app.kubernetes.io/name": "dcgm-exporter"}


@pytest.fixture
def authorizer() -> RbacAuthorizer:
    role = FAULT_INJECTOR.name()
    return RbacAuthorizer([RoleBinding(role, FAULT_INJECTOR.rules, groups=(role,))])


@pytest.fixture
def server(
    runtime: ContainerRecorder, dcgmi: DcgmiRecorder, authorizer: RbacAuthorizer
) -> Iterator[FakeKubeApiServer]:
    store = ClusterStore()
    store.add(
        make_node(NODE, instance_id="i-0a"),
        make_node("gpu-b", instance_id="i-0b"),
        make_pod("dcgm-exporter-b", "gpu-operator", "gpu-b", labels=DCGM_LABELS),
        make_pod("dcgm-exporter-a", "gpu-operator", NODE, labels=DCGM_LABELS),
    )
    store.run_pods(runtime)
    store.run_exec(dcgmi)
    with FakeKubeApiServer(store, authorizer=authorizer) as srv:
        yield srv


@pytest.fixture
def config(server: FakeKubeApiServer, authorizer: RbacAuthorizer, tmp_path: Path) -> str:
    """A kubeconfig for an operator in the fault-injector group, and in nothing else."""
    operator = UserInfo("sre@example.com", (FAULT_INJECTOR.name(), AUTHENTICATED_GROUP))
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sim", "cluster": {"server": server.url}}],
                "users": [{"name": "sre", "user": {"token": authorizer.token_for(operator)}}],
                "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sre"}}],
                "current-context": "sim",
            }
        )
    )
    return str(path)


def inject(cli: Cli, config: str, *args: str) -> Result:
    return cli("inject", "--cluster", "sim", "--node", NODE, "--kubeconfig", config, "--yes", *args)


def injector_pods(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    pods, _ = server.store.list_objects("pods")
    return [pod for pod in pods if pod["metadata"]["namespace"] == "kube-system"]


def npd_reason(line: str) -> str | None:
    """The reason NPD's GPU monitor leaves on GPUProblem after ``line`` (every rule tried in order,
    each compiled with ``\\z`` as NPD does; temporary rules only post Events)."""
    reason = None
    for rule in json.loads(GPU_MONITOR.read_text())["rules"]:
        if rule["type"] == "permanent" and re.search(f"(?:{rule['pattern']})\\Z", line):
            reason = rule["reason"]
    return reason


def test_the_injector_pod_is_a_valid_kubernetes_pod() -> None:
    """Against the API's own schema (kubernetes-validate, 1.33), strictly: no unknown field."""
    pod = injected_faults.kmsg_pod(node=NODE, namespace="kube-system", line=xid_message(79))
    kubernetes_validate.validate(pod, "1.33.0", strict=True)


@pytest.mark.parametrize("xid", sorted(XID_REASONS))
def test_the_kmsg_line_raises_the_reason_the_command_announces(xid: int) -> None:
    pod = injected_faults.kmsg_pod(node=NODE, namespace="kube-system", line=xid_message(xid))
    assert npd_reason(injected_faults.written_line(pod)) == XID_REASONS[xid]


def test_kmsg_writes_the_driver_line_from_a_pod_on_the_node_and_deletes_it(
    cli: Cli,
    server: FakeKubeApiServer,
    runtime: ContainerRecorder,
    config: str,
    aws: Aws,
    authorizer: RbacAuthorizer,
) -> None:
    result = inject(cli, config, "--via", "kmsg", "--xid", "79", "--json")
    assert result.code == 0, result.err
    assert [pod["spec"]["nodeName"] for pod in runtime.pods] == [NODE]
    pod = runtime.pods[0]
    spec = pod["spec"]
    container = spec["containers"][0]
    assert pod["metadata"]["namespace"] == "kube-system"
    assert spec["restartPolicy"] == "Never" and spec["tolerations"] == [{"operator": "Exists"}]
    assert container["securityContext"] == {"privileged": True}
    assert container["volumeMounts"] == [{"name": "kmsg", "mountPath": "/dev/kmsg"}]
    assert spec["volumes"] == [{"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}}]
    line = injected_faults.written_line(pod)
    assert line.startswith("NVRM: Xid (PCI:0000:3b:00): 79, ")
    assert npd_reason(line) == "GPUFellOffBus"
    assert injector_pods(server) == [], "the injector pod is deleted once it has run"
    body = result.json()
    assert body["kmsg"] == {
        "namespace": "kube-system",
        "pod": pod["metadata"]["name"],
        "phase": "Succeeded",
        "line": line,
        "deleted": True,
    }
    assert body["expected"]["reason"] == "GPUFellOffBus" and body["expected"]["message"] == line
    assert body["decision"]["plannedAction"] == "replace"
    assert body["policy"]["deployed"] is False
    assert "deployed settings could not be read" in body["policy"]["origin"]
    assert authorizer.denied == []
    node = server.store.get("nodes", NODE)
    assert not any(
        c["type"] == "GPUProblem" and c["status"] == "True" for c in node["status"]["conditions"]
    ), "kmsg leaves the condition to NPD"


def test_a_failed_write_is_reported_and_the_pod_still_deleted(
    cli: Cli, server: FakeKubeApiServer, runtime: ContainerRecorder, config: str, aws: Aws
) -> None:
    runtime.exit_code, runtime.message = 1, "sh: can't create /dev/kmsg: Operation not permitted"
    result = inject(cli, config, "--via", "kmsg", "--xid", "48")
    assert result.code == 1
    assert "ended Failed (exit 1: sh: can't create /dev/kmsg: Operation not permitted)" in result.err
    assert injector_pods(server) == []


def test_a_pod_that_never_runs_is_given_up_after_the_timeout_and_deleted(
    cli: Cli, server: FakeKubeApiServer, runtime: ContainerRecorder, config: str, aws: Aws
) -> None:
    server.store.set_kubelet_alive(NODE, False)
    result = inject(cli, config, "--via", "kmsg", "--xid", "48", "--timeout", "0.5")
    assert result.code == 1
    assert "still Pending after 0.5 s" in result.err
    assert runtime.pods == []
    (left,) = injector_pods(server)
    assert left["metadata"].get("deletionTimestamp"), "deleted (Terminating until the dead kubelet is back)"


def test_kmsg_refuses_what_npd_would_not_turn_into_a_condition(cli: Cli, config: str, aws: Aws) -> None:
    assert inject(cli, config, "--via", "kmsg", "--xid", "13").code == 2
    assert inject(cli, config, "--via", "kmsg", "--condition", "GPUProblem").code == 2


def test_condition_warns_about_npd_reverting_it(cli: Cli, config: str, aws: Aws) -> None:
    result = inject(cli, config, "--xid", "79")
    assert result.code == 0, result.err
    assert injected_faults.CONDITION_REVERT_WARNING in result.err
    assert (
        "built-in defaults: the deployed settings could not be read (read state machine "
        f"{STATE_MACHINE_ARN}: StateMachineDoesNotExist"
    ) in result.out


def test_the_shipped_npd_heartbeat_is_the_one_the_warning_names() -> None:
    values = (ROOT / "deploy" / "node-problem-detector" / "values.yaml").read_text()
    assert f"heartBeatPeriod: {injected_faults.NPD_HEARTBEAT_PERIOD}" in values


def test_the_decision_is_the_deployed_policys(cli: Cli, config: str, aws: Aws) -> None:
    deployed = RemediationSettings.from_json(
        {**RemediationSettings().to_json(), "mode": "full"}, "test"
    ).to_json()
    deployed["policy"]["xidActions"] = {"79": "reboot"}
    sfn = boto3.client("stepfunctions", region_name=REGION)
    definition = {
        "StartAt": "Load settings",
        "States": {
            "Load settings": {"Type": "Pass", "Parameters": {"settings": deployed}, "Next": "Done"},
            "Done": {"Type": "Succeed"},
        },
    }
    arn = sfn.create_state_machine(
        name="NodeHeal-remediation",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/NodeHeal-workflow",
    )["stateMachineArn"]
    assert arn == STATE_MACHINE_ARN
    result = inject(cli, config, "--xid", "79", "--json")
    assert result.code == 0, result.err
    body = result.json()
    assert body["policy"] == {
        "deployed": True,
        "origin": f"deployed settings of {STATE_MACHINE_ARN}, mode full",
    }
    assert (body["decision"]["action"], body["decision"]["plannedAction"]) == ("reboot", "reboot")
    builtin = inject(cli, config, "--xid", "79", "--json", "--builtin-policy").json()
    assert builtin["policy"]["deployed"] is False
    assert builtin["decision"]["plannedAction"] == "replace"


def test_only_the_operator_role_may_create_pods() -> None:
    """The remediation functions evict and (force-drain) delete pods; none may create one."""
    create = Permission("create", "", "pods")
    for role in function_roles():
        granted = {p for rule in role.rules for p in rule.permissions()}
        assert create not in granted, role.name()
        assert not any(p.resource == "pods/exec" for p in granted), role.name()
    injector = {p for rule in FAULT_INJECTOR.rules for p in rule.permissions()}
    assert {create, Permission("delete", "", "pods")} <= injector


def test_the_fault_injector_manifest_is_rendered_from_the_table() -> None:
    assert (
        ROOT / "deploy" / "rbac" / "fault-injector.yaml"
    ).read_text() == render_fault_injector_manifest(), (
        "deploy/rbac/fault-injector.yaml is out of date with nodeheal/rbac.py: run `make rbac`"
    )


def test_dcgm_execs_dcgmi_in_the_nodes_exporter_pod_with_the_xid_field(
    cli: Cli, dcgmi: DcgmiRecorder, config: str, aws: Aws, authorizer: RbacAuthorizer
) -> None:
    result = inject(cli, config, "--via", "dcgm", "--xid", "79", "--json")
    assert result.code == 0, result.err
    assert dcgmi.calls == [
        ("dcgm-exporter-a", "main", ["dcgmi", "test", "--inject", "--gpuid", "0", "-f", "230", "-v", "79"])
    ]
    body = result.json()
    assert body["dcgm"] == {
        "namespace": "gpu-operator",
        "pod": "dcgm-exporter-a",
        "command": ["dcgmi", "test", "--inject", "--gpuid", "0", "-f", "230", "-v", "79"],
        "field": "DCGM_FI_DEV_XID_ERROR",
        "fieldId": 230,
        "value": 79,
        "status": "exit 0",
        "stdout": "Successfully injected field info.",
    }
    assert (body["expected"]["type"], body["expected"]["status"], body["expected"]["reason"]) == (
        "AcceleratedHardwareReady",
        "False",
        "NvidiaXID79Error",
    )
    assert body["decision"]["plannedAction"] == "replace"
    assert authorizer.denied == []


def test_dcgm_double_bit_ecc_goes_to_field_319(cli: Cli, dcgmi: DcgmiRecorder, config: str, aws: Aws) -> None:
    result = inject(
        cli, config, "--via", "dcgm", "--ecc-dbe", "4", "--gpu", "1", "--dcgm-host", "10.0.1.7:5555", "--json"
    )
    assert result.code == 0, result.err
    assert dcgmi.calls[0][2] == [
        "dcgmi",
        "test",
        "--inject",
        "--gpuid",
        "1",
        "-f",
        "319",
        "-v",
        "4",
        "--host",
        "10.0.1.7:5555",
    ]
    body = result.json()
    assert body["dcgm"]["field"] == "DCGM_FI_DEV_ECC_DBE_VOL_DEV"
    assert body["expected"]["reason"] == "NvidiaDoubleBitError"
    assert body["decision"]["plannedAction"] == "reboot", "the agent's DBE reason is Xid 48's verdict"


def test_a_failing_dcgmi_is_reported_with_its_words(
    cli: Cli, dcgmi: DcgmiRecorder, config: str, aws: Aws
) -> None:
    dcgmi.result = ExecResult(
        255, stderr="Error: unable to establish a connection to the specified host: localhost\n"
    )
    result = inject(cli, config, "--via", "dcgm", "--xid", "48")
    assert result.code == 1
    assert (
        "exited 255: Error: unable to establish a connection to the specified host: localhost" in result.err
    )


def test_no_exporter_on_the_node_is_one_line(cli: Cli, dcgmi: DcgmiRecorder, config: str, aws: Aws) -> None:
    result = inject(cli, config, "--via", "dcgm", "--xid", "48", "--dcgm-namespace", "monitoring")
    assert result.code == 1
    assert (
        "no running pod matching app.kubernetes.io/name=dcgm-exporter on node gpu-a in namespace monitoring"
        in (result.err)
    )
    assert dcgmi.calls == []


def test_an_exec_the_role_does_not_allow_is_refused_before_anything_runs(
    cli: Cli, dcgmi: DcgmiRecorder, config: str, aws: Aws, authorizer: RbacAuthorizer
) -> None:
    role = FAULT_INJECTOR.name()
    authorizer.unbind(role)
    without_exec = tuple(rule for rule in FAULT_INJECTOR.rules if "pods/exec" not in rule.resources)
    authorizer.bind(RoleBinding(role, without_exec, groups=(role,)))
    result = inject(cli, config, "--via", "dcgm", "--xid", "48")
    assert result.code == 1
    assert "exec in pod gpu-operator/dcgm-exporter-a was refused" in result.err and "403" in result.err
    assert dcgmi.calls == []


def test_dcgm_refuses_an_xid_the_agent_only_records_as_an_event(cli: Cli, config: str, aws: Aws) -> None:
    result = inject(cli, config, "--via", "dcgm", "--xid", "13")
    assert result.code == 2
    assert "NvidiaXID13Warning Event only" in result.err


def test_with_eks_the_exec_goes_through_a_client_built_from_the_transport(
    server: FakeKubeApiServer, dcgmi: DcgmiRecorder, authorizer: RbacAuthorizer
) -> None:
    """--eks hands inject NodeHeal's own transport (endpoint, CA as data, a re-minted IAM token);
    the exec needs the kubernetes client, built from the same endpoint, CA and current token."""
    operator = UserInfo("arn:aws:sts::123456789012:assumed-role/sre/alice", (FAULT_INJECTOR.name(),))
    token = authorizer.token_for(operator)
    transport = http_transport(
        server.url, ca_cert_data="-----BEGIN CERTIFICATE-----\n", bearer_token=lambda: token
    )
    with generated_client(transport) as api_client:
        ca_file = Path(api_client.configuration.ssl_ca_cert)
        assert ca_file.read_text() == "-----BEGIN CERTIFICATE-----\n"
        argv = injected_faults.dcgmi_command(0, injected_faults.DCGM_XID_ERROR, 48)
        stdout, _, code = exec_in_pod(api_client, "dcgm-exporter-a", "gpu-operator", None, argv, 10.0)
    assert (code, stdout) == (0, "Successfully injected field info.\n")
    assert dcgmi.calls == [("dcgm-exporter-a", "main", argv)]
    assert authorizer.denied == []
    assert not ca_file.exists(), "the CA file lives only as long as the exec"
