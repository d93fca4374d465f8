"""The execution state as the Lambda tasks see it.

Every task receives the whole Step Functions state: the original event, the settings injected by
``Load settings``, the execution's name, and the results of earlier steps under their own keys
(``admission``, ``cordon``, ``drain``, ``instance``, ``recovery``, ``uncordon``, ``failure``).
This module is the one place that knows those keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeheal.config import RemediationSettings
from nodeheal.errors import InvalidEventError
from nodeheal.events import NodeConditionEvent
from nodeheal.timestamps import parse_timestamp
from nodeheal.workflow.records import identity_key


@dataclass(frozen=True, slots=True)
class ExecutionInfo:
    name: str
    arn: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class AdmittedNode:
    """The node as admit saw it live; later steps verify they still act on this very object."""

    name: str
    uid: str
    instance_id: str
    provider_id: str
    pool: str
    instance_type: str
    boot_id: str
    #: NodeHeal's taint was on the node when it was admitted (another execution had cordoned it,
    #: or left it cordoned). Gone by this execution's cordon, a person took the node back (I16).
    had_nodeheal_taint: bool = False

    @property
    def subject(self) -> str:
        """The identity locks and history follow (docs/architecture.md, D1): the instance, never the name."""
        return identity_key(self.instance_id, self.uid, self.name)

    def to_json(self) -> dict[str, str | bool]:
        return {
            "name": self.name,
            "uid": self.uid,
            "instanceId": self.instance_id,
            "providerId": self.provider_id,
            "pool": self.pool,
            "instanceType": self.instance_type,
            "bootId": self.boot_id,
            "hadNodeHealTaint": self.had_nodeheal_taint,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> AdmittedNode:
        return cls(
            name=str(raw.get("name", "")),
            uid=str(raw.get("uid", "")),
            instance_id=str(raw.get("instanceId", "")),
            provider_id=str(raw.get("providerId", "")),
            pool=str(raw.get("pool", "")),
            instance_type=str(raw.get("instanceType", "")),
            boot_id=str(raw.get("bootId", "")),
            had_nodeheal_taint=raw.get("hadNodeHealTaint") is True,
        )


@dataclass(frozen=True, slots=True)
class WorkflowState:
    event: NodeConditionEvent
    event_id: str
    received_at: datetime | None
    settings: RemediationSettings
    execution: ExecutionInfo
    raw: Mapping[str, Any]

    @property
    def cluster(self) -> str:
        return self.event.cluster

    @property
    def node_name(self) -> str:
        return self.event.node.name

    @property
    def condition_type(self) -> str:
        """The condition this execution remediates: the event's, or the one admit took over from
        a holder this execution pushed aside when its own fault was gone (D2)."""
        admission = self.step("admission")
        condition = admission.get("condition") if admission else None
        if isinstance(condition, Mapping) and isinstance(condition.get("type"), str) and condition["type"]:
            return str(condition["type"])
        return self.event.condition.type

    @property
    def subject(self) -> str:
        """The lock and history key of this execution's node: the admitted instance, or before
        admission the instance the event named."""
        admitted = self.admitted_node
        if admitted is not None:
            return admitted.subject
        node = self.event.node
        return identity_key(node.instance_id or "", node.uid, node.name)

    def step(self, key: str) -> Mapping[str, Any] | None:
        """The result an earlier step wrote under ``key``, if it ran."""
        value = self.raw.get(key)
        return value if isinstance(value, Mapping) else None

    @property
    def admitted_node(self) -> AdmittedNode | None:
        admission = self.step("admission")
        node = admission.get("node") if admission else None
        return AdmittedNode.from_json(node) if isinstance(node, Mapping) else None

    @classmethod
    def parse(cls, payload: Any) -> WorkflowState:
        if not isinstance(payload, Mapping):
            raise InvalidEventError(f"workflow state must be an object, got {type(payload).__name__}")
        execution_raw = payload.get("execution")
        if not isinstance(execution_raw, Mapping):
            raise InvalidEventError("workflow state has no execution object (Load settings did not run?)")
        received_raw = payload.get("receivedAt")
        return cls(
            event=NodeConditionEvent.from_detail(payload.get("event")),
            event_id=str(payload.get("eventId", "")),
            received_at=parse_timestamp(received_raw, "receivedAt") if received_raw else None,
            # Checked against the timing rules when deployed; a run started by an earlier
            # deployment must still finish (and release its lock) under newer rules.
            settings=_settings_of(payload.get("settings")),
            execution=ExecutionInfo(
                name=str(execution_raw.get("name", "")),
                arn=str(execution_raw.get("id", "")),
                started_at=parse_timestamp(execution_raw.get("startedAt"), "execution.startedAt"),
            ),
            raw=payload,
        )


#: Settings already read, by their JSON text: every step of every execution carries the deployed
#: settings, and reading them is most of what parsing the state costs (a warm Lambda, the
#: simulation). RemediationSettings is frozen; a few entries cover a deployment and its last one.
_READ_SETTINGS: dict[str, RemediationSettings] = {}
_READ_SETTINGS_KEPT = 8


def _settings_of(raw: Any) -> RemediationSettings:
    """``RemediationSettings.from_json`` of the state's settings, read once per distinct value.
    Checked against the timing rules when deployed; a run started by an earlier deployment must
    still finish (and release its lock) under newer rules, so they are not checked here."""
    try:
        key = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return RemediationSettings.from_json(raw)  # its own clear error
    settings = _READ_SETTINGS.get(key)
    if settings is None:
        settings = RemediationSettings.from_json(raw)
        if len(_READ_SETTINGS) >= _READ_SETTINGS_KEPT:
            _READ_SETTINGS.pop(next(iter(_READ_SETTINGS)))
        _READ_SETTINGS[key] = settings
    return settings
