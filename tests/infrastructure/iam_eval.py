"""A small IAM policy evaluator for synthesized templates (moto evaluates no IAM).

It answers one question for one account: may ``principal`` do ``action`` on ``resource`` with these
request context keys, given the principal's identity policies and the resource's policy?

* An explicit Deny in any policy wins; otherwise an Allow in either policy is needed (same-account
  rules); otherwise the request is implicitly denied.
* ``Action``/``NotAction``, ``Resource``/``NotResource``, ``Principal``/``NotPrincipal`` with ``*`` and
  ``?`` wildcards (actions case-insensitively).
* Condition operators: String(Not)Equals, String(Not)Like, Arn(Not)Equals, Arn(Not)Like, Bool,
  Null; the ``IfExists`` suffix; the ``ForAllValues:``/``ForAnyValue:`` set prefixes. An operator
  it does not know raises, so a policy that starts using one fails the tests instead of passing.
* CloudFormation intrinsics (``Ref``, ``Fn::GetAtt``, ``Fn::Join``, ``Fn::Sub``, ``Fn::Select``,
  ``Fn::Split``) resolve to stable fake ARNs in account 123456789012, us-west-2.

AWS managed policies (``ManagedPolicyArns``) are not in the template and are not evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ACCOUNT = "123456789012"
REGION = "us-west-2"
PARTITION = "aws"

ALLOW = "Allow"
EXPLICIT_DENY = "ExplicitDeny"
IMPLICIT_DENY = "ImplicitDeny"

_PSEUDO = {
    "AWS::AccountId": ACCOUNT,
    "AWS::Region": REGION,
    "AWS::Partition": PARTITION,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "NodeHealTest",
}

#: Resource type -> (service, ARN resource part with {name}) for Fn::GetAtt Arn.
_ARN_SHAPES = {
    "AWS::IAM::Role": ("iam", "role/{name}"),
    "AWS::Events::EventBus": ("events", "event-bus/{name}"),
    "AWS::Events::Rule": ("events", "rule/{name}"),
    "AWS::Lambda::Function": ("lambda", "function:{name}"),
    "AWS::StepFunctions::StateMachine": ("states", "stateMachine:{name}"),
    "AWS::DynamoDB::Table": ("dynamodb", "table/{name}"),
    "AWS::SNS::Topic": ("sns", "{name}"),
    "AWS::SQS::Queue": ("sqs", "{name}"),
}
_GLOBAL_SERVICES = {"iam"}


class Resolver:
    """Resolves intrinsics in a template fragment to plain strings."""

    def __init__(self, template: Mapping[str, Any]) -> None:
        self._resources: Mapping[str, Any] = template.get("Resources", {})

    def name(self, logical: str) -> str:
        properties = self._resources.get(logical, {}).get("Properties", {})
        for key in ("Name", "RoleName", "FunctionName", "TableName", "TopicName", "StateMachineName"):
            value = properties.get(key)
            if isinstance(value, str):
                return value
        return logical

    def arn(self, logical: str) -> str:
        resource_type = self._resources.get(logical, {}).get("Type", "")
        service, shape = _ARN_SHAPES.get(resource_type, (resource_type.split("::")[1].lower(), "{name}"))
        region = "" if service in _GLOBAL_SERVICES else REGION
        return f"arn:{PARTITION}:{service}:{region}:{ACCOUNT}:{shape.format(name=self.name(logical))}"

    def ref(self, logical: str) -> str:
        if logical in _PSEUDO:
            return _PSEUDO[logical]
        resource_type = self._resources.get(logical, {}).get("Type", "")
        if resource_type in ("AWS::SNS::Topic", "AWS::StepFunctions::StateMachine"):
            return self.arn(logical)  # these Ref to their ARN
        return self.name(logical)

    def attribute(self, logical: str, attribute: str) -> str:
        if attribute == "Arn":
            return self.arn(logical)
        if attribute in ("Name", "RoleId"):
            return self.name(logical)
        return f"{logical}.{attribute}"

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, Mapping):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                return self.ref(argument)
            if key == "Fn::GetAtt":
                logical, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
                return self.attribute(logical, attribute)
            if key == "Fn::Join":
                separator, parts = argument
                return separator.join(str(self.resolve(part)) for part in parts)
            if key == "Fn::Sub":
                return self._sub(argument)
            if key == "Fn::Select":
                index, items = argument
                return self.resolve(items)[int(index)]
            if key == "Fn::Split":
                separator, text = argument
                return str(self.resolve(text)).split(separator)
        return {key: self.resolve(item) for key, item in value.items()}

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(self.resolve(variables[name]))
            if name in _PSEUDO:
                return _PSEUDO[name]
            if "." in name:
                logical, attribute = name.split(".", 1)
                return self.attribute(logical, attribute)
            return self.ref(name)

        return re.sub(r"\$\{([^}!]+)\}", replace, text)


@dataclass(frozen=True)
class Request:
    #: A role ARN (``arn:aws:iam::<acct>:role/<name>``) or a service principal (``events.amazonaws.com``).
    principal: str
    action: str
    resource: str
    #: Request context keys (case-insensitive); a list is a multivalued key.
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)

    @property
    def is_service(self) -> bool:
        return not self.principal.startswith("arn:")

    def keys(self) -> dict[str, list[str]]:
        values: dict[str, list[str]] = {}
        if not self.is_service:
            values["aws:principalarn"] = [self.principal]
            values["aws:principalaccount"] = [self.principal.split(":")[4]]
        values["aws:principalisawsservice"] = ["true" if self.is_service else "false"]
        for key, value in self.context.items():
            values[key.lower()] = [value] if isinstance(value, str) else list(value)
        return values


def _wildcard(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.IGNORECASE if ignore_case else 0) is not None


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _matches_any(patterns: Any, value: str, *, ignore_case: bool = False) -> bool:
    return any(_wildcard(str(p), value, ignore_case=ignore_case) for p in _as_list(patterns))


def _principal_matches(principal: Any, request: Request) -> bool:
    if principal == "*":
        return True
    if not isinstance(principal, Mapping):
        raise ValueError(f"unsupported Principal {principal!r}")
    for kind, values in principal.items():
        for raw in _as_list(values):
            value = str(raw)
            if kind == "AWS" and value == "*":
                return True
            if kind == "AWS" and not request.is_service:
                same_account = request.principal.split(":")[4] == ACCOUNT
                if value == request.principal or (
                    same_account and value in (ACCOUNT, f"arn:{PARTITION}:iam::{ACCOUNT}:root")
                ):
                    return True
            elif kind == "Service" and request.is_service and value == request.principal:
                return True
    return False


_NEGATED = {"StringNotEquals", "StringNotLike", "ArnNotEquals", "ArnNotLike"}


def _value_matches(base: str, policy_value: str, request_value: str) -> bool:
    if base in ("StringEquals", "StringNotEquals"):
        return policy_value == request_value
    if base in ("StringLike", "StringNotLike", "ArnLike", "ArnNotLike", "ArnEquals", "ArnNotEquals"):
        return _wildcard(policy_value, request_value)
    if base == "StringEqualsIgnoreCase":
        return policy_value.lower() == request_value.lower()
    if base == "Bool":
        return policy_value.lower() == request_value.lower()
    raise ValueError(f"condition operator {base!r} is not supported by this evaluator")


def _single(base: str, policy_values: list[str], request_value: str) -> bool:
    """One request value against the policy's values: any match, or for a negated operator none."""
    matched = any(_value_matches(base, p, request_value) for p in policy_values)
    return not matched if base in _NEGATED else matched


