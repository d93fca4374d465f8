"""Authentication and RBAC authorization for the fake API server (docs/architecture.md, D8).

Each caller presents a bearer token naming an identity (user and groups), as an EKS access entry
or a service account token does. Each request is turned into the attributes kube-apiserver's
``RequestInfoFactory`` derives (verb, API group, resource, subresource, namespace, name) and
checked against the (Cluster)Role bindings the authorizer was given: a request no rule allows gets
the real server's 403 ``Forbidden`` Status. Every permission that allowed a request is recorded,
so a test can list the ones granted but never exercised.

Rules as RBAC evaluates them: a rule matches when its apiGroups, resources (``pods/eviction`` for a
subresource) and verbs contain the request's (or ``*``) and, when it names resourceNames, the
request names one of them. A ClusterRoleBinding applies everywhere, a RoleBinding in its namespace.
``system:masters`` may do anything, as on a real cluster (the test harness's own identity).

Every cluster also carries kube-apiserver's bootstrap policy; of it the fake holds what NodeHeal's
callers meet: ``system:basic-user`` (any authenticated user may ask "may I?" with a
SelfSubjectAccessReview) and ``system:public-info-viewer`` (``/healthz``, ``/version``...). They are
the cluster's, not NodeHeal's: they never count among the permissions granted or used.

:meth:`RbacAuthorizer.review` answers the same question for a SubjectAccessReview or a
SelfSubjectAccessReview without recording anything (asking is not doing), with the reason RBAC
gives: ``RBAC: allowed by ClusterRoleBinding "<binding>" of ClusterRole "<role>" to Group "<group>"``
(``authorizingVisitor.visit`` and the binding describers of
https://github.com/kubernetes/kubernetes/blob/v1.33.1/plugin/pkg/auth/authorizer/rbac/rbac.go and
pkg/registry/rbac/validation/rule.go); a request no rule allows is "no opinion" with no reason,
and a member of ``system:masters`` is allowed by the privileged-group authorizer, also without one.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeheal.grants import Permission, PolicyRule
from nodeheal.kube.client import StaticClientProvider
from nodeheal.rbac import (
    DEFAULT_GROUP_PREFIX,
    EXPORTER_NAMESPACE,
    EXPORTER_ROLES,
    EXPORTER_SERVICE_ACCOUNT,
    function_roles,
)
from nodeheal.sim.apiserver import messages
from nodeheal.sim.apiserver.status import ApiError, qualified, status_body
from nodeheal.sim.stack.synthesized_app import ACCOUNT_ID, FunctionSpec

MASTERS_GROUP = "system:masters"
AUTHENTICATED_GROUP = "system:authenticated"
ANONYMOUS = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
#: What the default ``system:public-info-viewer`` ClusterRole lets anyone read.
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})

_VERBS = {
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
    "GET": "get",
    "HEAD": "get",
}
#: Subresources of a namespace object itself (``/api/v1/namespaces/x/status``), as in RequestInfoFactory.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestAttributes:
    """What the authorizer decides on; the fields of apiserver's ``authorizer.Attributes``."""

    user: UserInfo
    verb: str
    path: str
    resource_request: bool
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def __str__(self) -> str:
        scope = f" in namespace {self.namespace}" if self.namespace else ""
        named = f" {self.name!r}" if self.name else ""
        if not self.resource_request:
            return f"{self.verb} {self.path}"
        group = f".{self.api_group}" if self.api_group else ""
        return f"{self.verb} {self.full_resource}{group}{named}{scope}"


