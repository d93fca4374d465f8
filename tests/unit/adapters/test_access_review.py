"""``nodeheal.kube.access_review`` against the fake API server's RBAC authorizer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodeheal.errors import KubernetesApiError
from nodeheal.grants import Permission
from nodeheal.kube.access_review import AccessReviews, resource_attributes
from nodeheal.kube.client import StaticClientProvider
from nodeheal.rbac import KUBERNETES_RULES
from nodeheal.sim.apiserver.authorizer import (
    AUTHENTICATED_GROUP,
    RbacAuthorizer,
    UserInfo,
    nodeheal_authorizer,
)
from nodeheal.sim.apiserver.server import FakeKubeApiServer

EVICT = Permission("create", "", "pods/eviction")
DRAIN = UserInfo("arn:aws:sts::123456789012:assumed-role/drain/NodeHeal-drain", ("nodeheal-drain",))


@pytest.fixture
def served() -> Iterator[tuple[FakeKubeApiServer, RbacAuthorizer]]:
    authorizer = nodeheal_authorizer()
    with FakeKubeApiServer(authorizer=authorizer) as server:
        yield server, authorizer


def reviews(server: FakeKubeApiServer, token: str) -> AccessReviews:
    return AccessReviews(StaticClientProvider(server.url, token=token).transport("c"))


def test_resource_attributes_split_the_subresource() -> None:
    assert resource_attributes(EVICT) == {
        "verb": "create",
        "group": "",
        "resource": "pods",
        "subresource": "eviction",
    }
    named = Permission("get", "coordination.k8s.io", "leases", "nodeheal-exporter")
    assert resource_attributes(named, "nodeheal") == {
        "verb": "get",
        "group": "coordination.k8s.io",
        "resource": "leases",
        "name": "nodeheal-exporter",
        "namespace": "nodeheal",
    }


def test_may_asks_about_exactly_the_groups_named(served: tuple[FakeKubeApiServer, RbacAuthorizer]) -> None:
    server, authorizer = served
    admin = reviews(server, authorizer.admin_token())
    for rule in KUBERNETES_RULES["drain"]:
        for permission in rule.permissions():
            answer = admin.may(DRAIN.name, DRAIN.groups, permission)
            assert answer.allowed, permission
            assert answer.reason.startswith("RBAC: allowed by") and "nodeheal-drain" in answer.reason
    # Only uncordon and cordon patch nodes (docs/architecture.md, D8): drain may not.
    assert not admin.may(DRAIN.name, DRAIN.groups, Permission("patch", "", "nodes")).allowed
    assert not admin.may(DRAIN.name, (), EVICT).allowed  # the same user without its group


def test_may_i_asks_about_the_caller(served: tuple[FakeKubeApiServer, RbacAuthorizer]) -> None:
    server, authorizer = served
    drain = reviews(server, authorizer.token_for(UserInfo(DRAIN.name, (*DRAIN.groups, AUTHENTICATED_GROUP))))
    assert drain.may_i(EVICT).allowed
    assert not drain.may_i(Permission("patch", "", "nodes")).allowed


def test_a_caller_that_may_not_review_others_gets_an_error_naming_the_request(
    served: tuple[FakeKubeApiServer, RbacAuthorizer],
) -> None:
    server, authorizer = served
    drain = reviews(server, authorizer.token_for(UserInfo(DRAIN.name, (*DRAIN.groups, AUTHENTICATED_GROUP))))
    with pytest.raises(KubernetesApiError) as raised:
        drain.may(DRAIN.name, DRAIN.groups, EVICT)
    assert "HTTP 403" in str(raised.value) and "subjectaccessreviews" in str(raised.value)