def _condition_holds(operator: str, key: str, policy_value: Any, keys: Mapping[str, list[str]]) -> bool:
    policy_values = [str(v) for v in _as_list(policy_value)]
    present = keys.get(key.lower())
    set_operator, _, base = operator.rpartition(":")
    if base == "Null":
        if set_operator:
            raise ValueError("Null takes no set operator")
        wants_absent = policy_values[0].lower() == "true"
        return (present is None) == wants_absent
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if set_operator == "ForAllValues":
        return all(_single(base, policy_values, v) for v in present or [])
    if set_operator == "ForAnyValue":
        return any(_single(base, policy_values, v) for v in present or [])
    if set_operator:
        raise ValueError(f"unknown set operator {set_operator!r}")
    if present is None:
        return if_exists or base in _NEGATED
    if len(present) != 1:
        raise ValueError(f"{key} is multivalued: a policy must use ForAllValues/ForAnyValue with it")
    return _single(base, policy_values, present[0])


def _statement_applies(statement: Mapping[str, Any], request: Request, *, resource_policy: bool) -> bool:
    if "Action" in statement and not _matches_any(statement["Action"], request.action, ignore_case=True):
        return False
    if "NotAction" in statement and _matches_any(statement["NotAction"], request.action, ignore_case=True):
        return False
    if "Resource" in statement and not _matches_any(statement["Resource"], request.resource):
        return False
    if "NotResource" in statement and _matches_any(statement["NotResource"], request.resource):
        return False
    if resource_policy:
        if "Principal" in statement and not _principal_matches(statement["Principal"], request):
            return False
        if "NotPrincipal" in statement and _principal_matches(statement["NotPrincipal"], request):
            return False
        if "Principal" not in statement and "NotPrincipal" not in statement:
            raise ValueError(f"resource policy statement without a principal: {statement}")
    keys = request.keys()
    for operator, pairs in (statement.get("Condition") or {}).items():
        for key, value in pairs.items():
            if not _condition_holds(operator, key, value, keys):
                return False
    return True