def request_attributes(
    user: UserInfo, method: str, path: str, params: Mapping[str, str]
) -> RequestAttributes:
    """Derive the request's attributes the way kube-apiserver's RequestInfoFactory does."""
    verb = _VERBS.get(method, method.lower())
    parts = [part for part in path.split("/") if part]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return RequestAttributes(user=user, verb=verb, path=path, resource_request=False)
    if not rest:
        # Discovery of a group version: a non-resource request.
        return RequestAttributes(user=user, verb=verb, path=path, resource_request=False)
    if rest[0] == "watch":
        verb, rest = "watch", rest[1:]
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if params.get("watch") in ("true", "1", "True") else "list"
        selector = params.get("fieldSelector") or ""
        if selector.startswith("metadata.name=") and "," not in selector:
            name = selector.removeprefix("metadata.name=")
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestAttributes(
        user=user,
        verb=verb,
        path=path,
        resource_request=True,
        api_group=group,
        api_version=version,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
    )


def forbidden(attrs: RequestAttributes) -> ApiError:
    """The 403 kube-apiserver answers (``responsewriters.Forbidden``), message and details alike."""
    user = attrs.user.name
    if not attrs.resource_request:
        message = f'forbidden: User "{user}" cannot {attrs.verb} path "{attrs.path}"'
        return ApiError(status_body(403, "Forbidden", message, {}))
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    reason = (
        f'User "{user}" cannot {attrs.verb} resource "{attrs.full_resource}" '
        f'in API group "{attrs.api_group}" {scope}'
    )
    what = qualified(attrs.resource, attrs.api_group)
    subject = f'{what} "{attrs.name}"' if attrs.name else what
    message = f"{subject} is forbidden: {reason}"
    details: dict[str, Any] = {}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.api_group:
        details["group"] = attrs.api_group
    details["kind"] = attrs.resource
    return ApiError(status_body(403, "Forbidden", message, details))


def unauthorized() -> ApiError:
    return ApiError(status_body(401, "Unauthorized", "Unauthorized"))


@dataclass(frozen=True, slots=True)
class RoleBinding:
    """A role's rules bound to subjects: a ClusterRoleBinding (``namespace`` empty) or a RoleBinding."""

    role: str
    rules: tuple[PolicyRule, ...]
    groups: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    namespace: str = ""

    def applies_to(self, attrs: RequestAttributes) -> bool:
        if self.namespace and attrs.namespace != self.namespace:
            return False
        return attrs.user.name in self.users or any(g in self.groups for g in attrs.user.groups)

    def granted(self) -> Iterable[tuple[str, Permission]]:
        for rule in self.rules:
            for permission in rule.permissions():
                yield self.role, permission

    def describe(self, user: UserInfo) -> str:
        """The binding as RBAC names it in a review's reason. The fake names each binding and its
        role alike, as NodeHeal's manifests do; a user that is a service account is bound as one
        (``kind: ServiceAccount`` in deploy/exporter)."""
        if user.name in self.users:
            prefix = "system:serviceaccount:"
            if user.name.startswith(prefix) and user.name.count(":") == 3:
                namespace, name = user.name[len(prefix) :].split(":")
                subject = messages.BINDING_SUBJECT.format(kind="ServiceAccount", name=f"{name}/{namespace}")
            else:
                subject = messages.BINDING_SUBJECT.format(kind="User", name=user.name)
        else:
            group = next(g for g in user.groups if g in self.groups)
            subject = messages.BINDING_SUBJECT.format(kind="Group", name=group)
        if self.namespace:
            return messages.ROLE_BINDING_SOURCE.format(
                binding=self.role, namespace=self.namespace, role=self.role, subject=subject
            )
        return messages.CLUSTER_ROLE_BINDING_SOURCE.format(binding=self.role, role=self.role, subject=subject)


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorizer's answer: ``allowed`` (else no opinion: RBAC never denies) and its reason."""

    allowed: bool
    reason: str = ""


#: kube-apiserver's bootstrap ClusterRoleBinding ``system:basic-user``: every authenticated user may
#: review its own access (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go, v1.33.1).
BASIC_USER = RoleBinding(
    "system:basic-user",
    (
        PolicyRule(
            ("authorization.k8s.io",),
            ("selfsubjectaccessreviews", "selfsubjectrulesreviews"),
            ("create",),
            "A user may learn what it may do.",
        ),
    ),
    groups=(AUTHENTICATED_GROUP,),
)
#: The bootstrap ClusterRoleBinding that lets everyone read the public paths.
PUBLIC_INFO_VIEWER = "system:public-info-viewer"


