"""Ask the API server who may do what: SelfSubjectAccessReview and SubjectAccessReview.

Both are ``create`` requests of ``authorization.k8s.io/v1`` that store nothing and change nothing:
the API server answers with the review and its ``status`` (``allowed``, ``reason``). They answer
with the cluster's whole authorizer chain, so on EKS an access entry's access policies count as
well as RBAC (https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access):

* :meth:`AccessReviews.may_i` (SelfSubjectAccessReview) asks about the caller itself: every
  authenticated user may ask it (the bootstrap ``system:basic-user`` role);
* :meth:`AccessReviews.may` (SubjectAccessReview) asks about any user and groups named in the
  spec, and needs ``create`` on ``subjectaccessreviews``, which a cluster administrator has. The
  subject is exactly what the spec names: nothing is added, not even ``system:authenticated``
  (``AuthorizationAttributesFrom``,
  https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/authorization/util/helpers.go),
  so a caller asking about a real identity names that identity's groups in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nodeheal.grants import Permission
from nodeheal.kube.client import ApiOperations, expect_success

API = "/apis/authorization.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class AccessAnswer:
    allowed: bool
    #: Why, in the authorizer's words (``RBAC: allowed by ClusterRoleBinding ...``); often empty
    #: when not allowed.
    reason: str = ""
    evaluation_error: str = ""


def resource_attributes(permission: Permission, namespace: str = "") -> dict[str, str]:
    """``spec.resourceAttributes`` for ``permission`` (``pods/eviction`` splits into resource and
    subresource). An empty namespace asks about every namespace, as a ClusterRoleBinding grants."""
    resource, _, subresource = permission.resource.partition("/")
    attributes = {"verb": permission.verb, "group": permission.api_group, "resource": resource}
    if subresource:
        attributes["subresource"] = subresource
    if permission.name:
        attributes["name"] = permission.name
    if namespace:
        attributes["namespace"] = namespace
    return attributes


class AccessReviews(ApiOperations):
    def may_i(self, permission: Permission, namespace: str = "") -> AccessAnswer:
        """May the caller itself do ``permission``?"""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": resource_attributes(permission, namespace)},
        }
        return self._review("selfsubjectaccessreviews", body, f"review my access to {permission}")

    def may(
        self, user: str, groups: Sequence[str], permission: Permission, namespace: str = ""
    ) -> AccessAnswer:
        """May ``user`` in exactly ``groups`` do ``permission``?"""
        spec: dict[str, Any] = {"resourceAttributes": resource_attributes(permission, namespace)}
        if user:
            spec["user"] = user
        if groups:
            spec["groups"] = list(groups)
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return self._review(
            "subjectaccessreviews", body, f"review {user or ', '.join(groups)}'s access to {permission}"
        )

    def _review(self, resource: str, body: dict[str, Any], action: str) -> AccessAnswer:
        response = self._request("POST", f"{API}/{resource}", action=action, body=body)
        status = expect_success(response, action=action).get("status") or {}
        return AccessAnswer(
            allowed=status.get("allowed") is True,
            reason=str(status.get("reason") or ""),
            evaluation_error=str(status.get("evaluationError") or ""),
        )