def statements_of(document: Any) -> list[Mapping[str, Any]]:
    statements = document.get("Statement", document) if isinstance(document, Mapping) else document
    return [statements] if isinstance(statements, Mapping) else list(statements)


def evaluate(
    request: Request,
    *,
    identity_policies: Iterable[Any] = (),
    resource_policies: Iterable[Any] = (),
) -> str:
    """ALLOW, EXPLICIT_DENY or IMPLICIT_DENY for a same-account request (documents already resolved)."""
    allowed = False
    for documents, resource_policy in ((identity_policies, False), (resource_policies, True)):
        for document in documents:
            for statement in statements_of(document):
                if not _statement_applies(statement, request, resource_policy=resource_policy):
                    continue
                if statement["Effect"] == "Deny":
                    return EXPLICIT_DENY
                allowed = True
    return ALLOW if allowed else IMPLICIT_DENY


class TemplatePolicies:
    """The resolved identity and resource policies of a synthesized template."""

    def __init__(self, template: Mapping[str, Any]) -> None:
        self.resolver = Resolver(template)
        self._resources: Mapping[str, Any] = template.get("Resources", {})

    def of_type(self, resource_type: str) -> dict[str, Any]:
        return {k: v for k, v in self._resources.items() if v.get("Type") == resource_type}

    def role_arn(self, logical: str) -> str:
        return self.resolver.arn(logical)

    def identity_policies(self, role_logical: str) -> list[Any]:
        """Inline and customer-managed policies of a role in the template."""
        role = self._resources[role_logical]
        documents = [p["PolicyDocument"] for p in role.get("Properties", {}).get("Policies", [])]
        for policy_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for policy in self.of_type(policy_type).values():
                if {"Ref": role_logical} in policy["Properties"].get("Roles", []):
                    documents.append(policy["Properties"]["PolicyDocument"])
        return [self.resolver.resolve(document) for document in documents]

    def trust_policy(self, role_logical: str) -> Any:
        return self.resolver.resolve(self._resources[role_logical]["Properties"]["AssumeRolePolicyDocument"])

    def bus_policies(self, bus_logical: str) -> list[Any]:
        """Every EventBusPolicy statement on the bus, and the bus's own Policy property if set."""
        documents: list[Any] = []
        bus = self._resources[bus_logical]
        if "Policy" in bus.get("Properties", {}):
            documents.append(bus["Properties"]["Policy"])
        for policy in self.of_type("AWS::Events::EventBusPolicy").values():
            properties = policy["Properties"]
            if properties.get("EventBusName") == {"Ref": bus_logical}:
                documents.append(properties["Statement"])
        return [self.resolver.resolve(document) for document in documents]