def _matches(rule: PolicyRule, attrs: RequestAttributes) -> bool:
    if not ("*" in rule.api_groups or attrs.api_group in rule.api_groups):
        return False
    if not ("*" in rule.resources or attrs.full_resource in rule.resources):
        return False
    if not ("*" in rule.verbs or attrs.verb in rule.verbs):
        return False
    return not rule.resource_names or attrs.name in rule.resource_names


def service_account(namespace: str, name: str) -> UserInfo:
    return UserInfo(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED_GROUP),
    )


class RbacAuthorizer:
    """Bearer-token authentication plus RBAC over ``bindings``; records what each request used.

    Thread-safe: the fake API server serves every connection on its own thread.
    """

    def __init__(
        self, bindings: Sequence[RoleBinding] = (), *, defaults: Sequence[RoleBinding] = (BASIC_USER,)
    ) -> None:
        self._bindings = list(bindings)
        #: The cluster's own bindings (bootstrap policy): they allow, but are not NodeHeal's grants.
        self._defaults = tuple(defaults)
        self._tokens: dict[str, UserInfo] = {}
        self._used: set[tuple[str, Permission]] = set()
        self._denied: list[RequestAttributes] = []
        self._lock = threading.Lock()

    # -- configuration ---------------------------------------------------------------------------

    def bind(self, binding: RoleBinding) -> None:
        with self._lock:
            self._bindings.append(binding)

    def unbind(self, role: str) -> int:
        """Delete the bindings of ``role``, as deleting a (Cluster)RoleBinding does: requests that
        arrive from now on are checked without them (open watches are not cut). Returns how many."""
        with self._lock:
            kept = [b for b in self._bindings if b.role != role]
            removed = len(self._bindings) - len(kept)
            self._bindings = kept
        return removed

    def token_for(self, user: UserInfo) -> str:
        """A new bearer token that authenticates as ``user``."""
        token = secrets.token_urlsafe(16)
        with self._lock:
            self._tokens[token] = user
        return token

    def admin_token(self) -> str:
        """A token in ``system:masters``, for harness code that plays the cluster itself."""
        return self.token_for(UserInfo("nodeheal-sim-admin", (MASTERS_GROUP, AUTHENTICATED_GROUP)))

    # -- per request -----------------------------------------------------------------------------

    def authenticate(self, authorization: str | None) -> UserInfo:
        """The caller named by the ``Authorization`` header; anonymous without one, 401 for a bad one."""
        if not authorization:
            return UserInfo(ANONYMOUS, (UNAUTHENTICATED_GROUP,))
        scheme, _, token = authorization.partition(" ")
        with self._lock:
            user = self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise unauthorized()
        return user

    def authorize(self, attrs: RequestAttributes) -> None:
        """Return if allowed; raise the 403 otherwise. Records the permissions that allowed it."""
        if MASTERS_GROUP in attrs.user.groups:
            return
        if not attrs.resource_request and attrs.path in PUBLIC_PATHS:
            return
        with self._lock:
            allowed = False
            if attrs.resource_request:
                for binding, rule in self._allowing(attrs, every=True):
                    allowed = True
                    if binding in self._defaults:
                        continue
                    name = attrs.name if rule.resource_names else ""
                    permission = Permission(attrs.verb, attrs.api_group, attrs.full_resource, name)
                    self._used.add((binding.role, permission))
            if not allowed:
                self._denied.append(attrs)
        if not allowed:
            raise forbidden(attrs)

    def review(self, attrs: RequestAttributes) -> Decision:
        """What the authorizer chain would answer ``attrs``, recording nothing: the answer to a
        SubjectAccessReview or SelfSubjectAccessReview."""
        if MASTERS_GROUP in attrs.user.groups:
            # The privileged-group authorizer allows with no reason (authorizerfactory.NewPrivilegedGroups).
            return Decision(True)
        if not attrs.resource_request:
            groups = [g for g in attrs.user.groups if g in (AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP)]
            if attrs.path in PUBLIC_PATHS and attrs.verb == "get" and groups:
                subject = messages.BINDING_SUBJECT.format(kind="Group", name=groups[0])
                source = messages.CLUSTER_ROLE_BINDING_SOURCE.format(
                    binding=PUBLIC_INFO_VIEWER, role=PUBLIC_INFO_VIEWER, subject=subject
                )
                return Decision(True, messages.RBAC_ALLOWED_BY.format(source=source))
            return Decision(False)
        with self._lock:
            for binding, _ in self._allowing(attrs, every=False):
                return Decision(True, messages.RBAC_ALLOWED_BY.format(source=binding.describe(attrs.user)))
        return Decision(False)

    def _allowing(self, attrs: RequestAttributes, *, every: bool) -> Iterable[tuple[RoleBinding, PolicyRule]]:
        """The (binding, rule) pairs that allow ``attrs``: all of them, or the first one of each
        binding when ``every`` is false. Call with the lock held."""
        for binding in (*self._bindings, *self._defaults):
            if not binding.applies_to(attrs):
                continue
            for rule in binding.rules:
                if _matches(rule, attrs):
                    yield binding, rule
                    if not every:
                        break

    # -- what the tests read ---------------------------------------------------------------------

    @property
    def denied(self) -> list[RequestAttributes]:
        with self._lock:
            return list(self._denied)

    def granted(self) -> set[tuple[str, Permission]]:
        """Every (role, permission) the bindings grant; ``*`` entries count as one permission each."""
        with self._lock:
            return {grant for binding in self._bindings for grant in binding.granted()}

    def used(self) -> set[tuple[str, Permission]]:
        with self._lock:
            return set(self._used)

    def unused(self) -> list[tuple[str, Permission]]:
        """Granted permissions no request has needed yet, sorted by role."""
        return sorted(self.granted() - self.used())


