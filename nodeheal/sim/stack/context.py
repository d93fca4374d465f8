"""The cdk context the simulation synthesizes NodeHeal's stack with: the tests' fast one, the demo's
(cdk.json with its waits divided by the demo's speed, every change reported), and the merge that
layers one context over another."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeheal.deploy_config import FILE_CONTEXT_PATH, NodeHealConfig

CLUSTER = "training-on-eks"

#: Tiny waits so the real definition runs in seconds: moto sleeps for real in Wait states and
#: Retry intervals. The workflow tests and the end-to-end scenarios share it (and so the template).
#: The lock TTL and workflow timeout stay the deployed defaults: the worst case they must cover
#: counts every Lambda attempt at its full timeout, which no speed-up shortens (nodeheal.worst_case).
FAST_CONTEXT: dict[str, Any] = {
    "clusters": [CLUSTER],
    # The tests exercise remediations: chosen here, never inherited from cdk.json (whose shipped
    # mode is dry-run, for a first deployment) or from a default.
    "mode": "full",
    "drain": {"timeoutSeconds": 4, "pollSeconds": 1, "doNotDisruptWaitSeconds": 0, "forceGraceSeconds": 0},
    "reboot": {"pollSeconds": 1, "recoveryTimeoutSeconds": 5},
    "retry": {"intervalSeconds": 1, "maxAttempts": 2, "backoffRate": 1.0},
    "lockWaitPollSeconds": 1,
    "notifications": {"emails": ["oncall@example.com"]},
}


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it: mappings present in both merge key by key, any
    other value of ``override`` replaces ``base``'s. Neither argument is changed (deep copies)."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


#: The waits of cdk.json the demo divides by its speed, each with the least it may become: ASL
#: waits are whole seconds, and the drain and the recovery need a few polls to show their shape.
#: The lock TTL and the workflow timeout keep their values: they must cover Lambda timeouts and
#: retries, which no speed-up shortens (nodeheal.worst_case).
DEMO_SCALED_WAITS: tuple[tuple[str, int], ...] = (
    ("drain.timeoutSeconds", 4),
    ("drain.pollSeconds", 1),
    ("drain.forceGraceSeconds", 0),
    ("drain.doNotDisruptWaitSeconds", 0),
    ("reboot.pollSeconds", 1),
    ("reboot.recoveryTimeoutSeconds", 5),
    ("retry.intervalSeconds", 1),
    # An execution waiting behind another's lock (two detectors reporting one fault) re-reads the
    # node this often.
    ("lockWaitPollSeconds", 1),
)


@dataclass(frozen=True, slots=True)
class Override:
    """A setting the demo runs with that is not what cdk.json says (docs/architecture.md, D14), and why."""

    path: str
    #: What cdk.json says, or the default it leaves in place when it does not set the key.
    configured: Any
    used: Any
    why: str


def demo_context(
    configured: Mapping[str, Any],
    speed: float,
    *,
    scenario: str = "",
    scenario_context: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[Override]]:
    """cdk.json's ``nodeheal`` object as the demo runs it, and every setting it changed.

    The demo remediates whatever mode cdk.json ships (``full``: it exists to show a node healing),
    runs on the simulated cluster, divides cdk.json's waits by ``speed``, and applies what the
    scenario needs. The overrides are computed by comparing the result with what cdk.json means
    (its values, and the defaults for the keys it leaves out), so none goes unreported.
    """
    config = NodeHealConfig.from_cdk_context(configured, FILE_CONTEXT_PATH)
    remediation = config.remediation.to_json()
    remediation.pop("scope")  # spelled out once, under "rule"
    meant = deep_merge({**remediation, "clusters": list(config.clusters)}, configured)
    layers: list[tuple[dict[str, Any], str]] = [
        (
            {"mode": "full"},
            "the demo shows a remediation; a deployment runs the mode cdk.json sets",
        ),
        ({"clusters": [CLUSTER]}, "the simulated cluster"),
    ]
    for path, least in DEMO_SCALED_WAITS:
        seconds = _leaf(meant, path)
        layers.append(
            (_nested(path, max(least, round(seconds / speed))), f"cdk.json's wait / speed {speed:g}")
        )
    if scenario_context:
        layers.append((dict(scenario_context), f"scenario {scenario}"))
    context = deep_merge({}, configured)
    why: dict[str, str] = {}
    for layer, reason in layers:
        context = deep_merge(context, layer)
        why.update(dict.fromkeys(_leaf_paths(layer), reason))
    overrides = [
        Override(path, _leaf(meant, path), _leaf(context, path), why[path])
        for path in why
        if _leaf(context, path) != _leaf(meant, path)
    ]
    return context, overrides


def _nested(path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    return {head: _nested(rest, value) if rest else value}


def _leaf(document: Mapping[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _leaf_paths(document: Mapping[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            paths.extend(_leaf_paths(value, f"{path}."))
        else:
            paths.append(path)
    return paths
