"""The validation the registry runs before a write (422 Invalid), as far as the served kinds go.

The order and the repetitions are the real server's. A create runs the kind's strategy
``Validate`` and, only if that passed, the generic object-meta checks (``rest.BeforeCreate``). An
update runs the generic checks of old and new metadata and then the strategy's ``ValidateUpdate``
(``rest.BeforeUpdate``), so one bad label key is reported by several validators: every copy is a
cause of the 422, and its message names it once
(https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/registry/rest/create.go and update.go).

What each kind's strategy checks here:

* Node: ``ValidateNode`` (metadata, taints) and on update also ``ValidateNodeUpdate`` (immutable
  metadata, taints again); the status subresource runs ``ValidateNodeUpdate`` alone. Taint errors
  carry the path ``metadata.taints[i]``, not ``spec.taints[i]``: both functions hand the
  ``metadata`` path to validateNodeTaints
  (https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/validation.go).
* Lease: ``ValidateLease`` / ``ValidateLeaseUpdate`` with ``ValidateLeaseSpec``
  (https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/coordination/validation/validation.go).
* Pod: metadata, and on update the spec's immutability (only images, ``activeDeadlineSeconds``,
  tolerations and ``terminationGracePeriodSeconds`` may change). Pod spec validation on create is
  not modelled.
* PodDisruptionBudget: metadata, and ``minAvailable`` with ``maxUnavailable`` refused.
* Event: metadata only.

Not modelled anywhere: ``ownerReferences``, ``finalizers`` and ``managedFields`` checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from nodeheal.sim.apiserver import messages
from nodeheal.sim.apiserver.fielderrors import (
    FieldError,
    duplicate,
    forbidden,
    go_quote,
    invalid,
    invalid_error,
    not_supported,
    required,
    too_long,
)
from nodeheal.sim.apiserver.resources import EVENTS, LEASES, NODES, PDBS, PODS, ResourceType

JSON = dict[str, Any]
NameCheck = Callable[[str, bool], list[str]]

# k8s.io/apimachinery/pkg/util/validation/validation.go, v0.33.1.
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_MAX = 63
_LABEL_VALUE_MAX = 63
_DNS1123_LABEL_MAX = 63
_DNS1123_SUBDOMAIN_MAX = 253
# TotalAnnotationSizeLimitB, k8s.io/apimachinery/pkg/api/validation/objectmeta.go.
_ANNOTATIONS_MAX_BYTES = 256 * 1024
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
# validLeaseStrategies, k8s.io/kubernetes/pkg/apis/coordination/validation/validation.go.
_LEASE_STRATEGIES = ("OldestEmulationVersion",)


def _length(value: str) -> int:
    # Go's len() counts bytes.
    return len(value.encode())


def is_qualified_name(value: str) -> list[str]:
    """``validation.IsQualifiedName``: an optional DNS-subdomain prefix and ``/``, then a name."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return [messages.QUALIFIED_NAME_WHOLE]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append(messages.PREFIX_PART_EMPTY)
        else:
            errors.extend(messages.PREFIX_PART.format(message=m) for m in is_dns1123_subdomain(prefix))
    if not name:
        errors.append(messages.NAME_PART_EMPTY)
    elif _length(name) > _QUALIFIED_NAME_MAX:
        errors.append(messages.NAME_PART_TOO_LONG)
    if not _QUALIFIED_NAME.fullmatch(name):
        errors.append(messages.QUALIFIED_NAME_PART)
    return errors


def is_valid_label_value(value: str) -> list[str]:
    errors: list[str] = []
    if _length(value) > _LABEL_VALUE_MAX:
        errors.append(messages.MAX_LENGTH.format(max=_LABEL_VALUE_MAX))
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(messages.LABEL_VALUE)
    return errors


