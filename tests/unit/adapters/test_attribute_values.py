"""The ledger's DynamoDB codec against boto3's, which it replaces in the Lambda functions.

The ledger used to write ``TypeSerializer().serialize(_to_dynamo(value))`` and read
``_from_dynamo(TypeDeserializer().deserialize(value))``. Items already in deployed tables were
written that way, so the codec must write the same wire format and read it back the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer
from hypothesis import given
from hypothesis import strategies as st

from nodeheal.aws.attribute_values import (
    deserialize_item,
    from_attribute,
    serialize_item,
    to_attribute,
)


def boto3_write(value: Any) -> Any:
    """What the ledger wrote before: floats as exact decimals, then boto3's serializer."""

    def to_dynamo(value: Any) -> Any:
        if isinstance(value, float):
            return Decimal(str(value))
        if isinstance(value, Mapping):
            return {str(k): to_dynamo(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [to_dynamo(v) for v in value]
        return value

    return TypeSerializer().serialize(to_dynamo(value))


def boto3_read(attribute: Any) -> Any:
    """What the ledger read before: boto3's deserializer, then whole numbers as int."""

    def from_dynamo(value: Any) -> Any:
        if isinstance(value, Decimal):
            return int(value) if value == value.to_integral_value() else float(value)
        if isinstance(value, Mapping):
            return {str(k): from_dynamo(v) for k, v in value.items()}
        if isinstance(value, list):
            return [from_dynamo(v) for v in value]
        if isinstance(value, Binary):
            return value.value
        return value

    return from_dynamo(TypeDeserializer().deserialize(attribute))


#: What the ledger stores: JSON-like documents (timestamps as text, counters, durations, flags).
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)
    | st.text(max_size=20)
)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def outcome(write: Any, value: Any) -> tuple[str, Any]:
    """A write's result, or the kind of its refusal: a number DynamoDB cannot hold exactly (too
    many digits, too small, too large) is refused by both codecs, never rounded."""
    try:
        return "written", write(value)
    except ArithmeticError:
        return "refused", "number"
    except TypeError:
        return "refused", "type"


@given(documents)
def test_writes_what_boto3_wrote(value: Any) -> None:
    assert outcome(to_attribute, value) == outcome(boto3_write, value)


@given(documents)
def test_reads_what_boto3_wrote_as_the_ledger_read_it(value: Any) -> None:
    status, written = outcome(boto3_write, value)
    if status == "written":
        assert from_attribute(written) == boto3_read(written)


@given(st.dictionaries(st.text(min_size=1, max_size=8), documents, max_size=6))
def test_an_item_round_trips(item: dict[str, Any]) -> None:
    status, written = outcome(lambda item: {key: boto3_write(value) for key, value in item.items()}, item)
    if status == "written":
        assert deserialize_item(serialize_item(item)) == deserialize_item(written)
    else:
        assert outcome(serialize_item, item)[0] == "refused"


@pytest.mark.parametrize(
    "value",
    [
        {"b"},
        {1, 2},
        {Decimal("1.5")},
        {b"x", b"y"},
        b"raw",
        (1, "two"),
    ],
)
def test_sets_bytes_and_tuples_as_boto3(value: Any) -> None:
    ours = to_attribute(value)
    theirs = TypeSerializer().serialize(value)
    # Set members come out in the set's own order: compare them as sets.
    for kind in ("SS", "NS", "BS"):
        if kind in theirs:
            assert set(ours[kind]) == set(theirs[kind])
            return
    assert ours == theirs


def test_number_sets_read_back_as_numbers() -> None:
    assert from_attribute({"NS": ["1", "2.5"]}) == {1, 2.5}
    assert from_attribute({"BS": [b"a"]}) == {b"a"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("inf"), "infinity"),
        (Decimal("NaN"), "NaN"),
        (Decimal("1" * 39), "Inexact|Rounded"),
        (1e-200, "Underflow"),
        (object(), "Unsupported type"),
        ({1, "a"}, "one kind"),
        (set(), "one kind"),
    ],
)
def test_values_dynamodb_cannot_hold_are_refused(value: Any, message: str) -> None:
    with pytest.raises((TypeError, ArithmeticError), match=f"(?i){message}"):
        to_attribute(value)


def test_an_attribute_value_names_exactly_one_known_type() -> None:
    with pytest.raises(TypeError, match="exactly one type key"):
        from_attribute({})
    with pytest.raises(TypeError, match="exactly one type key"):
        from_attribute({"S": "a", "N": "1"})
    with pytest.raises(TypeError, match="DynamoDB type X is not supported"):
        from_attribute({"X": "a"})
