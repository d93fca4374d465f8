"""The counting function's policy, from its environment (``NODEHEAL_COUNTED_SIGNALS``, D22): what
cdk.json's ``policy.countedSignals`` says, checked as the deployment checks it."""

from __future__ import annotations

import json

import pytest

from nodeheal.actions import Action
from nodeheal.config import PolicySettings
from nodeheal.counted_signals import DEFINITIONS, CountedRule
from nodeheal.errors import ConfigurationError
from nodeheal.runtime import COUNTED_SIGNALS_VARIABLE, LambdaEnvironment, counting_policy
from nodeheal.settings_reader import SettingsReader


def environment(value: str | None) -> LambdaEnvironment:
    variables = {"AWS_REGION": "us-west-2"}
    if value is not None:
        variables[COUNTED_SIGNALS_VARIABLE] = value
    return LambdaEnvironment.from_environ(variables)


def test_without_the_variable_every_signal_counts_by_its_default_rule() -> None:
    for value in (None, "", "{}"):
        policy = environment(value).counting_policy
        assert policy.counted_signals == {}
        assert policy.counted_rule("xid-92") == DEFINITIONS["xid-92"].default


def test_the_deployment_s_rules_are_read_back_as_synth_wrote_them() -> None:
    deployed = PolicySettings.read(
        SettingsReader(
            {"countedSignals": {"xid-92": {"count": 4, "windowHours": 12}, "xid-63": {"action": "reboot"}}},
            "policy",
        )
    )
    # What the construct puts in the variable (nodeheal/cdk/constructs/signal_counter.py).
    value = json.dumps(deployed.to_json()["countedSignals"], separators=(",", ":"), sort_keys=True)
    policy = environment(value).counting_policy
    assert policy.counted_signals == deployed.counted_signals
    assert policy.counted_rule("xid-92") == CountedRule(count=4, window_hours=12, action=Action.ALERT)
    assert policy.counted_rule("xid-63").action is Action.REBOOT


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("not json", "NODEHEAL_COUNTED_SIGNALS is not JSON"),
        ("[]", "policy.countedSignals must be an object"),
        ('{"xid-79": {"count": 2}}', "policy.countedSignals.xid-79 names no counted signal"),
        ('{"xid-92": {"count": 0}}', "policy.countedSignals.xid-92.count must be >= 1"),
        ('{"xid-92": {"cuont": 3}}', "cuont"),
    ],
)
def test_a_rule_the_deployment_would_refuse_stops_the_container_with_its_path(value: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match="NODEHEAL_COUNTED_SIGNALS") as refused:
        environment(value)
    assert says in str(refused.value)
    with pytest.raises(ConfigurationError):
        counting_policy(value)
