"""NodeHealConfig.from_cdk_context: defaults, cdk.json, and every way a deploy config is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nodeheal.actions import Mode
from nodeheal.config import RemediationSettings
from nodeheal.deploy_config import DEFAULT_RULE_CONDITIONS, LambdaNetwork, NodeHealConfig, RuleCondition
from nodeheal.errors import ConfigurationError

CDK_JSON = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())
MINIMAL: dict[str, Any] = {"clusters": ["training-on-eks"]}


def parse(**overrides: Any) -> NodeHealConfig:
    return NodeHealConfig.from_cdk_context({**MINIMAL, **overrides})


def refused(match: str, **overrides: Any) -> None:
    with pytest.raises(ConfigurationError, match=match):
        parse(**overrides)


def test_defaults() -> None:
    config = parse()
    assert config.stack_name == "NodeHeal"
    assert config.clusters == ("training-on-eks",)
    assert config.event_bus_name == "nodeheal"
    assert config.event_source == "nodeheal.exporter"
    assert config.archive_retention_days == 14
    assert config.rule.conditions == tuple(RuleCondition(t, s) for t, s in DEFAULT_RULE_CONDITIONS)
    assert dict(config.rule.node_labels) == {}
    assert config.stale_event_seconds == 900
    assert config.remediation == RemediationSettings()
    # Without the key, NodeHeal decides and records and changes nothing: full is only asked for.
    assert config.remediation.mode is Mode.DRY_RUN
    assert config.notification_emails == ()
    assert config.lambda_network is None
    assert config.workflow_timeout_minutes == 1320
    assert config.kubernetes_group_prefix == "nodeheal"
    assert config.kubernetes_groups("drain") == ["nodeheal-drain"]
    assert config.kubernetes_groups("terminate") == ["nodeheal-terminate"]
    assert config.log_retention_days == 30


def test_cdk_json_spells_out_the_defaults() -> None:
    context = CDK_JSON["context"]["nodeheal"]
    # A first deployment decides and records, and changes nothing: the default, spelled out.
    assert context["mode"] == "dry-run"
    shipped = NodeHealConfig.from_cdk_context(context)
    assert shipped.remediation.mode is Mode.DRY_RUN
    assert shipped == parse()
    # Every remediation key is written out, so users see what they can tune; a new setting must
    # be added to cdk.json with its default.
    remediation_keys = RemediationSettings().to_json()
    # The workflow's scope is the rule: cdk.json spells it out once, under "rule".
    assert context["rule"] == remediation_keys.pop("scope")
    assert {key: context[key] for key in remediation_keys} == remediation_keys


def test_full_config() -> None:
    config = parse(
        stackName="NodeHealStaging",
        clusters=["a", "b-2"],
        eventBus={"name": "gpu-health", "source": "acme.gpu", "archiveRetentionDays": 0},
        rule={
            "conditions": [{"type": "GPUProblem", "statuses": ["True"]}],
            "nodeLabels": {"karpenter.sh/nodepool": ["gpu"]},
        },
        ingest={"staleEventSeconds": 60},
        mode="dry-run",
        notifications={"emails": ["sre@example.com"]},
        lambdaNetwork={
            "vpcId": "vpc-1",
            "availabilityZones": ["us-west-2a"],
            "subnetIds": ["subnet-1"],
            "securityGroupIds": ["sg-1"],
        },
        workflow={"timeoutMinutes": 1440},
        kubernetesGroupPrefix="gpu-remediators",
        logRetentionDays=90,
    )
    assert config.clusters == ("a", "b-2")
    assert config.rule.node_labels == {"karpenter.sh/nodepool": ("gpu",)}
    # Defect 9: the same rule object is the scope every execution's admit re-checks live.
    assert config.remediation.scope is config.rule
    assert config.remediation.to_json()["scope"]["nodeLabels"] == {"karpenter.sh/nodepool": ["gpu"]}
    assert config.remediation.mode is Mode.DRY_RUN
    assert config.lambda_network == LambdaNetwork("vpc-1", ("us-west-2a",), ("subnet-1",), ("sg-1",))
    assert config.notification_emails == ("sre@example.com",)
    assert config.kubernetes_groups("cordon") == ["gpu-remediators-cordon"]


def test_missing_context_object() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("cdk.json has no 'nodeheal' context object")):
        NodeHealConfig.from_cdk_context(None)


def test_context_must_be_an_object() -> None:
    with pytest.raises(ConfigurationError, match="nodeheal must be an object"):
        NodeHealConfig.from_cdk_context(["training-on-eks"])


def test_missing_clusters() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("nodeheal.clusters is required")):
        NodeHealConfig.from_cdk_context({})


@pytest.mark.parametrize(
    ("clusters", "match"),
    [
        ([], "nodeheal.clusters must list at least one value"),
        ("training-on-eks", "nodeheal.clusters must be a list of non-empty strings"),
        (["-leading-dash"], "invalid EKS cluster name '-leading-dash'"),
        (["has space"], "invalid EKS cluster name 'has space'"),
        (["x" * 101], "invalid EKS cluster name"),
        (["a", "a"], "lists a cluster twice"),
    ],
)
def test_bad_clusters(clusters: Any, match: str) -> None:
    refused(match, clusters=clusters)


@pytest.mark.parametrize(
    ("key", "value", "suggestion"),
    [
        ("cluster", ["x"], "clusters"),
        ("notification", {}, "notifications"),
        ("logRetentionDay", 7, "logRetentionDays"),
    ],
)
def test_typo_at_the_top_level_suggests_the_key(key: str, value: Any, suggestion: str) -> None:
    context = {**MINIMAL, key: value}
    with pytest.raises(ConfigurationError, match=rf"nodeheal\.{key} \(did you mean '{suggestion}'\?\)"):
        NodeHealConfig.from_cdk_context(context)


def test_typo_in_a_nested_object_suggests_the_key() -> None:
    refused(r"nodeheal\.budgets\.maxInflight \(did you mean 'maxInFlight'\?\)", budgets={"maxInflight": 3})
    refused(r"nodeheal\.eventBus\.archiveRetention \(did you mean", eventBus={"archiveRetention": 3})


def test_bad_mode() -> None:
    refused("nodeheal.mode must be one of dry-run, cordon-only, full; got 'yolo'", mode="yolo")


@pytest.mark.parametrize("email", ["not-an-address", "a@b", "two@@example.com", "sp ace@example.com"])
def test_bad_email(email: str) -> None:
    refused(
        f"nodeheal.notifications.emails has an invalid address '{email}'", notifications={"emails": [email]}
    )


def test_lock_ttl_must_cover_the_worst_case_not_just_drain_and_recovery() -> None:
    # drain + recovery (1800 s) was the old floor; the worst case with retries is 29127 s (+ 2913).
    refused(r"nodeheal\.lockTtlSeconds \(1800\) must be at least 33468", lockTtlSeconds=1800)


def test_workflow_timeout_must_exceed_the_worst_case() -> None:
    refused(
        r"nodeheal\.workflow\.timeoutMinutes \(180\) must be at least 1242", workflow={"timeoutMinutes": 180}
    )


def test_workflow_timeout_follows_longer_drains() -> None:
    # drain 3600 s adds 2700 s to the hold (33125 s): the lock TTL needs 33125 + 3313, and the run
    # 3078 + (36438 + 30) + 33125 = 72671 s + 7268 s of margin = 1333 minutes.
    refused(r"lockTtlSeconds \(34200\) must be at least 36438", drain={"timeoutSeconds": 3600})
    longer = {"drain": {"timeoutSeconds": 3600}, "lockTtlSeconds": 36_438}
    refused(r"timeoutMinutes \(1332\) must be at least 1333", workflow={"timeoutMinutes": 1332}, **longer)
    assert parse(workflow={"timeoutMinutes": 1333}, **longer).workflow_timeout_minutes == 1333


@pytest.mark.parametrize(
    ("event_bus", "match"),
    [
        ({"name": "default"}, "must be a custom bus name"),
        ({"name": "bad name"}, "must be a custom bus name"),
        ({"source": "aws.ec2"}, "must not start with 'aws.'"),
        ({"archiveRetentionDays": -1}, "archiveRetentionDays must be >= 0"),
    ],
)
def test_bad_event_bus(event_bus: dict[str, Any], match: str) -> None:
    refused(match, eventBus=event_bus)


def test_bad_rule() -> None:
    refused("must list at least one condition", rule={"conditions": []})
    refused(r"statuses has \['Maybe'\]", rule={"conditions": [{"type": "GPUProblem", "statuses": ["Maybe"]}]})
    refused(
        "nodeLabels.karpenter.sh/nodepool must list at least one value",
        rule={"nodeLabels": {"karpenter.sh/nodepool": []}},
    )


def test_stale_event_bound() -> None:
    refused("staleEventSeconds must be >= 30", ingest={"staleEventSeconds": 5})


def test_incomplete_lambda_network() -> None:
    refused(
        "nodeheal.lambdaNetwork.subnetIds is required",
        lambdaNetwork={"vpcId": "vpc-1", "availabilityZones": ["a"]},
    )


def test_kubernetes_group_prefix_must_name_groups_and_cluster_roles() -> None:
    refused("kubernetesGroupPrefix must be 1-40 lowercase letters", kubernetesGroupPrefix="system:masters")
    refused("kubernetesGroupPrefix must be 1-40 lowercase letters", kubernetesGroupPrefix="NodeHeal")


def test_defect_10_the_single_kubernetes_group_setting_is_refused_with_directions() -> None:
    refused(
        "kubernetesGroup was replaced by nodeheal.kubernetesGroupPrefix",
        kubernetesGroup="nodeheal-remediator",
    )


def test_defect_10_node_delete_group_only_with_delete_node_after_terminate() -> None:
    config = parse(kubernetesGroupPrefix="acme", deleteNodeAfterTerminate=True)
    assert config.kubernetes_groups("terminate") == ["acme-terminate", "acme-terminate-delete-nodes"]
    assert config.kubernetes_groups("reboot") == ["acme-reboot"]


def test_nodeclaim_group_only_with_replace_method_delete_nodeclaim() -> None:
    assert parse(kubernetesGroupPrefix="acme").kubernetes_groups("terminate") == ["acme-terminate"]
    config = parse(kubernetesGroupPrefix="acme", replace={"method": "delete-nodeclaim"})
    assert config.kubernetes_groups("terminate") == ["acme-terminate", "acme-terminate-nodeclaims"]
    assert config.kubernetes_groups("reboot") == ["acme-reboot"]


def test_delete_nodeclaim_refuses_deleting_the_node_itself() -> None:
    refused(
        "Karpenter's termination removes the Node itself",
        replace={"method": "delete-nodeclaim"},
        deleteNodeAfterTerminate=True,
    )
    refused("replace.method must be one of", replace={"method": "terminate"})


def test_replace_capacity_settings_are_read_and_round_trip() -> None:
    replace = {"minBlockRemainingMinutes": 90, "launchMinutes": 15, "scarcePools": ["p5-train", "gb200"]}
    settings = parse(replace=replace).remediation
    assert (
        settings.replace.min_block_remaining_minutes,
        settings.replace.launch_minutes,
        settings.replace.scarce_pools,
    ) == (90, 15, ("p5-train", "gb200"))
    assert settings.replace.to_json() == {"method": "ec2-terminate", **replace}
    # The settings travel in every execution's input: what to_json writes, from_json reads back.
    assert RemediationSettings.from_json(settings.to_json()) == settings
    assert settings.replace.is_scarce("gb200") and not settings.replace.is_scarce("gpu")
    assert not settings.replace.is_scarce(None) and not settings.replace.is_scarce("")


def test_replace_capacity_settings_refuse_bad_values_with_their_path() -> None:
    refused(
        r"replace.minBlockRemainingMinutes must be >= 0, got -5", replace={"minBlockRemainingMinutes": -5}
    )
    refused(r"replace.launchMinutes must be >= 0, got -1", replace={"launchMinutes": -1})
    refused(r"replace.launchMinutes must be an integer, got '20m'", replace={"launchMinutes": "20m"})
    refused(
        r"replace.minBlockRemainingMinutes must be <= 10080", replace={"minBlockRemainingMinutes": 10_081}
    )
    refused(r"replace.scarcePools must be a list of non-empty strings", replace={"scarcePools": "p5-train"})
    refused(r"replace.scarcePools must be a list of non-empty strings", replace={"scarcePools": [""]})
    refused(r"did you mean 'scarcePools'", replace={"scarcePool": ["p5-train"]})


def test_bad_log_retention() -> None:
    refused("logRetentionDays must be >= 1", logRetentionDays=0)


def test_immediate_forced_drain_is_refused_unless_declared() -> None:
    # A drain timeout of 0 with "force" deletes every pod the first round leaves, past its PDB.
    refused(
        r'nodeheal\.drain\.timeoutSeconds is 0 with nodeheal\.drain\.onTimeout "force".*'
        r"set nodeheal\.drain\.allowImmediateForce to true if that is meant",
        drain={"timeoutSeconds": 0, "doNotDisruptWaitSeconds": 0},
    )
    declared = parse(drain={"timeoutSeconds": 0, "doNotDisruptWaitSeconds": 0, "allowImmediateForce": True})
    assert declared.remediation.drain.allow_immediate_force is True
    # Neither a zero timeout that aborts nor a forced drain with time to evict needs the flag.
    aborting = parse(drain={"timeoutSeconds": 0, "doNotDisruptWaitSeconds": 0, "onTimeout": "abort"})
    assert aborting.remediation.drain.timeout_seconds == 0
    assert parse(drain={"timeoutSeconds": 60, "doNotDisruptWaitSeconds": 0}).remediation.drain.on_timeout == (
        "force"
    )
    # The flag travels with each execution's settings and is read back from them.
    settings = declared.remediation.to_json()
    assert settings["drain"]["allowImmediateForce"] is True
    assert RemediationSettings.from_json(settings).drain.allow_immediate_force is True
