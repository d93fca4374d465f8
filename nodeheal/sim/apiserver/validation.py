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
* Event: ``ValidateEventCreate`` / ``ValidateEventUpdate`` for the API version of the request
  (``requestGroupVersion`` in the event strategy): every Event passes ``legacyValidateEvent``; one
  written through events.k8s.io/v1 also the strict checks (DNS-subdomain name, ``eventTime``
  required, the deprecated fields unset, a series of at least 2; on update, every field but the
  series and metadata immutable). Field paths are the internal type's (``count``, ``message``,
  ``involvedObject``, ``reportingController``) whichever version the request used
  (https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/core/validation/events.go,
  https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/event/strategy.go).

The 422 names the Kind of the internal object (``objectMetaAndKind``: the first kind the scheme
registered the type under). Events are registered by the core group before events.k8s.io, so an
Event refused through either group is an ``Event``, with no group.

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


#: ``validateRestartPolicy``'s values (k8s.io/kubernetes pkg/apis/core/validation/validation.go).
_RESTART_POLICIES = ("Always", "OnFailure", "Never")


def _pod_spec_create(spec: JSON) -> list[FieldError]:
    """The parts of ``ValidatePodSpec`` a created pod meets first (validation.go v1.33): at least one
    container (``validateContainers``), each with a DNS-1123 label name unique in the pod and an image
    (``validateContainerCommon``), a supported restart policy, and a path on every hostPath volume
    (``validateHostPathVolumeSource``). The defaulted fields (restartPolicy Always) are not errors."""
    errors: list[FieldError] = []
    containers = spec.get("containers") or []
    if not containers:
        errors.append(required("spec.containers"))
    seen: set[str] = set()
    for index, container in enumerate(containers):
        path = f"spec.containers[{index}]"
        name = str(container.get("name") or "")
        if not name:
            errors.append(required(f"{path}.name"))
        elif name in seen:
            errors.append(duplicate(f"{path}.name", go_quote(name)))
        else:
            errors.extend(invalid(f"{path}.name", go_quote(name), m) for m in is_dns1123_label(name))
        seen.add(name)
        if not container.get("image"):
            errors.append(required(f"{path}.image"))
    policy = spec.get("restartPolicy")
    if policy and policy not in _RESTART_POLICIES:
        errors.append(not_supported("spec.restartPolicy", go_quote(str(policy)), _RESTART_POLICIES))
    for index, volume in enumerate(spec.get("volumes") or []):
        host_path = volume.get("hostPath")
        if host_path is not None and not host_path.get("path"):
            errors.append(required(f"spec.volumes[{index}].hostPath.path"))
    return errors


# ---- Events ------------------------------------------------------------------------------------

# ReportingInstanceLengthLimit, ActionLengthLimit, ReasonLengthLimit and NoteLengthLimit (bytes).
_EVENT_REPORTING_INSTANCE_MAX = 128
_EVENT_ACTION_MAX = 128
_EVENT_REASON_MAX = 128
_EVENT_NOTE_MAX = 1024
_EVENT_TYPES = ("Normal", "Warning")
_OBJECT_REFERENCE_FIELDS = (
    ("Kind", "kind"),
    ("Namespace", "namespace"),
    ("Name", "name"),
    ("UID", "uid"),
    ("APIVersion", "apiVersion"),
    ("ResourceVersion", "resourceVersion"),
    ("FieldPath", "fieldPath"),
)
_TIME_TEXT = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.(\d+))?Z")


def _strict_event_version(rtype: ResourceType) -> bool:
    """Whether the request's version gets the strict Event validation: every version but core/v1
    and events.k8s.io/v1beta1 (which the fake does not serve)."""
    return rtype.group == "events.k8s.io"


def _go_struct(name: str, fields: tuple[tuple[str, str], ...], value: JSON | None) -> str:
    """``%#v`` of an internal struct of string fields, as ErrorBody prints a struct value."""
    value = value or {}
    inner = ", ".join(f"{go}:{go_quote(str(value.get(json_name) or ''))}" for go, json_name in fields)
    return f"{name}{{{inner}}}"


def _object_reference(value: JSON | None) -> str:
    return _go_struct("core.ObjectReference", _OBJECT_REFERENCE_FIELDS, value)


