"""The exporters' AWS access: one IAM role per cluster, assumed through EKS Pod Identity, that may
only put events on the NodeHeal bus under that cluster's own Source; and the bus policy.

Why one role per cluster (docs/architecture.md, D9): a PutEvents condition sees ``events:source`` and
``events:detail-type``, never the detail, so the only way to stop one cluster's exporter from
speaking for another is to give each its own Source (``<prefix>.<cluster>``) and a role allowed
that Source alone. Ingest then checks that the Source and ``detail.cluster`` agree.

What is enforced where:

* each role's identity policy allows ``events:PutEvents`` on the bus only when every entry's Source
  is the cluster's own, or (in 0.1.x; 0.2.0 removes it) the legacy bare prefix that exporters not yet upgraded
  to contract 1.1 send;
* each role's trust policy admits only Pod Identity sessions tagged with that cluster, the
  exporter's namespace and its service account, so an association made elsewhere cannot assume it;
* the bus policy repeats the grant per role, denies each role any other Source explicitly (so a
  broader policy attached to the role later cannot widen it), and denies ``events:PutEvents`` to
  every principal that is not an exporter role. AWS services acting as themselves are exempt
  (``aws:PrincipalIsAWSService``); archive replays are not PutEvents calls at all (EventBridge
  re-injects them itself), so the Deny cannot block a replay.

``events:source`` is multivalued (one PutEvents call carries up to ten entries), hence
``ForAllValues``/``ForAnyValue``, and the Allow also requires the key to be present: ``ForAllValues``
alone would be true for an empty set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import aws_eks as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from constructs import Construct

from nodeheal.events import cluster_source

#: EKS Pod Identity's service principal; it needs sts:TagSession as well as sts:AssumeRole because
#: it tags each session with the cluster, namespace and service account.
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
PUT_EVENTS = "events:PutEvents"
SOURCE_KEY = "events:source"


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
        source_prefix: str,
        namespace: str,
        service_account: str,
        exclusive_bus: bool = True,
    ) -> None:
        """``exclusive_bus``: the bus is NodeHeal's alone, so its policy denies PutEvents to every
        principal but the exporters. An existing bus shared with other producers keeps only the
        per-exporter statements: the deny-all would cut every other producer off."""
        super().__init__(scope, construct_id)
        self._exclusive_bus = exclusive_bus
        if not clusters:
            raise ValueError("ExporterAccess needs at least one cluster name")
        self._bus = bus
        self._source_prefix = source_prefix
        self._namespace = namespace
        self._service_account = service_account
        #: Cluster name -> the role its exporter assumes.
        self.roles: dict[str, iam.Role] = {cluster: self._build_role(cluster) for cluster in clusters}
        self.associations = [self._build_association(cluster) for cluster in clusters]
        self.bus_policies = self._build_bus_policies()

    def allowed_sources(self, cluster: str) -> list[str]:
        """The Sources a cluster's exporter may put: its own, and the legacy one until 0.2.0 removes it."""
        return [cluster_source(self._source_prefix, cluster), self._source_prefix]

    def _build_role(self, cluster: str) -> iam.Role:
        suffix = _logical_suffix(cluster)
        trusted = iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL).with_conditions(
            {
                "StringEquals": {
                    "aws:RequestTag/eks-cluster-name": cluster,
                    "aws:RequestTag/kubernetes-namespace": self._namespace,
                    "aws:RequestTag/kubernetes-service-account": self._service_account,
                }
            }
        )
        role = iam.Role(
            self,
            f"Role{suffix}",
            assumed_by=iam.SessionTagsPrincipal(trusted),
            description=f"NodeHeal exporter of {cluster}: events:PutEvents on the NodeHeal bus as "
            f"{cluster_source(self._source_prefix, cluster)} only (EKS Pod Identity)",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PutOwnClusterEvents",
                actions=[PUT_EVENTS],
                resources=[self._bus.event_bus_arn],
                conditions=self._own_sources_condition(cluster),
            )
        )
        return role

    def _own_sources_condition(self, cluster: str) -> dict[str, Any]:
        return {
            "ForAllValues:StringEquals": {SOURCE_KEY: self.allowed_sources(cluster)},
            "Null": {SOURCE_KEY: "false"},
        }

    def _build_association(self, cluster: str) -> eks.CfnPodIdentityAssociation:
        return eks.CfnPodIdentityAssociation(
            self,
            f"PodIdentity{_logical_suffix(cluster)}",
            cluster_name=cluster,
            namespace=self._namespace,
            service_account=self._service_account,
            role_arn=self.roles[cluster].role_arn,
        )

    def _bus_statements(self) -> dict[str, Mapping[str, Any]]:
        """Statement id -> statement of the bus policy."""
        bus_arn = self._bus.event_bus_arn
        statements: dict[str, Mapping[str, Any]] = {}
        for cluster, role in self.roles.items():
            suffix = _logical_suffix(cluster)
            statements[f"Exporter{suffix}PutOwnEvents"] = {
                "Effect": "Allow",
                "Principal": {"AWS": role.role_arn},
                "Action": PUT_EVENTS,
                "Resource": bus_arn,
                "Condition": self._own_sources_condition(cluster),
            }
            statements[f"Exporter{suffix}NoOtherSource"] = {
                "Effect": "Deny",
                "Principal": {"AWS": role.role_arn},
                "Action": PUT_EVENTS,
                "Resource": bus_arn,
                "Condition": {"ForAnyValue:StringNotEquals": {SOURCE_KEY: self.allowed_sources(cluster)}},
            }
        if not self._exclusive_bus:
            return statements
        statements["OnlyExportersPutEvents"] = {
            "Effect": "Deny",
            "Principal": "*",
            "Action": PUT_EVENTS,
            "Resource": bus_arn,
            "Condition": {
                "ArnNotLike": {"aws:PrincipalArn": [role.role_arn for role in self.roles.values()]},
                "BoolIfExists": {"aws:PrincipalIsAWSService": "false"},
            },
        }
        return statements

    def _build_bus_policies(self) -> list[events.CfnEventBusPolicy]:
        policies: list[events.CfnEventBusPolicy] = []
        for statement_id, statement in self._bus_statements().items():
            policy = events.CfnEventBusPolicy(
                self,
                f"BusPolicy{statement_id}",
                event_bus_name=self._bus.event_bus_name,
                statement_id=statement_id,
                statement={"Sid": statement_id, **statement},
            )
            # One PutPermission at a time: EventBridge rewrites the bus's whole policy on each.
            if policies:
                policy.add_resource_dependency(policies[-1])
            policies.append(policy)
        return policies
