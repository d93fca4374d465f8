"""Remediation actions, in order of cost."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from nodeheal.errors import ConfigurationError, InvalidEventError


class Action(StrEnum):
    NONE = "none"  # record only
    ALERT = "alert"  # notify a person, touch nothing
    CORDON = "cordon"  # stop new pods landing on the node
    REBOOT = "reboot"  # cordon, drain, EC2 reboot, confirm recovery, uncordon
    REPLACE = "replace"  # cordon, drain, EC2 terminate; Karpenter provisions a new node

    @property
    def cost(self) -> int:
        return _COST[self]

    @property
    def mutates_cluster(self) -> bool:
        return self.cost >= _COST[Action.CORDON]

    @property
    def mutates_instance(self) -> bool:
        return self in (Action.REBOOT, Action.REPLACE)

    @classmethod
    def parse(cls, value: str, where: str) -> Action:
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(action.value for action in cls)
            raise ConfigurationError(f"{where} must be one of {allowed}; got {value!r}") from None


_COST = {Action.NONE: 0, Action.ALERT: 1, Action.CORDON: 2, Action.REBOOT: 3, Action.REPLACE: 4}


class Mode(StrEnum):
    """How far NodeHeal may go. Roll out in this order: dry-run, cordon-only, full."""

    DRY_RUN = "dry-run"  # decide and record everything, mutate nothing
    CORDON_ONLY = "cordon-only"  # at most cordon (and alert); never drain, reboot or terminate
    FULL = "full"


def action_at(raw: Mapping[str, Any], key: str, *, where: str) -> Action:
    """The action stored under ``key`` of ``raw`` (a decision or verdict read back from the state),
    or :class:`InvalidEventError` naming ``where.key`` and the allowed values."""
    value = raw.get(key)
    try:
        return Action(str(value))
    except ValueError:
        allowed = ", ".join(a.value for a in Action)
        raise InvalidEventError(f"{where}.{key} must be one of {allowed}; got {value!r}") from None
