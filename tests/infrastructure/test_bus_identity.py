"""Defect 9: one cluster's exporter must not speak for another, and nobody else may put events.

moto evaluates no IAM, so the synthesized policies (each exporter role's identity policy, trust
policy, and the bus's resource policy) go through ``iam_eval`` as a principal x source matrix.
The full stack has two clusters, ``training-a`` and ``inference-b``, with the source prefix
``acme.nodeheal``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nodeheal.events import cluster_source
from tests.infrastructure.conftest import Synthesized, role_logical_id
from tests.infrastructure.iam_eval import (
    ACCOUNT,
    ALLOW,
    EXPLICIT_DENY,
    IMPLICIT_DENY,
    Request,
    TemplatePolicies,
    evaluate,
)

PREFIX = "acme.nodeheal"
A, B = "training-a", "inference-b"
SOURCES = {
    "own-A": [cluster_source(PREFIX, A)],
    "own-B": [cluster_source(PREFIX, B)],
    "legacy": [PREFIX],
    "other": ["acme.something-else"],
    "A-and-B-in-one-call": [cluster_source(PREFIX, A), cluster_source(PREFIX, B)],
}
UNRELATED = f"arn:aws:iam::{ACCOUNT}:role/SomeoneElse"
ADMIN = f"arn:aws:iam::{ACCOUNT}:role/Administrator"
ADMIN_POLICY = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


class Bus:
    def __init__(self, synthesized: Synthesized) -> None:
        self.policies = TemplatePolicies(synthesized.json)
        (self.bus_logical,) = self.policies.of_type("AWS::Events::EventBus")
        self.arn = self.policies.resolver.arn(self.bus_logical)
        self.resource_policies = self.policies.bus_policies(self.bus_logical)
        self.exporter_roles = {
            cluster: self._exporter_role(synthesized, cluster) for cluster in synthesized.config.clusters
        }
        self.task_roles = {
            task: role_logical_id(synthesized, task) for task in ("ingest", "terminate", "admit")
        }

    def _exporter_role(self, synthesized: Synthesized, cluster: str) -> str:
        role = synthesized.stack.exporter_access.roles[cluster]
        return str(synthesized.stack.resolve(role.role_arn)["Fn::GetAtt"][0])

    def put(self, role_logical: str, sources: list[str], *, extra: Sequence[Any] = ()) -> str:
        """PutEvents on the bus by a role of the template (``extra``: policies attached besides)."""
        identity = [*self.policies.identity_policies(role_logical), *extra]
        return self.put_as(self.policies.role_arn(role_logical), sources, identity=identity)

    def put_as(self, principal: str, sources: list[str], *, identity: list[Any]) -> str:
        request = Request(principal, "events:PutEvents", self.arn, {"events:source": sources})
        return evaluate(request, identity_policies=identity, resource_policies=self.resource_policies)


@pytest.fixture(scope="module")
def bus(full_stack: Synthesized) -> Bus:
    return Bus(full_stack)


EXPECTED = {
    # principal: {source case: decision}
    "exporter-A": {
        "own-A": ALLOW,
        "own-B": EXPLICIT_DENY,
        "legacy": ALLOW,
        "other": EXPLICIT_DENY,
        "A-and-B-in-one-call": EXPLICIT_DENY,
    },
    "exporter-B": {
        "own-A": EXPLICIT_DENY,
        "own-B": ALLOW,
        "legacy": ALLOW,
        "other": EXPLICIT_DENY,
        "A-and-B-in-one-call": EXPLICIT_DENY,
    },
    "ingest": dict.fromkeys(SOURCES, EXPLICIT_DENY),
    "terminate": dict.fromkeys(SOURCES, EXPLICIT_DENY),
    "admit": dict.fromkeys(SOURCES, EXPLICIT_DENY),
    "unrelated": dict.fromkeys(SOURCES, EXPLICIT_DENY),
    "administrator": dict.fromkeys(SOURCES, EXPLICIT_DENY),
}


def decide(bus: Bus, principal: str, sources: list[str]) -> str:
    if principal == "exporter-A":
        return bus.put(bus.exporter_roles[A], sources)
    if principal == "exporter-B":
        return bus.put(bus.exporter_roles[B], sources)
    if principal in bus.task_roles:
        return bus.put(bus.task_roles[principal], sources)
    if principal == "unrelated":
        return bus.put_as(UNRELATED, sources, identity=[])
    return bus.put_as(ADMIN, sources, identity=[ADMIN_POLICY])


@pytest.mark.parametrize("principal", sorted(EXPECTED))
def test_defect_9_put_events_matrix(bus: Bus, principal: str) -> None:
    decisions = {case: decide(bus, principal, sources) for case, sources in SOURCES.items()}
    assert decisions == EXPECTED[principal]


def test_defect_9_a_widened_exporter_role_still_cannot_speak_for_another_cluster(bus: Bus) -> None:
    # Someone attaches an admin policy to cluster A's role: the bus's explicit Deny still holds.
    role = bus.exporter_roles[A]
    assert bus.put(role, SOURCES["own-B"], extra=[ADMIN_POLICY]) == EXPLICIT_DENY
    assert bus.put(role, SOURCES["own-A"], extra=[ADMIN_POLICY]) == ALLOW


def test_defect_9_exporter_role_allows_nothing_but_put_events_on_the_bus(bus: Bus) -> None:
    role = bus.exporter_roles[A]
    arn = bus.policies.role_arn(role)
    identity = bus.policies.identity_policies(role)
    own = {"events:source": SOURCES["own-A"]}
    for action, resource in (
        ("events:PutEvents", bus.arn.replace("event-bus/", "event-bus/other-")),
        ("events:PutRule", bus.arn),
        ("events:DeleteEventBus", bus.arn),
        ("sqs:SendMessage", "*"),
    ):
        assert evaluate(Request(arn, action, resource, own), identity_policies=identity) == IMPLICIT_DENY
    # Without any Source in the request context (no key at all), nothing is allowed either.
    bare = Request(arn, "events:PutEvents", bus.arn)
    assert evaluate(bare, identity_policies=identity, resource_policies=bus.resource_policies) != ALLOW


def test_defect_9_aws_services_are_not_caught_by_the_deny(bus: Bus) -> None:
    # Archive replays are re-injected by EventBridge itself, not PutEvents by a principal; a service
    # acting as itself is still exempt from the catch-all Deny (it has no Allow either).
    request = Request("events.amazonaws.com", "events:PutEvents", bus.arn, {"events:source": ["x"]})
    assert evaluate(request, resource_policies=bus.resource_policies) == IMPLICIT_DENY


@pytest.mark.parametrize(
    ("tagged_cluster", "namespace", "service_account", "expected"),
    [
        (A, "nodeheal", "nodeheal-exporter", ALLOW),
        (B, "nodeheal", "nodeheal-exporter", IMPLICIT_DENY),
        (A, "default", "nodeheal-exporter", IMPLICIT_DENY),
        (A, "nodeheal", "someone-else", IMPLICIT_DENY),
    ],
)
def test_defect_9_only_its_own_clusters_exporter_can_assume_a_role(
    bus: Bus, tagged_cluster: str, namespace: str, service_account: str, expected: str
) -> None:
    role = bus.exporter_roles[A]
    trust = bus.policies.trust_policy(role)
    tags = {
        "aws:RequestTag/eks-cluster-name": tagged_cluster,
        "aws:RequestTag/kubernetes-namespace": namespace,
        "aws:RequestTag/kubernetes-service-account": service_account,
    }
    for action in ("sts:AssumeRole", "sts:TagSession"):
        request = Request("pods.eks.amazonaws.com", action, bus.policies.role_arn(role), tags)
        assert evaluate(request, resource_policies=[trust]) == expected, action
