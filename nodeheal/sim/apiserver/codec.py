"""What the API server keeps of a request body, and how it writes an object back.

The real server decodes a body into the Go struct of its kind, stores it (protobuf, in etcd) and
encodes it again for every answer. Three things follow, and this module does all three from the
struct-tag table in :mod:`~nodeheal.sim.apiserver.schema`:

* **Unknown fields are dropped.** With ``fieldValidation=Warn`` (the default) each one becomes a
  ``Warning`` header ``unknown field "spec.foo"``; ``Strict`` refuses the body; ``Ignore`` says
  nothing. The decoder is sigs.k8s.io/json's ``UnmarshalStrict`` (its strict errors and their
  ``a.b[0].c`` paths: https://github.com/kubernetes-sigs/json/blob/main/internal/golang/encoding/json/kubernetes_patch.go),
  called by the JSON serializer (https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/runtime/serializer/json/json.go,
  ``Serializer.unmarshal``); duplicate keys are reported the same way.
* **Values of the wrong type are refused** (400) with Go's ``UnmarshalTypeError`` text
  (``json: cannot unmarshal string into Go struct field NodeSpec.spec.unschedulable of type bool``);
  the first such error wins and decoding goes on, as encoding/json's ``saveError`` does. Times
  must parse as ``metav1.Time`` (RFC 3339) and ``metav1.MicroTime`` (RFC 3339 with exactly six
  fractional digits); their errors end decoding at once, like any ``UnmarshalJSON`` error.
* **Exactly the ``omitempty`` fields that are empty are omitted on read**, everything else is
  written even when zero (``"ready": false``, ``"reportingComponent": ""``, ``"lastProbeTime":
  null``). Empty lists and maps come back from protobuf storage as nil: omitted when the field is
  ``omitempty``, ``null`` otherwise. Structs are never omitted. ``metav1.Time`` keeps whole seconds
  (its protobuf form drops nanoseconds: time_proto.go ``ProtoTime``) and is written in UTC;
  ``MicroTime`` is written in UTC with six digits.

Not modelled: a ``resource.Quantity`` is checked but kept as sent, where the real server writes
its canonical form ("1000m" becomes "1"); a duplicated object key keeps only its last value,
where Go merges the two objects.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from nodeheal.sim.apiserver import gotime, messages
from nodeheal.sim.apiserver.schema import NAMED, STRUCTS

_Value = TypeVar("_Value")

JSON = dict[str, Any]

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_SCALARS = ("string", "bool", "int32", "int64")
_SCALAR_ZERO: dict[str, tuple[Any, bool]] = {
    "string": ("", True),
    "bool": (False, True),
    "int32": (0, True),
    "int64": (0, True),
}
# Types with their own UnmarshalJSON/MarshalJSON in apimachinery.
_TIME, _MICRO_TIME, _INT_OR_STRING, _QUANTITY, _FIELDS_V1 = (
    "meta.Time",
    "meta.MicroTime",
    "intstr.IntOrString",
    "resource.Quantity",
    "meta.FieldsV1",
)


class DecodeError(Exception):
    """A body the decoder cannot turn into the Go struct; ``str()`` is the Go error text."""


# ---- reading JSON with what Go's decoder sees -------------------------------------------------


class _Object(dict[str, Any]):
    """A JSON object that remembers its key/value pairs when a key repeats."""

    pairs: list[tuple[str, Any]] | None = None


class _IntLiteral(int):
    literal: str


class _FloatLiteral(float):
    literal: str


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        obj.pairs = pairs
    return obj


def _int(text: str) -> _IntLiteral:
    number = _IntLiteral(text)
    number.literal = text
    return number


def _float(text: str) -> _FloatLiteral:
    number = _FloatLiteral(text)
    number.literal = text
    return number


def load_json(raw: bytes | str) -> Any:
    """``json.loads`` that keeps what the Go decoder reports on: repeated keys and the literal
    text of numbers (``1.0`` is not an integer to Go)."""
    return json.loads(raw, object_pairs_hook=_object, parse_int=_int, parse_float=_float)


def _literal(value: int | float) -> str:
    text = getattr(value, "literal", None)
    return text if isinstance(text, str) else json.dumps(value)


# ---- where the decoder is --------------------------------------------------------------------

_FIELD, _KEY, _INDEX = 0, 1, 2


class _At:
    """A position in the body, kept as a chain to its parent and spelled out only for an error:
    encoding/json's errorContext (the struct whose field is being decoded, and the JSON names of
    the fields from the root) and sigs.k8s.io/json's strict path (``spec.taints[0].key``)."""

    __slots__ = ("label", "parent", "step", "struct")

    def __init__(self, parent: _At | None, step: int, label: str | int, struct: str) -> None:
        self.parent = parent
        self.step = step
        self.label = label
        self.struct = struct

    def _chain(self) -> list[_At]:
        chain: list[_At] = []
        at: _At | None = self
        while at is not None and at.parent is not None:
            chain.append(at)
            at = at.parent
        return chain[::-1]

    def path(self) -> str:
        out = ""
        for at in self._chain():
            if at.step == _INDEX:
                out += f"[{at.label}]"
            else:
                out = f"{out}.{at.label}" if out else str(at.label)
        return out

    def type_error(self, value_kind: str, go_type: str) -> str:
        fields = ".".join(str(at.label) for at in self._chain() if at.step == _FIELD)
        if self.struct or fields:
            return messages.JSON_TYPE_ERROR.format(
                value=value_kind, struct=self.struct, field=fields, type=go_type
            )
        return messages.JSON_TYPE_ERROR_NO_FIELD.format(value=value_kind, type=go_type)


