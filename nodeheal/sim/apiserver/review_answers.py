"""SubjectAccessReview and SelfSubjectAccessReview: "may this user do that?", answered by the same
authorizer that guards every request.

kube-apiserver serves both as create-only, cluster-scoped resources of ``authorization.k8s.io/v1``
that are stored nowhere: it decodes the review, validates it, asks its authorizer chain and answers
201 with the review it was sent plus ``status``
(https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/authorization/subjectaccessreview/rest.go,
.../selfsubjectaccessreview/rest.go). The two differ in whom they ask about:

* a SubjectAccessReview names the subject, exactly ``spec.user`` and ``spec.groups``: nothing is
  added, not even ``system:authenticated``, which the authenticator adds to every real request
  (``AuthorizationAttributesFrom`` in pkg/registry/authorization/util/helpers.go). Creating one is
  itself a request RBAC must allow (``create subjectaccessreviews``), because it reveals what
  anyone may do;
* a SelfSubjectAccessReview asks about the requester, as authenticated; every authenticated user
  may create one (the bootstrap ``system:basic-user`` binding).

``status.allowed`` is the authorizer's allow; ``status.denied`` stays false because RBAC never
denies, it only has no opinion; ``status.reason`` says which binding allowed
(:meth:`~nodeheal.sim.apiserver.authorizer.RbacAuthorizer.review`). A fake API server without an
authorizer allows everything, as ``--authorization-mode=AlwaysAllow`` does, with no reason.

Validation, as ``ValidateSubjectAccessReviewSpec`` and ``ValidateSelfSubjectAccessReviewSpec`` of
pkg/apis/authorization/validation/validation.go (v1.33.1): exactly one of ``resourceAttributes`` and
``nonResourceAttributes``, and for a SubjectAccessReview a user or a group; a failure is 422 Invalid
whose kind is empty, because the review was converted to the internal version by then:
``.authorization.k8s.io "" is invalid: ...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeheal.sim.apiserver import codec, messages
from nodeheal.sim.apiserver.authorizer import Decision, RbacAuthorizer, RequestAttributes, UserInfo
from nodeheal.sim.apiserver.fielderrors import FieldError, go_quote, invalid, invalid_error
from nodeheal.sim.apiserver.resources import ResourceType

JSON = dict[str, Any]
GROUP = "authorization.k8s.io"

SUBJECT_ACCESS_REVIEWS = ResourceType(
    "subjectaccessreviews",
    "SubjectAccessReview",
    GROUP,
    "v1",
    namespaced=False,
    has_status=False,
    schema="authorization.SubjectAccessReview",
)
SELF_SUBJECT_ACCESS_REVIEWS = ResourceType(
    "selfsubjectaccessreviews",
    "SelfSubjectAccessReview",
    GROUP,
    "v1",
    namespaced=False,
    has_status=False,
    schema="authorization.SelfSubjectAccessReview",
)
#: Path -> the review served there.
REVIEWS: Mapping[str, ResourceType] = {
    f"/apis/{GROUP}/v1/{rtype.plural}": rtype
    for rtype in (SUBJECT_ACCESS_REVIEWS, SELF_SUBJECT_ACCESS_REVIEWS)
}


def answer(rtype: ResourceType, review: JSON, requester: UserInfo, authorizer: RbacAuthorizer | None) -> JSON:
    """The review (decoded as the server keeps it) with its ``status``, as the server writes it back;
    422 Invalid when the spec is not a question the authorizer can answer."""
    spec: Mapping[str, Any] = review.get("spec") or {}
    errors = _validate(spec, subject=rtype is SUBJECT_ACCESS_REVIEWS)
    if errors:
        raise invalid_error("", GROUP, "", errors)
    if rtype is SUBJECT_ACCESS_REVIEWS:
        subject = UserInfo(str(spec.get("user") or ""), tuple(spec.get("groups") or ()))
    else:
        subject = requester
    attrs = _attributes(subject, spec)
    decision = Decision(True) if authorizer is None else authorizer.review(attrs)
    status: JSON = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return codec.canonical(rtype.schema, {**review, "status": status})


def _validate(spec: Mapping[str, Any], *, subject: bool) -> list[FieldError]:
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    errors: list[FieldError] = []
    if resource is not None and non_resource is not None:
        errors.append(
            invalid(
                "spec.nonResourceAttributes",
                _non_resource_value(non_resource),
                messages.REVIEW_BOTH_ATTRIBUTES,
            )
        )
    if resource is None and non_resource is None:
        # The value printed is spec.NonResourceAttributes, a nil pointer: ``null``.
        errors.append(
            invalid(
                "spec.resourceAttributes",
                "null",
                messages.REVIEW_ONE_OF_ATTRIBUTES,
            )
        )
    if subject and not spec.get("user") and not spec.get("groups"):
        errors.append(
            invalid(
                "spec.user",
                go_quote(str(spec.get("user") or "")),
                messages.REVIEW_NO_SUBJECT,
            )
        )
    return errors


def _non_resource_value(attributes: Mapping[str, Any]) -> str:
    """``%#v`` of the internal ``authorization.NonResourceAttributes`` the field error prints."""
    path = go_quote(str(attributes.get("path") or ""))
    verb = go_quote(str(attributes.get("verb") or ""))
    return f"authorization.NonResourceAttributes{{Path:{path}, Verb:{verb}}}"


def _attributes(user: UserInfo, spec: Mapping[str, Any]) -> RequestAttributes:
    resource = spec.get("resourceAttributes")
    if resource is None:
        non_resource: Mapping[str, Any] = spec.get("nonResourceAttributes") or {}
        return RequestAttributes(
            user=user,
            verb=str(non_resource.get("verb") or ""),
            path=str(non_resource.get("path") or ""),
            resource_request=False,
        )
    return RequestAttributes(
        user=user,
        verb=str(resource.get("verb") or ""),
        path="",
        resource_request=True,
        api_group=str(resource.get("group") or ""),
        # ResourceAttributesFrom: an empty version matches every version.
        api_version=str(resource.get("version") or "*"),
        namespace=str(resource.get("namespace") or ""),
        resource=str(resource.get("resource") or ""),
        subresource=str(resource.get("subresource") or ""),
        name=str(resource.get("name") or ""),
    )