# -- NodeHeal's own roles ---------------------------------------------------------------------------


def nodeheal_authorizer(prefix: str = DEFAULT_GROUP_PREFIX) -> RbacAuthorizer:
    """An authorizer holding NodeHeal's roles, bound as ``deploy/rbac`` and ``deploy/exporter`` bind
    them: each function's ClusterRole to its group, the exporter's roles to its service account."""
    bindings = [
        RoleBinding(role.name(prefix), role.rules, groups=(role.name(prefix),)) for role in function_roles()
    ]
    exporter = exporter_user()
    bindings += [
        RoleBinding(role.name, role.rules, users=(exporter.name,), namespace=role.namespace)
        for role in EXPORTER_ROLES
    ]
    return RbacAuthorizer(bindings)


def exporter_user() -> UserInfo:
    return service_account(EXPORTER_NAMESPACE, EXPORTER_SERVICE_ACCOUNT)


def function_user(function: FunctionSpec, cluster: str) -> UserInfo:
    """How EKS names a function's caller: the role's assumed-role ARN, in its access entry's groups."""
    groups = function.kubernetes_groups.get(cluster, ())
    return UserInfo(
        f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/{function.role}/{function.logical_id}",
        (*groups, AUTHENTICATED_GROUP),
    )


class FunctionCredentials:
    """``LocalAws``'s kube provider factory: each function gets a transport to ``url`` whose bearer
    token authenticates it as its own role, in the groups its EKS access entry for ``cluster``
    names in the synthesized template. Without an authorizer, no credentials at all."""

    def __init__(self, url: str, authorizer: RbacAuthorizer | None, cluster: str) -> None:
        self._url = url
        self._authorizer = authorizer
        self._cluster = cluster

    def __call__(self, function: FunctionSpec) -> StaticClientProvider:
        if self._authorizer is None:
            return StaticClientProvider(self._url)
        return StaticClientProvider(
            self._url, token=self._authorizer.token_for(function_user(function, self._cluster))
        )
