"""Shared builders for the exporter tests: Nodes from the simulator's builder, condition edits."""

from __future__ import annotations

import copy
import json
from typing import Any

from nodeheal.sim.apiserver.objects import make_node

JSON = dict[str, Any]


def node(name: str, *, instance: str = "i-0abc1234567890def", **kwargs: Any) -> JSON:
    return make_node(name, instance_id=instance, **kwargs)


def with_condition(obj: JSON, ctype: str, status: str, reason: str, message: str = "", rv: str = "") -> JSON:
    """A copy of ``obj`` with one condition set (added if missing) and optionally a new resourceVersion."""
    updated = copy.deepcopy(obj)
    conditions = updated["status"]["conditions"]
    for condition in conditions:
        if condition["type"] == ctype:
            if (condition["status"], condition.get("reason")) != (status, reason):
                condition["lastTransitionTime"] = "2026-11-21T10:00:00Z"
            condition.update({"status": status, "reason": reason, "message": message or condition["message"]})
            break
    else:
        conditions.append(
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": "2026-11-21T10:00:00Z",
                "lastTransitionTime": "2026-11-21T10:00:00Z",
            }
        )
    if rv:
        updated["metadata"]["resourceVersion"] = rv
    return updated


def heartbeat(obj: JSON, stamp: str = "2026-11-21T10:05:00Z") -> JSON:
    updated = copy.deepcopy(obj)
    for condition in updated["status"]["conditions"]:
        condition["lastHeartbeatTime"] = stamp
    return updated


def summary(detail: str | JSON) -> tuple[Any, ...]:
    """(node, type, status, reason, previous status or None, resync) of an event detail."""
    body = json.loads(detail) if isinstance(detail, str) else detail
    previous = body["previous"]
    return (
        body["node"]["name"],
        body["condition"]["type"],
        body["condition"]["status"],
        body["condition"]["reason"],
        None if previous is None else previous["status"],
        body["resync"],
    )
