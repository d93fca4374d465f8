"""Field errors as k8s.io/apimachinery/pkg/util/validation/field writes them, and 422 Invalid.

A field error renders as ``<field>: <type>[: <value>][: <detail>]``, the value in Go's ``%q``
for a string, ``%v`` for an int or bool and ``%#v`` for anything else (``Error.ErrorBody``:
https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/util/validation/field/errors.go).
``errors.NewInvalid`` keeps every cause, duplicates included, in ``details.causes``, but its message
names each distinct one once, in brackets when there are several
(https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/api/errors/errors.go and
pkg/util/errors/errors.go ``aggregate.Error``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nodeheal.sim.apiserver import messages
from nodeheal.sim.apiserver.status import ApiError, status_body

INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"
DUPLICATE = "FieldValueDuplicate"
NOT_SUPPORTED = "FieldValueNotSupported"
FORBIDDEN = "FieldValueForbidden"
TOO_LONG = "FieldValueTooLong"

_TYPE_TEXT = {
    INVALID: messages.FIELD_VALUE_INVALID,
    REQUIRED: messages.FIELD_VALUE_REQUIRED,
    DUPLICATE: messages.FIELD_VALUE_DUPLICATE,
    NOT_SUPPORTED: messages.FIELD_VALUE_NOT_SUPPORTED,
    FORBIDDEN: messages.FIELD_VALUE_FORBIDDEN,
    TOO_LONG: messages.FIELD_VALUE_TOO_LONG,
}
# ErrorBody leaves the value out for these types.
_NO_VALUE = (REQUIRED, FORBIDDEN, TOO_LONG)

_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (``%q``): printable runes as they are, the rest escaped."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One ``field.Error``; ``value`` is already rendered as Go prints it (see :func:`go_quote`)."""

    type: str
    field: str
    value: str
    detail: str = ""

    def body(self) -> str:
        """``Error.ErrorBody()``."""
        text = _TYPE_TEXT[self.type]
        if self.type not in _NO_VALUE:
            text = f"{text}: {self.value}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def invalid(field: str, value: str, detail: str) -> FieldError:
    return FieldError(INVALID, field, value, detail)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, field, "", detail)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(FORBIDDEN, field, "", detail)


def duplicate(field: str, value: str, detail: str = "") -> FieldError:
    return FieldError(DUPLICATE, field, value, detail)


def not_supported(field: str, value: str, supported: Sequence[str]) -> FieldError:
    detail = messages.NOT_SUPPORTED_DETAIL.format(values=", ".join(go_quote(v) for v in supported))
    return FieldError(NOT_SUPPORTED, field, value, detail if supported else "")


def too_long(field: str, max_bytes: int) -> FieldError:
    return FieldError(TOO_LONG, field, "", messages.TOO_LONG_DETAIL.format(max=max_bytes))


def invalid_error(kind: str, group: str, name: str, errors: Iterable[FieldError]) -> ApiError:
    """``errors.NewInvalid(schema.GroupKind{group, kind}, name, errors)``: 422 Invalid."""
    errors = list(errors)
    qualified = f"{kind}.{group}" if group else kind
    distinct: list[str] = []
    for error in errors:
        if str(error) not in distinct:
            distinct.append(str(error))
    causes = distinct[0] if len(distinct) == 1 else "[" + ", ".join(distinct) + "]"
    details: dict[str, object] = {}
    # StatusDetails and StatusCause fields are all omitempty.
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    details["causes"] = [
        {"reason": e.type, "message": e.body(), **({"field": e.field} if e.field else {})} for e in errors
    ]
    message = messages.INVALID.format(kind=qualified, quoted_name=go_quote(name), causes=causes)
    return ApiError(status_body(422, "Invalid", message, details))
