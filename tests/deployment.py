"""A NodeHeal deployment in moto, as ``nodeheal doctor`` reads one: the stack, its rules, functions,
alarms and access entries, each from the synthesized template.

:class:`~nodeheal.sim.local_aws.LocalAws` already deploys what the workflow runs on (ledger, state
machine, bus and rules). ``deploy_for_doctor`` adds what only an operator's tools read: the
CloudFormation stack and its outputs (the template's own, resolved), the Kubernetes-facing Lambda
functions with their template environment, and the alarms. Two things moto does not have are
stood in for here: EKS access entries (:class:`MemoryEksAccess`, held to the same contract as the
boto3 adapter in tests/unit/adapters/test_eks_access.py) and ``events:TestEventPattern``, a stub in
moto (:func:`eventbridge_stand_in` answers it with moto's own rule matcher).
"""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeheal.aws.eks_access import AccessEntry, ClusterAccess
from nodeheal.sim.local_aws import LocalAws
from nodeheal.sim.stack.synthesized_app import ACCOUNT_ID


@dataclass
class MemoryEksAccess:
    """EKS clusters and access entries held in memory (moto has no access entries)."""

    clusters: dict[str, ClusterAccess] = field(default_factory=dict)
    #: (cluster, principal ARN) -> entry
    entries: dict[tuple[str, str], AccessEntry] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def cluster(self, name: str) -> ClusterAccess | None:
        self.calls.append("DescribeCluster")
        return self.clusters.get(name)

    def access_entry(self, cluster: str, principal_arn: str) -> AccessEntry | None:
        self.calls.append("DescribeAccessEntry")
        return self.entries.get((cluster, principal_arn))

    def add(self, cluster: str, principal_arn: str, groups: tuple[str, ...]) -> None:
        """An entry as EKS creates one for an IAM role when no username is given."""
        role_name = principal_arn.rsplit("/", 1)[-1]
        self.entries[(cluster, principal_arn)] = AccessEntry(
            principal_arn=principal_arn,
            kubernetes_groups=groups,
            username=f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/{role_name}/{{{{SessionName}}}}",
            type="STANDARD",
        )


def eventbridge_stand_in(events: Any) -> None:
    """TestEventPattern answered by moto's own matcher, on a client or a whole session's ``events``
    (moto's API method is a stub)."""
    from botocore.awsrequest import AWSResponse
    from moto.events.models import EventPattern

    def answer(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        body = json.loads(params["body"])
        event = json.loads(body["Event"])
        verdict = EventPattern(body["EventPattern"], json.loads(body["EventPattern"])).matches_event(event)
        return AWSResponse("https://events.us-west-2.amazonaws.com", 200, {}, None), {"Result": verdict}

    events.register("before-call.events.TestEventPattern", answer)


@dataclass
class DoctorDeployment:
    stack_name: str
    outputs: Mapping[str, str]
    eks: MemoryEksAccess


def deploy_for_doctor(
    aws: LocalAws, *, stack_name: str = "NodeHeal", clusters: tuple[str, ...] = ()
) -> DoctorDeployment:
    """Add the stack, its Kubernetes-facing functions, its alarms and its access entries to ``aws``.

    ``clusters``: the EKS clusters that exist (ACTIVE, access entries enabled); default: those the
    template's access entries name.
    """
    resolver = aws._resolver
    template = aws.app.template
    # moto has no EventBridge schema registry; nothing doctor reads is in it, only its name.
    for logical, resource in aws.app.resources("AWS::EventSchemas::Registry").items():
        resolver.attributes[(logical, "RegistryName")] = str(resource["Properties"]["RegistryName"])
    _deploy_functions(aws, stack_name)
    _deploy_alarms(aws)
    outputs = {
        key: str(resolver.resolve(output["Value"])) for key, output in template.get("Outputs", {}).items()
    }
    # A stack holding nothing but the outputs: a template needs one resource, and moto creates none
    # for a wait condition handle (it says so in a warning).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        aws.client("cloudformation").create_stack(
            StackName=stack_name,
            TemplateBody=json.dumps(
                {
                    "Resources": {"Placeholder": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
                    "Outputs": {key: {"Value": value} for key, value in outputs.items()},
                }
            ),
        )
    eks = MemoryEksAccess()
    for resource in aws.app.resources("AWS::EKS::AccessEntry").values():
        properties = resource["Properties"]
        cluster = str(properties["ClusterName"])
        eks.add(
            cluster, str(resolver.resolve(properties["PrincipalArn"])), tuple(properties["KubernetesGroups"])
        )
        eks.clusters.setdefault(cluster, ClusterAccess("ACTIVE", "API_AND_CONFIG_MAP"))
    for cluster in clusters:
        eks.clusters[cluster] = ClusterAccess("ACTIVE", "API_AND_CONFIG_MAP")
    return DoctorDeployment(stack_name, outputs, eks)


def _deploy_functions(aws: LocalAws, stack_name: str) -> None:
    """The workflow functions under their real names (``<stack>-<task>``) with the template's
    environment: where the deployed mode lives (docs/architecture.md, D4)."""
    iam = aws.client("iam")
    role = iam.create_role(RoleName="nodeheal-doctor-test", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("handler.py", "")
    for resource in aws.app.resources("AWS::Lambda::Function").values():
        properties = resource["Properties"]
        name = properties.get("FunctionName")
        if not isinstance(name, str) or not name.startswith(f"{stack_name}-"):
            continue
        variables = properties.get("Environment", {}).get("Variables", {})
        aws.client("lambda").create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=role,
            Handler=str(properties["Handler"]),
            Code={"ZipFile": archive.getvalue()},
            Environment={"Variables": {k: str(aws._resolver.resolve(v)) for k, v in variables.items()}},
        )


def _deploy_alarms(aws: LocalAws) -> None:
    cloudwatch = aws.client("cloudwatch")
    for logical, resource in aws.app.resources("AWS::CloudWatch::Alarm").items():
        properties = aws._resolver.resolve(resource["Properties"])
        if "MetricName" not in properties:
            continue  # metric-math alarms: nothing the operator tools read
        cloudwatch.put_metric_alarm(
            AlarmName=logical,
            MetricName=properties["MetricName"],
            Namespace=properties["Namespace"],
            Dimensions=properties.get("Dimensions", []),
            Statistic=properties["Statistic"],
            Period=int(properties["Period"]),
            EvaluationPeriods=int(properties["EvaluationPeriods"]),
            DatapointsToAlarm=int(properties.get("DatapointsToAlarm", properties["EvaluationPeriods"])),
            Threshold=float(properties["Threshold"]),
            ComparisonOperator=properties["ComparisonOperator"],
            TreatMissingData=properties.get("TreatMissingData", "missing"),
            AlarmActions=[str(action) for action in properties.get("AlarmActions", [])],
        )
