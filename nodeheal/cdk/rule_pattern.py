"""The EventBridge pattern that decides which condition transitions start a remediation.

A pure function of the config so tests compare the synthesized rule with it, and so the contract
it encodes (contract 1.1 field names, see ``nodeheal.events``) is visible in one place.

Sources (D9): each cluster's exporter sends ``<prefix>.<cluster>``, matched by the prefix
``<prefix>.``; until 0.2.0 removes it, the bare ``<prefix>`` too, which exporters not yet upgraded to
contract 1.1 send, so their events are not lost while the fleet upgrades (stack first, then
exporters). Which source may speak for which cluster is IAM's and ingest's business, not the rule's.
"""

from __future__ import annotations

from typing import Any

from nodeheal.deploy_config import NodeHealConfig
from nodeheal.events import (
    DETAIL_TYPE_CONDITION_CHANGED,
    DETAIL_TYPE_EXPORTER_HEARTBEAT,
    DETAIL_TYPE_NODE_EVENT,
)

#: The only Node Events that can carry a counted signal (docs/architecture.md, D22).
COUNTED_EVENT_TYPE = "Warning"


def exporter_sources(config: NodeHealConfig) -> list[Any]:
    """The rule's ``source`` filter: every cluster exporter's own source, and the legacy one."""
    return [{"prefix": f"{config.event_source}."}, config.event_source]


def build_event_pattern(config: NodeHealConfig) -> dict[str, Any]:
    """``{"source", "detail-type", "detail"}`` for the ingest rule.

    Conditions that accept the same statuses share one ``$or`` branch (types are OR-ed inside an
    array), which keeps the pattern well under EventBridge's combination limits for any config.
    """
    by_statuses: dict[tuple[str, ...], list[str]] = {}
    for condition in config.rule.conditions:
        types = by_statuses.setdefault(tuple(sorted(set(condition.statuses))), [])
        if condition.type not in types:
            types.append(condition.type)
    branches = [
        {"condition": {"type": types, "status": list(statuses)}} for statuses, types in by_statuses.items()
    ]
    detail: dict[str, Any] = {"cluster": list(config.clusters)}
    # "$or" needs two or more branches; a single branch is the plain field match.
    if len(branches) == 1:
        detail.update(branches[0])
    else:
        detail["$or"] = branches
    if config.rule.node_labels:
        detail["node"] = {"labels": {key: list(values) for key, values in config.rule.node_labels.items()}}
    return {
        "source": exporter_sources(config),
        "detail-type": [DETAIL_TYPE_CONDITION_CHANGED],
        "detail": detail,
    }


def build_heartbeat_pattern(config: NodeHealConfig) -> dict[str, Any]:
    """The exporters' heartbeats of the configured clusters (counted by ingest, alarmed when missing)."""
    return {
        "source": exporter_sources(config),
        "detail-type": [DETAIL_TYPE_EXPORTER_HEARTBEAT],
        "detail": {"cluster": list(config.clusters)},
    }


def build_node_event_pattern(config: NodeHealConfig) -> dict[str, Any]:
    """The counting function's rule: the Warning Node Events of the configured clusters.

    Only the per-cluster sources (the prefix ``<prefix>.``): Node Events are contract 1.1, which
    no exporter sends under the legacy bare source, and the counting function would drop such an
    event as forged. Normal Events never reach it: they count for no signal."""
    return {
        "source": [{"prefix": f"{config.event_source}."}],
        "detail-type": [DETAIL_TYPE_NODE_EVENT],
        "detail": {"cluster": list(config.clusters), "event": {"type": [COUNTED_EVENT_TYPE]}},
    }
