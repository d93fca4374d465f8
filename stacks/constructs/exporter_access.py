"""The exporter's AWS access: one IAM role, assumed through EKS Pod Identity, that may only put
events on the NodeHeal bus; a Pod Identity association per cluster; and the bus policy.

The role is the only AWS identity in the cluster with write access to the bus, and it can do
nothing else: no other action, no other bus. The bus policy names the role too, so the grant
holds even if the bus is later shared with other accounts' principals.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aws_cdk import aws_eks as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from constructs import Construct

#: EKS Pod Identity's service principal; it needs sts:TagSession as well as sts:AssumeRole because
#: it tags each session with the cluster, namespace and service account.
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def _logical_suffix(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "", name.title()) or "Cluster"


class ExporterAccess(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bus: events.IEventBus,
        clusters: Sequence[str],
        namespace: str,
        service_account: str,
    ) -> None:
        super().__init__(scope, construct_id)
        if not clusters:
            raise ValueError("ExporterAccess needs at least one cluster name")
        self.role = self._build_role(bus)
        self.associations = [
            self._build_association(cluster, namespace, service_account) for cluster in clusters
        ]
        self.bus_policy = self._build_bus_policy(bus)

    def _build_role(self, bus: events.IEventBus) -> iam.Role:
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
            description="NodeHeal exporter: events:PutEvents on the NodeHeal bus only (EKS Pod Identity)",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PutNodeHealEvents",
                actions=["events:PutEvents"],
                resources=[bus.event_bus_arn],
            )
        )
        return role

    def _build_association(
        self, cluster: str, namespace: str, service_account: str
    ) -> eks.CfnPodIdentityAssociation:
        return eks.CfnPodIdentityAssociation(
            self,
            f"PodIdentity{_logical_suffix(cluster)}",
            cluster_name=cluster,
            namespace=namespace,
            service_account=service_account,
            role_arn=self.role.role_arn,
        )

    def _build_bus_policy(self, bus: events.IEventBus) -> events.CfnEventBusPolicy:
        statement = {
            "Sid": "NodeHealExporterPutEvents",
            "Effect": "Allow",
            "Principal": {"AWS": self.role.role_arn},
            "Action": "events:PutEvents",
            "Resource": bus.event_bus_arn,
        }
        return events.CfnEventBusPolicy(
            self,
            "BusPolicy",
            event_bus_name=bus.event_bus_name,
            statement_id="NodeHealExporterPutEvents",
            statement=statement,
        )