_ROOT = _At(None, _FIELD, "", "")


class _Decoder:
    """One decoding: the strict errors noted so far and the first type error saved."""

    __slots__ = ("saved", "strict")

    def __init__(self) -> None:
        self.strict: list[str] = []
        self.saved: str | None = None

    def note_strict(self, template: str, at: _At) -> None:
        text = template.format(path=at.path())
        if text not in self.strict:
            self.strict.append(text)

    def mismatch(self, raw: Any, type_name: str, at: _At, value_kind: str | None = None) -> None:
        # encoding/json saves the first type error and goes on decoding (decodeState.saveError).
        if self.saved is None:
            self.saved = at.type_error(value_kind or _kind(raw), go_type_name(type_name))

    def pairs(self, raw: dict[str, Any], at: _At) -> Iterable[tuple[str, Any]]:
        pairs: list[tuple[str, Any]] | None = getattr(raw, "pairs", None)
        if not pairs:
            return raw.items()
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                self.note_strict(messages.DUPLICATE_FIELD, _At(at, _KEY, key, at.struct))
            seen.add(key)
        return pairs


# Each compiled decoder returns (the value as the server writes it, whether Go's omitempty sees it
# as empty).
_Decode = Callable[[_Decoder, Any, _At], tuple[Any, bool]]


def _kind(raw: Any) -> str:
    """How encoding/json names a JSON value in an UnmarshalTypeError."""
    if isinstance(raw, bool):
        return "bool"
    if isinstance(raw, str):
        return "string"
    if isinstance(raw, int | float):
        return "number"
    if isinstance(raw, list):
        return "array"
    return "object"