def is_dns1123_subdomain(value: str) -> list[str]:
    errors: list[str] = []
    if _length(value) > _DNS1123_SUBDOMAIN_MAX:
        errors.append(messages.MAX_LENGTH.format(max=_DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(messages.DNS1123_SUBDOMAIN)
    return errors


def is_dns1123_label(value: str) -> list[str]:
    errors: list[str] = []
    if _length(value) > _DNS1123_LABEL_MAX:
        errors.append(messages.MAX_LENGTH.format(max=_DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL.fullmatch(value):
        # A valid subdomain that is not a valid label can only be one with dots.
        errors.append(
            messages.DNS1123_LABEL_DOTS if _DNS1123_SUBDOMAIN.fullmatch(value) else messages.DNS1123_LABEL
        )
    return errors


def _mask_trailing_dash(name: str) -> str:
    # generic.go maskTrailingDash: a generateName may end in "-"; Go drops two characters, not one.
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    return is_dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def _namespace_name(name: str, prefix: bool) -> list[str]:
    return is_dns1123_label(_mask_trailing_dash(name) if prefix else name)


def path_segment_name(name: str, prefix: bool) -> list[str]:
    """``path.ValidatePathSegmentName``, the name check of the generic object-meta validation."""
    if not prefix:
        for banned in (".", ".."):
            if name == banned:
                return [messages.PATH_SEGMENT_MAY_NOT_BE.format(value=banned)]
    return [messages.PATH_SEGMENT_MAY_NOT_CONTAIN.format(value=c) for c in ("/", "%") if c in name]


def validate_labels(labels: Mapping[str, str], field: str) -> list[FieldError]:
    """``ValidateLabels``: every error reports the field ``metadata.labels`` and the bad key or value."""
    errors: list[FieldError] = []
    for key, value in labels.items():
        errors.extend(invalid(field, go_quote(key), m) for m in is_qualified_name(key))
        errors.extend(invalid(field, go_quote(value), m) for m in is_valid_label_value(value))
    return errors


def validate_annotations(annotations: Mapping[str, str], field: str) -> list[FieldError]:
    """``ValidateAnnotations``: keys are qualified names, case aside; 256 KiB in all."""
    errors: list[FieldError] = []
    for key in annotations:
        errors.extend(invalid(field, go_quote(key), m) for m in is_qualified_name(key.lower()))
    if sum(_length(k) + _length(v) for k, v in annotations.items()) > _ANNOTATIONS_MAX_BYTES:
        errors.append(too_long(field, _ANNOTATIONS_MAX_BYTES))
    return errors


def _object_meta(meta: JSON, namespaced: bool, name_check: NameCheck) -> list[FieldError]:
    """``ValidateObjectMetaAccessor`` (objectmeta.go), in its order."""
    errors: list[FieldError] = []
    generate_name = meta.get("generateName") or ""
    if generate_name:
        errors.extend(
            invalid("metadata.generateName", go_quote(generate_name), m)
            for m in name_check(generate_name, True)
        )
    name = meta.get("name") or ""
    if not name:
        errors.append(required("metadata.name", messages.NAME_REQUIRED))
    else:
        errors.extend(invalid("metadata.name", go_quote(name), m) for m in name_check(name, False))
    namespace = meta.get("namespace") or ""
    if namespaced:
        if not namespace:
            errors.append(required("metadata.namespace"))
        else:
            errors.extend(
                invalid("metadata.namespace", go_quote(namespace), m)
                for m in _namespace_name(namespace, False)
            )
    elif namespace:
        errors.append(forbidden("metadata.namespace", messages.NAMESPACE_NOT_ALLOWED))
    generation = int(meta.get("generation") or 0)
    if generation < 0:
        # ValidateNonnegativeField appends this error twice in v0.33.1.
        errors.extend([invalid("metadata.generation", str(generation), messages.IS_NEGATIVE)] * 2)
    errors.extend(validate_labels(meta.get("labels") or {}, "metadata.labels"))
    errors.extend(validate_annotations(meta.get("annotations") or {}, "metadata.annotations"))
    return errors


def _immutable(field: str, new: Any, old: Any, render: Callable[[Any], str]) -> list[FieldError]:
    return [] if new == old else [invalid(field, render(new), messages.FIELD_IMMUTABLE)]


def _go_pointer(value: Any) -> str:
    # ErrorBody prints a nil pointer as null and dereferences any other.
    return "null" if value is None else str(value)


def _object_meta_update(new: JSON, old: JSON) -> list[FieldError]:
    """``ValidateObjectMetaAccessorUpdate`` (objectmeta.go), in its order."""
    errors: list[FieldError] = []
    if not new.get("resourceVersion"):
        errors.append(invalid("metadata.resourceVersion", go_quote(""), messages.RESOURCE_VERSION_REQUIRED))
    if int(new.get("generation") or 0) < int(old.get("generation") or 0):
        errors.append(
            invalid("metadata.generation", str(new.get("generation") or 0), messages.GENERATION_DECREMENTED)
        )
    errors.extend(_immutable("metadata.name", new.get("name", ""), old.get("name", ""), go_quote))
    errors.extend(
        _immutable("metadata.namespace", new.get("namespace", ""), old.get("namespace", ""), go_quote)
    )
    errors.extend(_immutable("metadata.uid", new.get("uid", ""), old.get("uid", ""), go_quote))
    errors.extend(
        _immutable(
            "metadata.creationTimestamp", new.get("creationTimestamp"), old.get("creationTimestamp"), _go_time
        )
    )
    errors.extend(
        _immutable(
            "metadata.deletionTimestamp", new.get("deletionTimestamp"), old.get("deletionTimestamp"), _go_time
        )
    )
    errors.extend(
        _immutable(
            "metadata.deletionGracePeriodSeconds",
            new.get("deletionGracePeriodSeconds"),
            old.get("deletionGracePeriodSeconds"),
            _go_pointer,
        )
    )
    errors.extend(validate_labels(new.get("labels") or {}, "metadata.labels"))
    errors.extend(validate_annotations(new.get("annotations") or {}, "metadata.annotations"))
    return errors


def _go_time(value: str | None) -> str:
    # metav1.Time is a fmt.Stringer: time.Time.String() of the UTC instant.
    if value is None:
        return "null"
    return value.replace("T", " ").replace("Z", " +0000 UTC")


def _taint_value(taint: JSON) -> str:
    # field.Duplicate(idxPath, currTaint) prints the internal core.Taint with %#v.
    added = taint.get("timeAdded")
    pointer = "(*v1.Time)(nil)" if added is None else "(*v1.Time)(0xc000000000)"
    return (
        f"core.Taint{{Key:{go_quote(taint.get('key', ''))}, Value:{go_quote(taint.get('value', ''))}, "
        f"Effect:{go_quote(taint.get('effect', ''))}, TimeAdded:{pointer}}}"
    )


def _node_taints(taints: list[JSON]) -> list[FieldError]:
    """validateNodeTaints, on the path validation.go gives it: ``metadata.taints``."""
    errors: list[FieldError] = []
    seen: dict[str, set[str]] = {}
    for index, taint in enumerate(taints):
        path = f"metadata.taints[{index}]"
        key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
        errors.extend(invalid(f"{path}.key", go_quote(key), m) for m in is_qualified_name(key))
        value_errors = is_valid_label_value(value)
        if value_errors:
            errors.append(invalid(f"{path}.value", go_quote(value), ";".join(value_errors)))
        if not effect:
            errors.append(required(f"{path}.effect"))
        elif effect not in _TAINT_EFFECTS:
            errors.append(not_supported(f"{path}.effect", go_quote(effect), _TAINT_EFFECTS))
        if key in seen.get(effect, set()):
            errors.append(duplicate(path, _taint_value(taint), messages.TAINT_DUPLICATE))
            continue
        seen.setdefault(effect, set()).add(key)
    return errors


def _validate_node(node: JSON) -> list[FieldError]:
    errors = _object_meta(node["metadata"], False, name_is_dns_subdomain)
    taints = (node.get("spec") or {}).get("taints") or []
    return errors + (_node_taints(taints) if taints else [])


def _validate_node_update(new: JSON, old: JSON) -> list[FieldError]:
    errors = _object_meta_update(new["metadata"], old["metadata"])
    taints = (new.get("spec") or {}).get("taints") or []
    return errors + (_node_taints(taints) if taints else [])


def _lease_spec(spec: JSON) -> list[FieldError]:
    """ValidateLeaseSpec."""
    errors: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errors.append(invalid("spec.leaseDurationSeconds", str(duration), messages.LEASE_DURATION_POSITIVE))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errors.append(invalid("spec.leaseTransitions", str(transitions), messages.IS_NEGATIVE))
    strategy = spec.get("strategy")
    if strategy is not None:
        if "/" not in strategy:
            if strategy not in _LEASE_STRATEGIES:
                errors.append(not_supported("spec.strategy.strategy", go_quote(strategy), _LEASE_STRATEGIES))
        else:
            errors.extend(
                invalid("spec.strategy.strategy", go_quote(strategy), m) for m in is_qualified_name(strategy)
            )
    if spec.get("preferredHolder") and not strategy:
        errors.append(forbidden("spec.preferredHolder", messages.LEASE_PREFERRED_HOLDER))
    return errors


def _pdb_spec(pdb: JSON) -> list[FieldError]:
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        # The real error prints the internal spec struct (with pointers) as its value.
        return [invalid("spec", "policy.PodDisruptionBudgetSpec{...}", messages.PDB_BOTH_SET)]
    return []


def _pod_spec_update(old: JSON, new: JSON) -> list[FieldError]:
    """Pod specs are immutable apart from a few fields (container images among them)."""
    old_spec = {k: v for k, v in (old.get("spec") or {}).items() if k not in _MUTABLE_POD_SPEC}
    new_spec = {k: v for k, v in (new.get("spec") or {}).items() if k not in _MUTABLE_POD_SPEC}
    for spec in (old_spec, new_spec):
        spec["containers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []
        ]
    if old_spec == new_spec:
        return []
    return [forbidden("spec", messages.POD_SPEC_IMMUTABLE)]


def _strategy_create(rtype: ResourceType, obj: JSON) -> list[FieldError]:
    if rtype is NODES:
        return _validate_node(obj)
    errors = _object_meta(obj["metadata"], True, name_is_dns_subdomain)
    if rtype is LEASES:
        errors.extend(_lease_spec(obj.get("spec") or {}))
    elif rtype is PDBS:
        errors.extend(_pdb_spec(obj))
    return errors


def _strategy_update(rtype: ResourceType, new: JSON, old: JSON, subresource: str | None) -> list[FieldError]:
    meta_update = _object_meta_update(new["metadata"], old["metadata"])
    if rtype is NODES:
        if subresource == "status":
            return _validate_node_update(new, old)
        return _validate_node(new) + _validate_node_update(new, old)
    if rtype is LEASES:
        return meta_update + _lease_spec(new.get("spec") or {})
    if rtype is PODS:
        if subresource == "status":
            return meta_update
        errors = meta_update + _object_meta(new["metadata"], True, name_is_dns_subdomain)
        return errors + _pod_spec_update(old, new)
    if rtype is PDBS and subresource != "status":
        return _object_meta(new["metadata"], True, name_is_dns_subdomain) + _pdb_spec(new)
    if rtype is EVENTS:
        return meta_update
    return []


def validate_create(rtype: ResourceType, obj: JSON) -> None:
    """``rest.BeforeCreate``'s validation: the strategy first, the generic metadata checks only
    when the strategy found nothing."""
    name = obj["metadata"].get("name") or ""
    errors = _strategy_create(rtype, obj)
    if not errors:
        errors = _object_meta(obj["metadata"], rtype.namespaced, path_segment_name)
    if errors:
        raise invalid_error(rtype.kind, rtype.group, name, errors)


def validate_update(rtype: ResourceType, new: JSON, old: JSON, subresource: str | None) -> None:
    """``rest.BeforeUpdate``'s validation: generic checks of the new and changed metadata, then
    the strategy's ``ValidateUpdate``, every error kept."""
    meta, old_meta = new["metadata"], old["metadata"]
    errors = _object_meta(meta, rtype.namespaced, path_segment_name)
    errors += _object_meta_update(meta, old_meta)
    errors += _strategy_update(rtype, new, old, subresource)
    if errors:
        raise invalid_error(rtype.kind, rtype.group, meta.get("name") or "", errors)