def _related(value: JSON | None) -> str:
    # A nil *ObjectReference prints as null, any other is dereferenced.
    return "null" if value is None else _object_reference(value)


def _event_source(value: JSON | None) -> str:
    return _go_struct("core.EventSource", (("Component", "component"), ("Host", "host")), value)


def _go_time_value(value: str | None) -> str:
    """``time.Time.String()`` of a metav1.Time or MicroTime value (a zero one when unset): a
    Stringer, so ErrorBody prints it so, in UTC with the fraction's trailing zeros dropped."""
    match = _TIME_TEXT.fullmatch(value or "")
    if match is None:
        return "0001-01-01 00:00:00 +0000 UTC"
    fraction = (match[3] or "").rstrip("0")
    return f"{match[1]} {match[2]}{'.' + fraction if fraction else ''} +0000 UTC"


def _legacy_event(event: JSON) -> list[FieldError]:
    """``legacyValidateEvent``: what every Event must satisfy, whichever API wrote it."""
    errors: list[FieldError] = []
    namespace = event["metadata"].get("namespace") or ""
    involved = (event.get("involvedObject") or {}).get("namespace") or ""
    mismatch = invalid("involvedObject.namespace", go_quote(involved), messages.EVENT_NAMESPACE_MISMATCH)
    if not event.get("eventTime"):
        # An Event of the old API: its namespace is its object's ("default" for a cluster-scoped one).
        if (not involved and namespace not in ("", "default")) or (involved and namespace != involved):
            errors.append(mismatch)
    else:
        if not involved and namespace not in ("default", "kube-system"):
            errors.append(mismatch)
        controller = event.get("reportingComponent") or ""
        if not controller:
            errors.append(required("reportingController"))
        errors.extend(
            invalid("reportingController", go_quote(controller), m) for m in is_qualified_name(controller)
        )
        for field, path, limit in (
            ("reportingInstance", "reportingInstance", _EVENT_REPORTING_INSTANCE_MAX),
            ("action", "action", _EVENT_ACTION_MAX),
            ("reason", "reason", _EVENT_REASON_MAX),
        ):
            value = event.get(field) or ""
            if not value:
                errors.append(required(path))
            if _length(value) > limit:
                errors.append(invalid(path, go_quote(""), messages.EVENT_FIELD_TOO_LONG.format(max=limit)))
        if _length(event.get("message") or "") > _EVENT_NOTE_MAX:
            errors.append(
                invalid("message", go_quote(""), messages.EVENT_FIELD_TOO_LONG.format(max=_EVENT_NOTE_MAX))
            )
    errors.extend(invalid("namespace", go_quote(namespace), m) for m in is_dns1123_subdomain(namespace))
    return errors


def _v1_event_series(event: JSON) -> list[FieldError]:
    """``validateV1EventSeries``."""
    series = event.get("series")
    if series is None:
        return []
    errors: list[FieldError] = []
    if int(series.get("count") or 0) < 2:
        errors.append(invalid("series.count", go_quote(""), messages.EVENT_SERIES_COUNT_TOO_LOW))
    if not series.get("lastObservedTime"):
        errors.append(required("series.lastObservedTime"))
    return errors


def _validate_event_create(rtype: ResourceType, event: JSON) -> list[FieldError]:
    """``ValidateEventCreate`` for the request's version."""
    errors = _legacy_event(event)
    if not _strict_event_version(rtype):
        return errors
    errors += _object_meta(event["metadata"], True, name_is_dns_subdomain)
    errors += _v1_event_series(event)
    if not event.get("eventTime"):
        errors.append(required("eventTime"))
    event_type = event.get("type") or ""
    if event_type not in _EVENT_TYPES:
        errors.append(invalid("type", go_quote(""), messages.EVENT_TYPE_INVALID.format(type=event_type)))
    # The deprecated fields (core/v1's firstTimestamp, lastTimestamp, count and source) are the
    # old API's; a new-style Event leaves them to the series.
    source = event.get("source") or {}
    for field, is_set in (
        ("firstTimestamp", bool(event.get("firstTimestamp"))),
        ("lastTimestamp", bool(event.get("lastTimestamp"))),
        ("count", bool(event.get("count"))),
        ("source", bool(source.get("component") or source.get("host"))),
    ):
        if is_set:
            errors.append(invalid(field, go_quote(""), messages.EVENT_FIELD_MUST_BE_UNSET))
    return errors


