"""The outputs of the NodeHeal CloudFormation stack: one list for the stack that declares them and
the commands that read them.

``NodeHeal.add_stack_outputs`` (:mod:`nodeheal.cdk`) names its outputs with these, the operator
commands find the ledger, the bus and the state machine through them, and ``nodeheal doctor`` checks
a deployed stack has every one :func:`required_outputs` lists. A renamed output therefore fails a
test instead of leaving the CLI unable to find a deployment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

EVENT_BUS_NAME = "EventBusName"
EVENT_BUS_ARN = "EventBusArn"
STATE_MACHINE_ARN = "StateMachineArn"
LEDGER_TABLE_NAME = "LedgerTableName"
SCHEMA_REGISTRY_NAME = "SchemaRegistryName"
NOTIFICATIONS_TOPIC_ARN = "NotificationsTopicArn"
DASHBOARD_URL = "DashboardUrl"

#: The outputs every NodeHeal stack declares, whatever its clusters and functions.
FIXED_OUTPUTS: tuple[str, ...] = (
    EVENT_BUS_NAME,
    EVENT_BUS_ARN,
    STATE_MACHINE_ARN,
    LEDGER_TABLE_NAME,
    SCHEMA_REGISTRY_NAME,
    NOTIFICATIONS_TOPIC_ARN,
    DASHBOARD_URL,
)


def pascal(name: str) -> str:
    """``training-on-eks`` -> ``TrainingOnEks``: output keys allow only alphanumerics."""
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name))


def exporter_role_output(cluster: str) -> str:
    """The role cluster ``cluster``'s exporter assumes through EKS Pod Identity."""
    return f"ExporterRoleArn{pascal(cluster)}"


def remediator_role_output(function: str) -> str:
    """The IAM role of a Kubernetes-facing workflow function, which its EKS access entry names."""
    return f"RemediatorRole{pascal(function)}Arn"


def required_outputs(clusters: Iterable[str], kubernetes_functions: Iterable[str]) -> list[str]:
    """Every output a stack for ``clusters`` whose ``kubernetes_functions`` reach the cluster declares."""
    return [
        *FIXED_OUTPUTS,
        *(exporter_role_output(cluster) for cluster in clusters),
        *(remediator_role_output(function) for function in kubernetes_functions),
    ]
