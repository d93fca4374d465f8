"""SubjectAccessReview and SelfSubjectAccessReview, answered from the RBAC authorizer as kube-apiserver
answers them (nodeheal/sim/apiserver/review_answers.py has the sources)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

from nodeheal.kube.client import StaticClientProvider, request_json
from nodeheal.rbac import EXPORTER_LEASE
from nodeheal.sim.apiserver import messages
from nodeheal.sim.apiserver.authorizer import (
    AUTHENTICATED_GROUP,
    RbacAuthorizer,
    UserInfo,
    exporter_user,
    nodeheal_authorizer,
)
from nodeheal.sim.apiserver.server import FakeKubeApiServer

SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
ADMIT = UserInfo(
    "arn:aws:sts::123456789012:assumed-role/admit-role/NodeHeal-admit",
    ("nodeheal-admit", AUTHENTICATED_GROUP),
)
NODES_GET = {"verb": "get", "resource": "nodes", "name": "gpu-a"}
NODES_PATCH = {"verb": "patch", "resource": "nodes", "name": "gpu-a"}


def by_cluster_role(name: str, kind: str, subject: str) -> str:
    """RBAC's reason for a ClusterRoleBinding ``name`` of the ClusterRole ``name``."""
    subject_text = messages.BINDING_SUBJECT.format(kind=kind, name=subject)
    source = messages.CLUSTER_ROLE_BINDING_SOURCE.format(binding=name, role=name, subject=subject_text)
    return messages.RBAC_ALLOWED_BY.format(source=source)


def invalid(field: str, value: str, detail: str) -> str:
    return f"{field}: {messages.FIELD_VALUE_INVALID}: {value}: {detail}"


@pytest.fixture
def served() -> Iterator[tuple[FakeKubeApiServer, RbacAuthorizer]]:
    authorizer = nodeheal_authorizer()
    with FakeKubeApiServer(authorizer=authorizer) as server:
        yield server, authorizer


def post(server: FakeKubeApiServer, token: str | None, path: str, body: Any, method: str = "POST") -> Any:
    transport = StaticClientProvider(server.url, token=token).transport("c")
    return request_json(transport, method, path, action="review", body=body)


def sar(user: str, groups: list[str], resource: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": {"resourceAttributes": resource, "user": user, "groups": groups},
    }


def ssar(resource: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": {"resourceAttributes": resource},
    }


def test_a_subject_access_review_names_the_binding_that_allows(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    response = post(server, authorizer.admin_token(), SAR, sar(ADMIT.name, list(ADMIT.groups), NODES_GET))
    assert response.status == 201
    # The review comes back whole: spec as sent, an empty ObjectMeta (creationTimestamp null) and status.
    assert response.body == {
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"resourceAttributes": NODES_GET, "user": ADMIT.name, "groups": list(ADMIT.groups)},
        "status": {
            "allowed": True,
            "reason": by_cluster_role("nodeheal-admit", "Group", "nodeheal-admit"),
        },
    }


