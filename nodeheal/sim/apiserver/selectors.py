"""Label and field selectors with the grammar and semantics of k8s.io/apimachinery.

`!=` and `notin` match objects that lack the label, `key` alone means "exists", and a field
selector may only name the fields the real server indexes for that resource (anything else is a
400, just like `field label not supported`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeheal.sim.apiserver.messages import FIELD_LABEL_NOT_SUPPORTED
from nodeheal.sim.apiserver.status import ApiError, bad_request

JSON = dict[str, Any]

_KEY_RE = re.compile(
    r"^([a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"
)
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if not present or value is None:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == "gt" else number < bound


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        actual = labels or {}
        return all(r.matches(actual) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _fail(detail: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {detail}")


def _check_key(key: str) -> None:
    if not _KEY_RE.match(key) or len(key.split("/")[-1]) > 63:
        raise _fail(f'invalid label key "{key}": name part must consist of alphanumeric characters')


def _check_value(value: str) -> None:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise _fail(
            f'invalid label value: "{value}": must be 63 characters or less and consist of alphanumerics'
        )


_TOKEN_RE = re.compile(r"\s*(!=|==|=|!|\(|\)|,|<|>|[^\s!=(),<>]+)")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise _fail(f"unexpected character at position {pos} in {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return LabelSelector()
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def peek() -> str | None:
        return toks[i] if i < len(toks) else None

    while i < len(toks):
        if toks[i] == "!":
            i += 1
            key = peek()
            if key is None or key in {",", "(", ")", "=", "==", "!="}:
                raise _fail(f"found '{key}', expected: identifier")
            _check_key(key)
            reqs.append(Requirement(key, "!"))
            i += 1
        else:
            key = toks[i]
            _check_key(key)
            i += 1
            op_tok = peek()
            if op_tok is None or op_tok == ",":
                reqs.append(Requirement(key, "exists"))
            elif op_tok in ("=", "==", "!="):
                i += 1
                value = peek()
                if value is None or value == ",":
                    value = ""
                else:
                    i += 1
                _check_value(value)
                reqs.append(Requirement(key, "!=" if op_tok == "!=" else "=", (value,)))
            elif op_tok in (">", "<"):
                i += 1
                value = peek()
                if value is None or not value.lstrip("-").isdigit():
                    raise _fail(f"for 'Gt', 'Lt' operators, the value must be an integer, got {value!r}")
                i += 1
                reqs.append(Requirement(key, "gt" if op_tok == ">" else "lt", (value,)))
            elif op_tok in ("in", "notin"):
                i += 1
                if peek() != "(":
                    raise _fail(f"found '{peek()}', expected: '('")
                i += 1
                values: list[str] = []
                while True:
                    tok = peek()
                    if tok is None:
                        raise _fail("found '', expected: ')'")
                    if tok == ")":
                        i += 1
                        break
                    if tok == ",":
                        i += 1
                        continue
                    _check_value(tok)
                    values.append(tok)
                    i += 1
                if not values:
                    raise _fail("for 'in', 'notin' operators, values set can't be empty")
                reqs.append(Requirement(key, op_tok, tuple(values)))
            else:
                raise _fail(f"found '{op_tok}', expected: in, notin, =, ==, !=, gt, lt")
        tok = peek()
        if tok is not None:
            if tok != ",":
                raise _fail(f"found '{tok}', expected: ','")
            i += 1
    return LabelSelector(tuple(reqs))


def selector_from_label_selector(spec: JSON | None) -> LabelSelector:
    """metav1.LabelSelector (matchLabels + matchExpressions) as a selector."""
    if not spec:
        return LabelSelector()
    reqs: list[Requirement] = [
        Requirement(k, "=", (str(v),)) for k, v in sorted((spec.get("matchLabels") or {}).items())
    ]
    for expr in spec.get("matchExpressions") or []:
        op = expr.get("operator")
        key = str(expr.get("key", ""))
        values = tuple(str(v) for v in expr.get("values") or [])
        if op == "In":
            reqs.append(Requirement(key, "in", values))
        elif op == "NotIn":
            reqs.append(Requirement(key, "notin", values))
        elif op == "Exists":
            reqs.append(Requirement(key, "exists"))
        elif op == "DoesNotExist":
            reqs.append(Requirement(key, "!"))
        else:
            raise bad_request(f'"{op}" is not a valid label selector operator')
    return LabelSelector(tuple(reqs))


FieldGetter = Callable[[JSON], str]


def _path(*keys: str) -> FieldGetter:
    def get(obj: JSON) -> str:
        cur: Any = obj
        for key in keys:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(key)
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return "" if cur is None else str(cur)

    return get


_COMMON: dict[str, FieldGetter] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}


def _event_source(obj: JSON) -> str:
    """The Event's ``source`` field: the legacy source's component, or for an Event written
    without one (through events.k8s.io) its reporting controller (ToSelectableFields in
    https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/registry/core/event/strategy.go)."""
    return _path("source", "component")(obj) or _path("reportingComponent")(obj)


# The field labels each registry supports (pkg/registry/*/strategy.go *ToSelectableFields), by the
# stored resource's field names.
FIELD_LABELS: dict[str, dict[str, FieldGetter]] = {
    "nodes": {**_COMMON, "spec.unschedulable": _path("spec", "unschedulable")},
    "pods": {
        **_COMMON,
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": _path("spec", "hostNetwork"),
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    "events": {
        **_COMMON,
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _event_source,
        "type": _path("type"),
    },
    "leases": dict(_COMMON),
    "poddisruptionbudgets": dict(_COMMON),
}

# A view's field-label conversion, by (group, plural): the label its requests may use and the
# stored resource's field it selects on. Any other label is refused. events.k8s.io/v1 names the
# core fields by their new names, apart from ``reason``, ``type`` and ``source``
# (AddFieldLabelConversionsForEvent in
# https://github.com/kubernetes/kubernetes/blob/v1.33.1/pkg/apis/events/v1/conversion.go).
FIELD_LABEL_CONVERSIONS: dict[tuple[str, str], dict[str, str]] = {
    ("events.k8s.io", "events"): {
        "reason": "reason",
        "regarding.kind": "involvedObject.kind",
        "regarding.namespace": "involvedObject.namespace",
        "regarding.name": "involvedObject.name",
        "regarding.uid": "involvedObject.uid",
        "regarding.apiVersion": "involvedObject.apiVersion",
        "regarding.resourceVersion": "involvedObject.resourceVersion",
        "regarding.fieldPath": "involvedObject.fieldPath",
        "reportingController": "reportingComponent",
        "source": "source",
        "type": "type",
        "metadata.namespace": "metadata.namespace",
        "metadata.name": "metadata.name",
    },
}


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    negate: bool
    value: str
    getter: FieldGetter


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: JSON) -> bool:
        for req in self.requirements:
            equal = req.getter(obj) == req.value
            if equal == req.negate:
                return False
        return True

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            cur.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(text: str | None, resource: str, group: str = "") -> FieldSelector:
    """The field selector of a request for ``resource`` of ``group`` (a view's labels are
    converted to the stored resource's fields first, as the list handler does)."""
    if not text or not text.strip():
        return FieldSelector()
    supported = FIELD_LABELS.get(resource, _COMMON)
    conversion = FIELD_LABEL_CONVERSIONS.get((group, resource))
    reqs: list[FieldRequirement] = []
    for part in _split_unescaped(text, ","):
        if not part:
            continue
        m = re.match(r"^(.*?)(!=|==|=)(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = m.group(1).strip(), m.group(2), _unescape(m.group(3))
        stored_field = field if conversion is None else conversion.get(field)
        getter = None if stored_field is None else supported.get(stored_field)
        if getter is None:
            raise bad_request(FIELD_LABEL_NOT_SUPPORTED.format(label=field))
        reqs.append(FieldRequirement(field, op == "!=", value, getter))
    return FieldSelector(tuple(reqs))
