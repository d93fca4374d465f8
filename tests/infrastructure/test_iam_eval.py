"""The policy evaluator the bus-identity matrix relies on, checked on hand-written policies."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infrastructure.iam_eval import (
    ALLOW,
    EXPLICIT_DENY,
    IMPLICIT_DENY,
    Request,
    Resolver,
    evaluate,
)

ROLE = "arn:aws:iam::123456789012:role/exporter-a"
OTHER_ROLE = "arn:aws:iam::123456789012:role/someone"
BUS = "arn:aws:events:us-west-2:123456789012:event-bus/nodeheal"


def put(principal: str = ROLE, sources: list[str] | str = "acme.a", resource: str = BUS) -> Request:
    return Request(principal, "events:PutEvents", resource, {"events:source": sources})


def allow(**extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": "events:PutEvents", "Resource": BUS, **extra}


def test_allow_is_needed_and_explicit_deny_wins() -> None:
    assert evaluate(put()) == IMPLICIT_DENY
    assert evaluate(put(), identity_policies=[{"Statement": [allow()]}]) == ALLOW
    deny = {"Effect": "Deny", "Principal": "*", "Action": "events:*", "Resource": "*"}
    assert evaluate(put(), identity_policies=[{"Statement": [allow()]}], resource_policies=[deny]) == (
        EXPLICIT_DENY
    )


def test_action_and_resource_wildcards() -> None:
    star = {
        "Statement": {
            "Effect": "Allow",
            "Action": "Events:Put*",
            "Resource": "arn:aws:events:*:*:event-bus/node?eal",
        }
    }
    assert evaluate(put(), identity_policies=[star]) == ALLOW
    assert evaluate(put(resource=BUS + "-2"), identity_policies=[star]) == IMPLICIT_DENY
    get = Request(ROLE, "events:DescribeEventBus", BUS)
    assert evaluate(get, identity_policies=[star]) == IMPLICIT_DENY


def test_not_action_and_not_principal() -> None:
    everything_but_put = {"Effect": "Allow", "NotAction": "events:PutEvents", "Resource": "*"}
    assert evaluate(put(), identity_policies=[everything_but_put]) == IMPLICIT_DENY
    assert evaluate(Request(ROLE, "events:ListRules", BUS), identity_policies=[everything_but_put]) == ALLOW
    deny_all_but_role = {"Effect": "Deny", "NotPrincipal": {"AWS": ROLE}, "Action": "*", "Resource": "*"}
    assert evaluate(put(OTHER_ROLE), resource_policies=[deny_all_but_role]) == EXPLICIT_DENY
    assert evaluate(put(ROLE), resource_policies=[deny_all_but_role]) == IMPLICIT_DENY


def test_resource_policy_principals() -> None:
    by_role = allow(Principal={"AWS": ROLE})
    assert evaluate(put(ROLE), resource_policies=[by_role]) == ALLOW
    assert evaluate(put(OTHER_ROLE), resource_policies=[by_role]) == IMPLICIT_DENY
    by_account = allow(Principal={"AWS": "arn:aws:iam::123456789012:root"})
    assert evaluate(put(OTHER_ROLE), resource_policies=[by_account]) == ALLOW
    by_service = allow(Principal={"Service": "events.amazonaws.com"})
    assert evaluate(put("events.amazonaws.com"), resource_policies=[by_service]) == ALLOW
    assert evaluate(put(ROLE), resource_policies=[by_service]) == IMPLICIT_DENY


def test_string_and_null_conditions_on_a_multivalued_key() -> None:
    own = allow(
        Condition={
            "ForAllValues:StringEquals": {"events:source": ["acme.a", "acme"]},
            "Null": {"events:source": "false"},
        }
    )
    assert evaluate(put(sources=["acme.a"]), identity_policies=[[own]]) == ALLOW
    assert evaluate(put(sources=["acme.a", "acme"]), identity_policies=[[own]]) == ALLOW
    assert evaluate(put(sources=["acme.a", "acme.b"]), identity_policies=[[own]]) == IMPLICIT_DENY
    # ForAllValues alone is true for an empty set: the Null check is what refuses it.
    assert evaluate(Request(ROLE, "events:PutEvents", BUS), identity_policies=[[own]]) == IMPLICIT_DENY
    other = {
        "Effect": "Deny",
        "Principal": {"AWS": ROLE},
        "Action": "events:PutEvents",
        "Resource": BUS,
        "Condition": {"ForAnyValue:StringNotEquals": {"events:source": ["acme.a", "acme"]}},
    }
    assert evaluate(put(sources=["acme.a", "acme.b"]), resource_policies=[other]) == EXPLICIT_DENY
    assert evaluate(put(sources=["acme.a"]), resource_policies=[other]) == IMPLICIT_DENY


def test_like_arn_and_bool_conditions_and_if_exists() -> None:
    deny_others = {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "events:PutEvents",
        "Resource": BUS,
        "Condition": {
            "ArnNotLike": {"aws:PrincipalArn": ["arn:aws:iam::123456789012:role/exporter-*"]},
            "BoolIfExists": {"aws:PrincipalIsAWSService": "false"},
        },
    }
    assert evaluate(put(ROLE), resource_policies=[deny_others]) == IMPLICIT_DENY
    assert evaluate(put(OTHER_ROLE), resource_policies=[deny_others]) == EXPLICIT_DENY
    # A service has no principal ARN (a negated operator on a missing key is true) but is an AWS
    # service, so the Bool keeps it out of the Deny.
    assert evaluate(put("events.amazonaws.com"), resource_policies=[deny_others]) == IMPLICIT_DENY
    like = allow(Condition={"StringLike": {"events:detail-type": "Node *"}})
    request = Request(ROLE, "events:PutEvents", BUS, {"events:detail-type": "Node Condition Changed"})
    assert evaluate(request, identity_policies=[[like]]) == ALLOW
    assert evaluate(put(), identity_policies=[[like]]) == IMPLICIT_DENY  # the key is absent
    not_equals = allow(Condition={"StringNotEquals": {"events:detail-type": "Exporter Heartbeat"}})
    assert evaluate(request, identity_policies=[[not_equals]]) == ALLOW


def test_unknown_operators_and_single_valued_misuse_fail_loudly() -> None:
    numeric = allow(Condition={"NumericLessThan": {"aws:MultiFactorAuthAge": "300"}})
    with pytest.raises(ValueError, match="not supported"):
        evaluate(
            Request(ROLE, "events:PutEvents", BUS, {"aws:MultiFactorAuthAge": "5"}),
            identity_policies=[[numeric]],
        )
    single = allow(Condition={"StringEquals": {"events:source": "acme.a"}})
    with pytest.raises(ValueError, match="multivalued"):
        evaluate(put(sources=["acme.a", "acme.b"]), identity_policies=[[single]])


def test_resolver_turns_intrinsics_into_stable_arns() -> None:
    template = {
        "Resources": {
            "Bus": {"Type": "AWS::Events::EventBus", "Properties": {"Name": "nodeheal"}},
            "RoleA": {"Type": "AWS::IAM::Role", "Properties": {}},
        }
    }
    resolver = Resolver(template)
    assert resolver.resolve({"Fn::GetAtt": ["Bus", "Arn"]}) == BUS
    assert resolver.resolve({"Ref": "Bus"}) == "nodeheal"
    assert resolver.resolve({"Fn::GetAtt": ["RoleA", "Arn"]}) == "arn:aws:iam::123456789012:role/RoleA"
    joined = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":events:", {"Ref": "AWS::Region"}]]}
    assert resolver.resolve(joined) == "arn:aws:events:us-west-2"
    sub = {
        "Fn::Sub": ["arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${Name}-${RoleA.Arn}", {"Name": "x"}]
    }
    assert resolver.resolve(sub) == "arn:aws:iam::123456789012:role/x-arn:aws:iam::123456789012:role/RoleA"
    assert resolver.resolve({"Fn::Select": [1, {"Fn::Split": ["/", "a/b/c"]}]}) == "b"
