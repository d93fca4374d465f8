"""Helpers shared by the policy tests: conditions as detectors write them, policies from cdk.json."""

from __future__ import annotations

from typing import Any

from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.settings_reader import SettingsReader


def npd(message: str, reason: str = "GPUHardwareError") -> Condition:
    """A node-problem-detector GPUProblem condition carrying a kernel log line."""
    return Condition(type="GPUProblem", status="True", reason=reason, message=message)


def nma(reason: str, message: str = "", condition_type: str = "AcceleratedHardwareReady") -> Condition:
    """An EKS node monitoring agent readiness condition gone False."""
    return Condition(type=condition_type, status="False", reason=reason, message=message)


def policy_from(raw: dict[str, Any]) -> PolicySettings:
    """Build the policy the way the workflow does: from cdk.json's camelCase ``policy`` object."""
    return PolicySettings.read(SettingsReader(raw, "policy"))
