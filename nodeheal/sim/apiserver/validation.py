"""The slice of apiserver validation that NodeHeal's writes can trip over (422 Invalid)."""

from __future__ import annotations

import re
from typing import Any

from nodeheal.sim.apiserver.resources import NODES, PDBS, ResourceType
from nodeheal.sim.apiserver.status import invalid

JSON = dict[str, Any]

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")


def validate(rtype: ResourceType, obj: JSON) -> None:
    meta = obj["metadata"]
    name = meta.get("name") or ""
    causes: list[tuple[str, str, str]] = []
    if not name:
        causes.append(
            ("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")
        )
    elif len(name) > 253 or not _NAME_RE.match(name):
        causes.append(
            (
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    for field in ("labels", "annotations"):
        values = meta.get(field)
        if values is not None and (
            not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
        ):
            causes.append(("FieldValueInvalid", f"metadata.{field}", "Invalid value: values must be strings"))
    if rtype is NODES:
        causes.extend(_node_causes(obj))
    if rtype is PDBS:
        spec = obj.get("spec") or {}
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            causes.append(
                (
                    "FieldValueInvalid",
                    "spec",
                    "Invalid value: minAvailable and maxUnavailable cannot be both set",
                )
            )
    if causes:
        raise invalid(rtype.kind, rtype.group, name, causes)


def _node_causes(node: JSON) -> list[tuple[str, str, str]]:
    spec = node.get("spec") or {}
    causes: list[tuple[str, str, str]] = []
    if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
        causes.append(("FieldValueInvalid", "spec.unschedulable", "Invalid value: must be a boolean"))
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(spec.get("taints") or []):
        if not isinstance(taint, dict) or not taint.get("key"):
            causes.append(("FieldValueRequired", f"spec.taints[{i}].key", "Required value"))
            continue
        effect = taint.get("effect")
        if effect not in _TAINT_EFFECTS:
            supported = ", ".join(f'"{e}"' for e in _TAINT_EFFECTS)
            causes.append(
                (
                    "FieldValueNotSupported",
                    f"spec.taints[{i}].effect",
                    f'Unsupported value: "{effect}": supported values: {supported}',
                )
            )
        pair = (str(taint["key"]), str(effect))
        if pair in seen:
            causes.append(
                ("FieldValueDuplicate", f"spec.taints[{i}]", f'Duplicate value: "{pair[0]}:{pair[1]}"')
            )
        seen.add(pair)
    return causes


def validate_pod_update(old: JSON, new: JSON) -> None:
    """Pod specs are immutable apart from a few fields (container images among them)."""
    old_spec = {k: v for k, v in (old.get("spec") or {}).items() if k not in _MUTABLE_POD_SPEC}
    new_spec = {k: v for k, v in (new.get("spec") or {}).items() if k not in _MUTABLE_POD_SPEC}
    for spec in (old_spec, new_spec):
        spec["containers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []
        ]
    if old_spec != new_spec:
        raise invalid(
            "Pod",
            "",
            new["metadata"]["name"],
            [
                (
                    "FieldValueForbidden",
                    "spec",
                    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
                    "(only additions to existing tolerations), `spec.terminationGracePeriodSeconds` "
                    "(allow it to be set to 1 if it was previously negative)",
                )
            ],
        )