def copy_json(value: _Value) -> _Value:
    """A deep copy of a JSON value (objects, arrays and immutable scalars), three times faster
    than ``copy.deepcopy``, which the server would otherwise spend most of a list or a watch
    event on: the stored objects are JSON, so nothing but dicts and lists needs copying."""
    if isinstance(value, dict):
        return cast(_Value, {k: copy_json(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(_Value, [copy_json(v) for v in value])
    return value


# ---- the table, compiled ---------------------------------------------------------------------


class _Struct:
    __slots__ = ("by_name", "fields", "go_name")

    def __init__(self, go_name: str, fields: list[tuple[str, str, bool]]) -> None:
        self.go_name = go_name
        # (JSON name, decoder, omitempty, Go type)
        self.fields = [(name, _compile(type_name), omit, type_name) for name, type_name, omit in fields]
        self.by_name = {name: decoder for name, decoder, _, _ in self.fields}


def _field_specs(type_name: str) -> list[tuple[str, str, bool]]:
    fields: list[tuple[str, str, bool]] = []
    for spec in STRUCTS[type_name]:
        parts = spec.split()
        if parts[0] == ",inline":
            # An embedded struct with no JSON name: its fields are promoted, in its place.
            fields.extend(_field_specs(parts[1]))
        else:
            fields.append((parts[0], parts[1], len(parts) > 2 and parts[2] == "omitempty"))
    return fields


@functools.cache
def _struct(type_name: str) -> _Struct:
    return _Struct(type_name.split(".", 1)[1], _field_specs(type_name))


def go_type_name(type_name: str) -> str:
    """How Go's ``reflect.Type.String()`` names a type of the table (``v1.Taint``, ``[]string``)."""
    if type_name.startswith("*"):
        return "*" + go_type_name(type_name[1:])
    if type_name.startswith("[]"):
        return "[]" + go_type_name(type_name[2:])
    if type_name.startswith("map["):
        key, value = type_name[4:].split("]", 1)
        return f"map[{go_type_name(key)}]{go_type_name(value)}"
    package, _, name = type_name.partition(".")
    if not name:
        return package
    # core/v1, meta/v1, policy/v1, coordination/v1 and events/v1 are all Go packages named "v1".
    return f"v1.{name}" if package in ("core", "meta", "policy", "coordination", "events") else type_name


@functools.cache
def _compile(type_name: str) -> _Decode:
    if type_name.startswith("*"):
        return _pointer(_compile(type_name[1:]))
    if type_name.startswith("[]"):
        return _slice(type_name)
    if type_name.startswith("map["):
        return _map(type_name, type_name)
    if type_name in STRUCTS:
        return _struct_decoder(type_name)
    under = NAMED.get(type_name)
    if under is not None:
        if under in _SCALARS:
            return _scalar(under, type_name)
        if under.startswith("map["):
            return _map(under, type_name)
        return _compile(under)
    if type_name in _SCALARS:
        return _scalar(type_name, type_name)
    if type_name == "types.UID":
        return _scalar("string", type_name)
    if type_name in (_TIME, _MICRO_TIME):
        return _time_decoder(type_name)
    if type_name == _INT_OR_STRING:
        return lambda d, raw, at: (_int_or_string(raw, at), False)
    if type_name == _QUANTITY:
        return lambda d, raw, at: (_quantity(raw), False)
    if type_name == _FIELDS_V1:
        # FieldsV1 keeps its raw JSON (managedFields).
        return lambda d, raw, at: (raw, False)
    raise KeyError(f"no decoder for Go type {type_name}")


def _pointer(element: _Decode) -> _Decode:
    def decode(d: _Decoder, raw: Any, at: _At) -> tuple[Any, bool]:
        if raw is None:
            return None, True
        return element(d, raw, at)[0], False

    return decode


def _slice(type_name: str) -> _Decode:
    element_type = type_name[2:]

    def decode(d: _Decoder, raw: Any, at: _At) -> tuple[Any, bool]:
        if raw is None:
            return None, True
        if not isinstance(raw, list):
            d.mismatch(raw, type_name, at)
            return None, True
        element = _compile(element_type)
        out = [element(d, item, _At(at, _INDEX, i, at.struct))[0] for i, item in enumerate(raw)]
        # Protobuf storage gives back nil for an empty list.
        return (out, False) if out else (None, True)

    return decode


def _map(type_name: str, go_name: str) -> _Decode:
    element_type = type_name[4:].split("]", 1)[1]

    def decode(d: _Decoder, raw: Any, at: _At) -> tuple[Any, bool]:
        if raw is None:
            return None, True
        if not isinstance(raw, dict):
            d.mismatch(raw, go_name, at)
            return None, True
        element = _compile(element_type)
        out: JSON = {}
        for key, item in d.pairs(raw, at):
            # A null map value stores the element's zero value.
            out[key] = (
                element(d, item, _At(at, _KEY, key, at.struct))[0]
                if item is not None
                else zero(element_type)[0]
            )
        return (out, False) if out else (None, True)

    return decode


def _struct_decoder(type_name: str) -> _Decode:
    def decode(d: _Decoder, raw: Any, at: _At) -> tuple[Any, bool]:
        struct = _struct(type_name)
        if raw is not None and not isinstance(raw, dict):
            d.mismatch(raw, type_name, at)
            raw = None
        decoded: dict[str, tuple[Any, bool]] = {}
        if raw:
            by_name = struct.by_name
            for key, item in d.pairs(raw, at):
                decoder = by_name.get(key)
                if decoder is None:
                    d.note_strict(messages.UNKNOWN_FIELD, _At(at, _KEY, key, at.struct))
                else:
                    decoded[key] = decoder(d, item, _At(at, _FIELD, key, struct.go_name))
        out: JSON = {}
        for name, _, omitempty, field_type in struct.fields:
            found = decoded.get(name)
            value, empty = found if found is not None else zero(field_type)
            if not (omitempty and empty):
                out[name] = value
        return out, False

    return decode


_SCALAR_TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "bool": bool, "int32": int, "int64": int}


def _scalar(kind: str, type_name: str) -> _Decode:
    zero_value = _SCALAR_ZERO[kind]
    expected = _SCALAR_TYPES[kind]
    low, high = _INT_RANGES.get(kind, (0, 0))
    numeric = kind in _INT_RANGES

    def decode(d: _Decoder, raw: Any, at: _At) -> tuple[Any, bool]:
        if raw is None:
            # encoding/json ignores null for a string, bool or number.
            return zero_value
        if numeric:
            if isinstance(raw, int) and not isinstance(raw, bool) and low <= raw <= high:
                return int(raw), raw == 0
            if isinstance(raw, int | float) and not isinstance(raw, bool):
                # Not an integer to strconv.ParseInt, or out of range: Go names the literal.
                d.mismatch(raw, type_name, at, f"number {_literal(raw)}")
                return zero_value
        elif isinstance(raw, expected):
            return raw, not raw
        d.mismatch(raw, type_name, at)
        return zero_value

    return decode


def _time_decoder(type_name: str) -> _Decode:
    layout = gotime.RFC3339 if type_name == _TIME else gotime.RFC3339_MICRO

    def decode(d: _Decoder, raw: Any, at: _At) -> tuple[Any, bool]:
        # metav1.Time/MicroTime UnmarshalJSON: null is the zero time, anything but a string fails
        # json.Unmarshal into a string, and the string must parse with the type's layout. The
        # error is returned, not saved: it ends the decoding. A time is a struct, never omitted.
        if raw is None:
            return None, False
        if not isinstance(raw, str):
            raise DecodeError(at.type_error(_kind(raw), "string"))
        return _formatted_time(layout, raw), False

    return decode


@functools.lru_cache(maxsize=4096)
def _formatted_time(layout: str, text: str) -> str | None:
    # Timestamps repeat across an object's conditions and across writes; parse each text once.
    try:
        moment = gotime.parse(layout, text)
    except gotime.GoTimeParseError as exc:
        raise DecodeError(str(exc)) from None
    if moment.is_zero:
        return None
    if layout == gotime.RFC3339:
        return gotime.format_rfc3339(moment)
    return gotime.format_rfc3339_micro(moment)


def _int_or_string(raw: Any, at: _At) -> int | str:
    # intstr.IntOrString UnmarshalJSON: a quoted value is the string, anything else an int32.
    if isinstance(raw, str):
        return raw
    if raw is None:
        return 0
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        if isinstance(raw, int) and -(2**31) <= raw < 2**31:
            return int(raw)
        raise DecodeError(at.type_error(f"number {_literal(raw)}", "int32"))
    raise DecodeError(at.type_error(_kind(raw), "int32"))


_QUANTITY_SUFFIXES = {"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}


def _quantity(raw: Any) -> str:
    """resource.Quantity UnmarshalJSON's checks (parseQuantityString and the suffixer)."""
    if raw is None:
        return "0"
    text = raw if isinstance(raw, str) else _literal(raw) if isinstance(raw, int | float) else ""
    text = text.strip()
    if isinstance(raw, bool) or not text:
        raise DecodeError(messages.QUANTITY_FORMAT)
    if text == "0":
        return text
    position = 1 if text[0] in "+-" else 0
    while position < len(text) and (text[position].isdigit() or text[position] == "."):
        position += 1
    suffix_start = position
    while position < len(text) and text[position] in "eEinumkKMGTP":
        position += 1
    if position < len(text) and text[position] in "+-":
        position += 1
    while position < len(text) and text[position].isdigit():
        position += 1
    if position < len(text):
        raise DecodeError(messages.QUANTITY_FORMAT)
    suffix = text[suffix_start:]
    exponent = suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdigit()
    if suffix not in _QUANTITY_SUFFIXES and not exponent:
        raise DecodeError(messages.QUANTITY_SUFFIX)
    return text


@functools.cache
def _zero(type_name: str) -> tuple[Any, bool]:
    return _compile(type_name)(_Decoder(), None, _ROOT)


def zero(type_name: str) -> tuple[Any, bool]:
    """The Go zero value of a type as the server writes it, and whether omitempty omits it."""
    value, empty = _zero(type_name)
    # Zero structs are shared through the cache; hand out a copy a caller may change.
    return (copy_json(value) if isinstance(value, dict) else value), empty


@dataclass(frozen=True, slots=True)
class Decoded:
    """A body as the server keeps it, and the strict-decoding errors the decoder noted on the way
    (``unknown field "spec.foo"``, ``duplicate field "metadata.labels.a"``), in order."""

    object: JSON
    strict_errors: list[str]


def decode(type_name: str, body: Any) -> Decoded:
    """Decode ``body`` (from :func:`load_json`) into ``type_name`` (``core.Node``) and write it
    back as the server would; raises :class:`DecodeError` for what the decoder rejects."""
    decoder = _Decoder()
    obj, _ = _compile(type_name)(decoder, body, _ROOT)
    if decoder.saved is not None:
        raise DecodeError(decoder.saved)
    return Decoded(obj, decoder.strict)


def canonical(type_name: str, obj: JSON) -> JSON:
    """An object the store itself built, written as the server writes it.

    The simulation's own writers must produce objects the real decoder accepts: an unknown field
    or a wrong type here is a bug in the simulation, not something to drop quietly."""
    decoded = decode(type_name, obj)
    if decoded.strict_errors:
        raise DecodeError(strict_error_text(decoded.strict_errors))
    return decoded.object


def strict_error_text(errors: Iterable[str]) -> str:
    """``runtime.NewStrictDecodingError(errors).Error()``."""
    return messages.STRICT_DECODING_ERROR.format(errors=", ".join(errors))


__all__ = [
    "DecodeError",
    "Decoded",
    "canonical",
    "decode",
    "go_type_name",
    "load_json",
    "strict_error_text",
    "zero",
]
