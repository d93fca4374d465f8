"""DynamoDB's AttributeValue format, to and from plain Python values, without boto3.

The ledger speaks to DynamoDB through a botocore client, whose items are AttributeValue maps
(``{"S": "..."}``, ``{"N": "42"}``, ``{"M": {...}}``). boto3 ships a codec for them
(``boto3.dynamodb.types``), but importing any part of boto3 imports all of it, s3transfer
included: over 100 ms of every Lambda cold start for two small functions. This module is that
codec with boto3's rules (the same number context, the same errors), plus the ledger's own
conventions: floats are written as exact decimals, and numbers come back as ``int`` when whole and
``float`` otherwise, so nothing above the ledger ever sees a ``Decimal``.

https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_AttributeValue.html
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from decimal import Clamped, Context, Decimal, Inexact, Overflow, Rounded, Underflow
from typing import Any

#: DynamoDB's numbers: 38 significant digits, exponents -130..+125; anything that would be rounded
#: or clamped is refused rather than silently changed (the same context as boto3's).
DYNAMODB_CONTEXT = Context(
    Emin=-128,
    Emax=126,
    prec=38,
    traps=[Clamped, Overflow, Inexact, Rounded, Underflow],
)


def _number_text(value: int | Decimal | float) -> str:
    if isinstance(value, float):
        # str() is the shortest text that reads back as the same float: 0.1 stays 0.1.
        value = Decimal(str(value))
    text = str(DYNAMODB_CONTEXT.create_decimal(value))
    if text in ("Infinity", "-Infinity", "NaN", "-NaN", "sNaN", "-sNaN"):
        raise TypeError(f"DynamoDB has no number for {text}")
    return text


def _is_number(value: object) -> bool:
    return isinstance(value, int | Decimal | float) and not isinstance(value, bool)


def to_attribute(value: Any) -> dict[str, Any]:
    """One Python value as an AttributeValue. Sets become SS/NS/BS (all members of one kind);
    a set of mixed kinds, or a type DynamoDB has no form for, raises TypeError."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if _is_number(value):
        return {"N": _number_text(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bytes | bytearray):
        return {"B": bytes(value)}
    if isinstance(value, Set):
        if value and all(_is_number(member) for member in value):
            return {"NS": [_number_text(member) for member in value]}
        if value and all(isinstance(member, str) for member in value):
            return {"SS": list(value)}
        if value and all(isinstance(member, bytes | bytearray) for member in value):
            return {"BS": [bytes(member) for member in value]}
        raise TypeError(f"a DynamoDB set holds non-empty members of one kind: {value!r}")
    if isinstance(value, Mapping):
        return {"M": {str(key): to_attribute(member) for key, member in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [to_attribute(member) for member in value]}
    raise TypeError(f'Unsupported type "{type(value).__name__}" for value "{value!r}"')


def _number(text: str) -> int | float:
    number = DYNAMODB_CONTEXT.create_decimal(text)
    return int(number) if number == number.to_integral_value() else float(number)


def from_attribute(attribute: Mapping[str, Any]) -> Any:
    """One AttributeValue as a Python value (the inverse of :func:`to_attribute`)."""
    if len(attribute) != 1:
        raise TypeError(f"an AttributeValue has exactly one type key: {dict(attribute)!r}")
    ((kind, value),) = attribute.items()
    if kind == "NULL":
        return None
    if kind in ("S", "BOOL"):
        return value
    if kind == "N":
        return _number(value)
    if kind == "B":
        return bytes(value)
    if kind == "M":
        return {key: from_attribute(member) for key, member in value.items()}
    if kind == "L":
        return [from_attribute(member) for member in value]
    if kind == "SS":
        return set(value)
    if kind == "NS":
        return {_number(member) for member in value}
    if kind == "BS":
        return {bytes(member) for member in value}
    raise TypeError(f"DynamoDB type {kind} is not supported")


def serialize_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item (attribute name -> Python value) in DynamoDB's wire format."""
    return {key: to_attribute(value) for key, value in item.items()}


def deserialize_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item in DynamoDB's wire format as attribute name -> Python value."""
    return {key: from_attribute(value) for key, value in item.items()}
