"""The demo runs cdk.json with ``mode: full`` forced and reports every setting it changes (D14)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nodeheal.actions import Mode
from nodeheal.deploy_config import NodeHealConfig
from nodeheal.errors import ConfigurationError
from nodeheal.sim.stack.context import CLUSTER, DEMO_SCALED_WAITS, demo_context

ROOT = Path(__file__).resolve().parents[3]
SHIPPED: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text())["context"]["nodeheal"]


def shipped(**changes: Any) -> dict[str, Any]:
    context = copy.deepcopy(SHIPPED)
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = context
        for parent in parents:
            node = node.setdefault(parent, {})
        node[key] = value
    return context


def leaves(document: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(document, dict) or not document:
        return {prefix: document}
    found: dict[str, Any] = {}
    for key, value in document.items():
        found |= leaves(value, f"{prefix}.{key}" if prefix else key)
    return found


def test_a_dry_run_cdk_json_runs_in_full_and_says_so() -> None:
    configured = shipped(mode="dry-run")
    context, overrides = demo_context(configured, 60.0)
    assert NodeHealConfig.from_cdk_context(context).remediation.mode is Mode.FULL
    mode = next(o for o in overrides if o.path == "mode")
    assert (mode.configured, mode.used) == ("dry-run", "full")
    assert "a deployment runs the mode cdk.json sets" in mode.why


def test_waits_come_from_cdk_json_divided_by_the_speed() -> None:
    configured = shipped(
        drain__timeoutSeconds=600, drain__doNotDisruptWaitSeconds=120, reboot__pollSeconds=45
    )
    context, overrides = demo_context(configured, 60.0)
    by_path = {o.path: o for o in overrides}
    assert (by_path["drain.timeoutSeconds"].configured, by_path["drain.timeoutSeconds"].used) == (600, 10)
    assert by_path["drain.doNotDisruptWaitSeconds"].used == 2
    # 45 / 60 rounds to 1, the least a poll may be.
    assert (by_path["reboot.pollSeconds"].configured, by_path["reboot.pollSeconds"].used) == (45, 1)
    assert context["drain"]["timeoutSeconds"] == 10
    # What the demo does not need to change stays cdk.json's: budgets, policy, lock TTL.
    assert context["budgets"] == configured["budgets"]
    assert context["lockTtlSeconds"] == configured["lockTtlSeconds"]


def test_every_changed_setting_is_reported_and_nothing_else() -> None:
    configured = shipped(clusters=["prod-a", "prod-b"], stackName="GpuHeal")
    context, overrides = demo_context(
        configured, 30.0, scenario="storm", scenario_context={"budgets": {"maxPerHour": 2}}
    )
    before, after = leaves(configured), leaves(context)
    changed = {path for path in after if before.get(path) != after[path]}
    assert {o.path for o in overrides} == changed
    clusters = next(o for o in overrides if o.path == "clusters")
    assert (clusters.configured, clusters.used) == (["prod-a", "prod-b"], [CLUSTER])
    assert next(o for o in overrides if o.path == "budgets.maxPerHour").why == "scenario storm"
    assert context["stackName"] == "GpuHeal"


def test_a_key_cdk_json_leaves_out_is_compared_with_its_default() -> None:
    configured = shipped()
    del configured["drain"]["timeoutSeconds"]
    _, overrides = demo_context(configured, 60.0)
    timeout = next(o for o in overrides if o.path == "drain.timeoutSeconds")
    assert (timeout.configured, timeout.used) == (900, 15)


def test_at_real_speed_only_the_mode_changes() -> None:
    _, overrides = demo_context(shipped(mode="cordon-only"), 1.0)
    assert [(o.path, o.configured, o.used) for o in overrides] == [("mode", "cordon-only", "full")]
    assert {path for path, _ in DEMO_SCALED_WAITS} <= set(leaves(SHIPPED))


def test_an_invalid_cdk_json_is_refused_with_its_key_path() -> None:
    with pytest.raises(ConfigurationError, match=r"context\.nodeheal\.drain\.timeoutSecs"):
        demo_context(shipped(drain__timeoutSecs=5), 60.0)


def test_the_wait_behind_another_executions_lock_is_scaled_too() -> None:
    # Two detectors report one fault: one execution waits behind the other's lock and re-reads the
    # node every lockWaitPollSeconds; at cdk.json's 30 s the demo would sit idle for half a minute.
    context, overrides = demo_context(shipped(lockWaitPollSeconds=30), 60.0)
    poll = next(o for o in overrides if o.path == "lockWaitPollSeconds")
    assert (poll.configured, poll.used) == (30, 1)
    assert context["lockWaitPollSeconds"] == 1