def _validate_event_update(rtype: ResourceType, new: JSON, old: JSON) -> list[FieldError]:
    """``ValidateEventUpdate`` for the request's version: through events.k8s.io only the series
    (and metadata) of an Event may change; ``reason`` is checked twice, as the real code does."""
    errors = _legacy_event(new)
    if not _strict_event_version(rtype):
        return errors
    errors += _object_meta_update(new["metadata"], old["metadata"])
    if new.get("series") != old.get("series"):
        errors += _v1_event_series(new)
    immutable: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
        ("involvedObject", "involvedObject", _object_reference),
        ("reason", "reason", lambda v: go_quote(v or "")),
        ("message", "message", lambda v: go_quote(v or "")),
        ("source", "source", _event_source),
        ("firstTimestamp", "firstTimestamp", _go_time_value),
        ("lastTimestamp", "lastTimestamp", _go_time_value),
        ("count", "count", lambda v: str(v or 0)),
        ("reason", "reason", lambda v: go_quote(v or "")),
        ("type", "type", lambda v: go_quote(v or "")),
        ("eventTime", "eventTime", _go_time_value),
        ("action", "action", lambda v: go_quote(v or "")),
        ("related", "related", _related),
        ("reportingComponent", "reportingController", lambda v: go_quote(v or "")),
        ("reportingInstance", "reportingInstance", lambda v: go_quote(v or "")),
    )
    for field, path, render in immutable:
        # Semantic.DeepEqual: an unset and an empty value are the same Go zero value.
        if _event_field(new, field) != _event_field(old, field):
            errors.append(invalid(path, render(new.get(field)), messages.FIELD_IMMUTABLE))
    return errors


def _event_field(event: JSON, field: str) -> Any:
    """A field of the internal Event as Semantic.DeepEqual compares it: a struct by its non-zero
    fields, a pointer (``related``) as nil or not, any other unset value as its zero value."""
    value = event.get(field)
    if field in ("involvedObject", "source", "related"):
        if value is None and field == "related":
            return None
        return {k: v for k, v in (value or {}).items() if v}
    return value or None


def _strategy_create(rtype: ResourceType, obj: JSON) -> list[FieldError]:
    if rtype is NODES:
        return _validate_node(obj)
    if rtype.stored is EVENTS:
        return _validate_event_create(rtype, obj)
    # Leases, PDBs and pods are namespaced; a custom resource (NodeClaim) is checked with its own
    # scope (customResourceStrategy.Validate: ValidateObjectMetaAccessor(..., a.namespaceScoped, ...)).
    errors = _object_meta(obj["metadata"], rtype.namespaced, name_is_dns_subdomain)
    if rtype is LEASES:
        errors.extend(_lease_spec(obj.get("spec") or {}))
    elif rtype is PDBS:
        errors.extend(_pdb_spec(obj))
    elif rtype is PODS:
        errors.extend(_pod_spec_create(obj.get("spec") or {}))
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
    if rtype.stored is EVENTS:
        return _validate_event_update(rtype, new, old)
    return []


def validate_create(rtype: ResourceType, obj: JSON) -> None:
    """``rest.BeforeCreate``'s validation: the strategy first, the generic metadata checks only
    when the strategy found nothing. ``rtype`` is the resource the request named (a view
    chooses its version's checks); ``obj`` has the stored resource's shape."""
    name = obj["metadata"].get("name") or ""
    errors = _strategy_create(rtype, obj)
    if not errors:
        errors = _object_meta(obj["metadata"], rtype.namespaced, path_segment_name)
    if errors:
        raise invalid_error(rtype.stored.kind, rtype.stored.group, name, errors)


def validate_update(rtype: ResourceType, new: JSON, old: JSON, subresource: str | None) -> None:
    """``rest.BeforeUpdate``'s validation: generic checks of the new and changed metadata, then
    the strategy's ``ValidateUpdate``, every error kept."""
    meta, old_meta = new["metadata"], old["metadata"]
    errors = _object_meta(meta, rtype.namespaced, path_segment_name)
    errors += _object_meta_update(meta, old_meta)
    errors += _strategy_update(rtype, new, old, subresource)
    if errors:
        raise invalid_error(rtype.stored.kind, rtype.stored.group, meta.get("name") or "", errors)