def test_what_no_rule_allows_is_no_opinion_without_a_reason(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    response = post(server, authorizer.admin_token(), SAR, sar(ADMIT.name, list(ADMIT.groups), NODES_PATCH))
    assert response.status == 201
    assert response.body["status"] == {"allowed": False}


def test_the_subject_is_exactly_the_user_and_groups_named(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    may_review = {"verb": "create", "group": "authorization.k8s.io", "resource": "selfsubjectaccessreviews"}
    # system:basic-user is bound to system:authenticated, which a review does not add by itself.
    alone = post(server, authorizer.admin_token(), SAR, sar("someone", ["team"], may_review))
    assert alone.body["status"] == {"allowed": False}
    authenticated = post(
        server, authorizer.admin_token(), SAR, sar("someone", [AUTHENTICATED_GROUP], may_review)
    )
    assert authenticated.body["status"] == {
        "allowed": True,
        "reason": by_cluster_role("system:basic-user", "Group", AUTHENTICATED_GROUP),
    }


def test_service_account_bindings_are_described_as_rbac_describes_them(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    exporter = exporter_user()
    listing = post(
        server,
        authorizer.admin_token(),
        SAR,
        sar(exporter.name, list(exporter.groups), {"verb": "list", "resource": "nodes"}),
    )
    assert listing.body["status"]["reason"] == by_cluster_role(
        "nodeheal-exporter", "ServiceAccount", "nodeheal-exporter/nodeheal"
    )
    lease = {
        "verb": "update",
        "group": "coordination.k8s.io",
        "resource": "leases",
        "namespace": "nodeheal",
        "name": EXPORTER_LEASE,
    }
    renewing = post(server, authorizer.admin_token(), SAR, sar(exporter.name, list(exporter.groups), lease))
    source = messages.ROLE_BINDING_SOURCE.format(
        binding="nodeheal-exporter-leader-election",
        namespace="nodeheal",
        role="nodeheal-exporter-leader-election",
        subject=messages.BINDING_SUBJECT.format(kind="ServiceAccount", name="nodeheal-exporter/nodeheal"),
    )
    assert renewing.body["status"]["reason"] == messages.RBAC_ALLOWED_BY.format(source=source)
    elsewhere = post(
        server,
        authorizer.admin_token(),
        SAR,
        sar(exporter.name, list(exporter.groups), {**lease, "namespace": "ml"}),
    )
    assert elsewhere.body["status"] == {"allowed": False}


def test_creating_a_subject_access_review_needs_rbac_of_its_own(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    response = post(server, authorizer.token_for(ADMIT), SAR, sar(ADMIT.name, list(ADMIT.groups), NODES_GET))
    assert response.status == 403
    assert response.body["message"] == (
        "subjectaccessreviews.authorization.k8s.io is forbidden: "
        f'User "{ADMIT.name}" cannot create resource "subjectaccessreviews" in API group '
        '"authorization.k8s.io" at the cluster scope'
    )


def test_a_self_subject_access_review_asks_about_the_requester(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    token = authorizer.token_for(ADMIT)
    allowed = post(server, token, SSAR, ssar(NODES_GET))
    assert allowed.status == 201
    assert allowed.body == {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"resourceAttributes": NODES_GET},
        "status": {
            "allowed": True,
            "reason": by_cluster_role("nodeheal-admit", "Group", "nodeheal-admit"),
        },
    }
    assert post(server, token, SSAR, ssar(NODES_PATCH)).body["status"] == {"allowed": False}
    # system:masters is allowed by the privileged-group authorizer, which gives no reason.
    assert post(server, authorizer.admin_token(), SSAR, ssar(NODES_PATCH)).body["status"] == {"allowed": True}


def test_anonymous_may_not_review_its_own_access(served: tuple[FakeKubeApiServer, RbacAuthorizer]) -> None:
    server, _ = served
    response = post(server, None, SSAR, ssar(NODES_GET))
    assert response.status == 403
    assert (
        'User "system:anonymous" cannot create resource "selfsubjectaccessreviews"'
        in response.body["message"]
    )


def test_reviews_are_questions_and_record_nothing(served: tuple[FakeKubeApiServer, RbacAuthorizer]) -> None:
    server, authorizer = served
    admin = authorizer.admin_token()
    for resource in (NODES_GET, NODES_PATCH):
        post(server, admin, SAR, sar(ADMIT.name, list(ADMIT.groups), resource))
    post(server, authorizer.token_for(ADMIT), SSAR, ssar(NODES_PATCH))
    assert authorizer.used() == set()
    assert authorizer.denied == []
    # The cluster's own bindings are not NodeHeal's grants.
    assert all(not role.startswith("system:") for role, _ in authorizer.unused())


def test_non_resource_paths(served: tuple[FakeKubeApiServer, RbacAuthorizer]) -> None:
    server, authorizer = served

    def review(path: str) -> Any:
        body = {
            "kind": "SubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "spec": {"nonResourceAttributes": {"path": path, "verb": "get"}, "groups": [AUTHENTICATED_GROUP]},
        }
        return post(server, authorizer.admin_token(), SAR, body).body["status"]

    assert review("/healthz") == {
        "allowed": True,
        "reason": by_cluster_role("system:public-info-viewer", "Group", AUTHENTICATED_GROUP),
    }
    assert review("/metrics") == {"allowed": False}


@pytest.mark.parametrize(
    ("spec", "causes"),
    [
        (
            {"resourceAttributes": NODES_GET},
            [invalid("spec.user", '""', messages.REVIEW_NO_SUBJECT)],
        ),
        (
            {"user": "u"},
            [invalid("spec.resourceAttributes", "null", messages.REVIEW_ONE_OF_ATTRIBUTES)],
        ),
        (
            {
                "user": "u",
                "resourceAttributes": NODES_GET,
                "nonResourceAttributes": {"path": "/x", "verb": "get"},
            },
            [
                invalid(
                    "spec.nonResourceAttributes",
                    'authorization.NonResourceAttributes{Path:"/x", Verb:"get"}',
                    messages.REVIEW_BOTH_ATTRIBUTES,
                )
            ],
        ),
        (
            {},
            [
                invalid("spec.resourceAttributes", "null", messages.REVIEW_ONE_OF_ATTRIBUTES),
                invalid("spec.user", '""', messages.REVIEW_NO_SUBJECT),
            ],
        ),
    ],
)
def test_an_invalid_review_is_422_with_the_internal_kind(
    served: tuple[FakeKubeApiServer, RbacAuthorizer], spec: dict[str, Any], causes: list[str]
) -> None:
    server, authorizer = served
    body = {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "spec": spec}
    response = post(server, authorizer.admin_token(), SAR, body)
    assert response.status == 422
    listed = causes[0] if len(causes) == 1 else "[" + ", ".join(causes) + "]"
    assert response.body["message"] == messages.INVALID.format(
        kind=".authorization.k8s.io", quoted_name='""', causes=listed
    )
    assert response.body["details"]["group"] == "authorization.k8s.io"
    assert "kind" not in response.body["details"]


def test_a_self_review_needs_exactly_one_kind_of_attributes(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    body = {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "spec": {}}
    response = post(server, authorizer.token_for(ADMIT), SSAR, body)
    assert response.status == 422
    assert response.body["message"] == messages.INVALID.format(
        kind=".authorization.k8s.io",
        quoted_name='""',
        causes=invalid("spec.resourceAttributes", "null", messages.REVIEW_ONE_OF_ATTRIBUTES),
    )


def test_reviews_are_create_only(served: tuple[FakeKubeApiServer, RbacAuthorizer]) -> None:
    server, authorizer = served
    response = post(server, authorizer.admin_token(), SAR, None, method="GET")
    assert response.status == 405


def test_without_an_authorizer_everything_is_allowed() -> None:
    with FakeKubeApiServer() as server:
        response = post(server, None, SAR, sar("anyone", [], NODES_PATCH))
        assert response.status == 201
        assert response.body["status"] == {"allowed": True}


def test_the_kubernetes_client_reads_the_answers(served: tuple[FakeKubeApiServer, RbacAuthorizer]) -> None:
    server, authorizer = served
    with server.api_client(token=authorizer.token_for(ADMIT)) as client:
        api = kubernetes.client.AuthorizationV1Api(client)
        answer = api.create_self_subject_access_review(
            {"spec": {"resourceAttributes": {"verb": "get", "resource": "nodes"}}}
        )
    assert answer.status.allowed is True
    assert answer.status.reason.startswith("RBAC: allowed by ClusterRoleBinding")
