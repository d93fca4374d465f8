"""EventBridge event pattern matching, with the reason each field did not match.

The rule that starts remediations is an EventBridge pattern, and a pattern that silently matches
nothing (a typo in a condition type, a status written ``"false"``) means GPU faults that never heal.
``nodeheal test-pattern`` runs events through this engine to say which rule matches and, when one
does not, which field refused and why. The semantics follow the EventBridge user guide ("Content
filtering in Amazon EventBridge event patterns", "Arrays in event patterns", "Matching null values
and empty strings") and aws/event-ruler, the library EventBridge matches with; the cases of both are
in ``tests/unit/fixtures/event_ruler_cases.json``, and where they differ the user guide wins:

* every field named in the pattern must match (AND); a field matches when any of the values listed
  for it matches (OR); ``"$or": [{...}, {...}]`` ORs whole sub-patterns at one level, and a field
  named both beside and inside an ``$or`` branch is taken from the later of the two in that branch
  (the guide: when a key is named more than once, "the last reference will be the one used";
  event-ruler's ``JsonRuleCompiler`` with rule overriding, its default);
* a pattern value is always a non-empty list of exact values (string, number, ``true``/``false``,
  ``null``) or one-key operator objects: ``prefix``, ``suffix``, ``equals-ignore-case`` (``prefix`` and
  ``suffix`` also take ``{"equals-ignore-case": ...}``), ``wildcard``, ``anything-but`` (a string, a
  number, a list of strings or of numbers, or ``prefix``/``suffix``/``equals-ignore-case``/``wildcard``
  with one or more strings; never ``true``/``false``/``null``, nor an empty prefix or suffix),
  ``numeric`` (one or two comparisons), ``exists`` and ``cidr`` (IPv4 and IPv6);
* an array in the event matches when any of its elements matches, arrays nested in arrays included;
  an object pattern applied to an array of objects must match within one element (event-ruler's
  array consistency: no match combines fields of different elements of one array);
* ``exists`` and every value operator look at leaf values only: a field holding an object is not a
  leaf, so ``{"exists": false}`` matches it and ``{"exists": true}`` does not;
* ``null`` and ``""`` are different values; numbers compare numerically (``300`` equals ``3.018e2``
  only when they are the same number, exactly: an account id is not rounded); string operators
  never match numbers;
* numeric matching is limited to -5.0e9..+5.0e9 (the guide): a ``numeric`` bound outside is refused
  and an event number outside never satisfies a ``numeric`` comparison, while an exact number
  (an account id) matches at any size;
* an ``$or`` may not expand to more than 1000 combinations (the guide; PutRule refuses it).

Where the documentation is silent, this engine does what moto's implementation does, so the two
can be compared on the same events (``tests/unit/test_patterns.py``): an ``anything-but`` with a
string operator matches a value that is not a string (a number does not start with any prefix).
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from nodeheal.errors import ConfigurationError

OR_KEY: Final = "$or"
_STRING_OPERATORS = ("prefix", "suffix", "equals-ignore-case", "wildcard")
_NUMERIC_OPERATORS = ("<", "<=", "=", ">=", ">")
#: The user guide's range for numeric matching ("limited to values between -5.0e9 and +5.0e9
#: inclusive"); EventBridge refuses a bound outside it and no event number outside it satisfies one.
_NUMERIC_LIMIT = 5.0e9
#: "[APIs that accept a pattern] will throw an InvalidEventPatternException if the use of $or
#: results in over 1000 rule combinations" (the guide, "Complex example with $or matching").
_MAX_OR_COMBINATIONS = 1000


class InvalidPatternError(ConfigurationError):
    """The event pattern itself is malformed (EventBridge's PutRule would refuse it)."""


class _Missing:
    """The field is absent from the event (distinct from a JSON ``null``)."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()


@dataclass(frozen=True, slots=True)
class MatchResult:
    matched: bool
    #: Why the pattern did not match, one line per refusing field (empty when it matched).
    reasons: tuple[str, ...] = ()


# -- validation ------------------------------------------------------------------------------------


def validate_pattern(pattern: Any) -> None:
    """Raise :class:`InvalidPatternError` naming the first malformed part of ``pattern``."""
    if not isinstance(pattern, Mapping):
        raise InvalidPatternError(f"an event pattern is a JSON object, got {_type_name(pattern)}")
    if not pattern:
        raise InvalidPatternError("the event pattern is empty")
    _validate_object(pattern, "")
    combinations = _combinations(pattern)
    if combinations > _MAX_OR_COMBINATIONS:
        raise InvalidPatternError(
            f"$or expands to {combinations} combinations; EventBridge allows at most {_MAX_OR_COMBINATIONS}"
        )


def _combinations(pattern: Mapping[str, Any]) -> int:
    """How many plain patterns the ``$or`` arrays expand to: alternatives add up, sibling ORs multiply."""
    count = 1
    for key, value in pattern.items():
        if key == OR_KEY:
            count *= sum(_combinations(branch) for branch in value)
        elif isinstance(value, Mapping):
            count *= _combinations(value)
    return count


def _validate_object(pattern: Mapping[str, Any], path: str) -> None:
    for key, value in pattern.items():
        where = _join(path, key)
        if key == OR_KEY:
            if not isinstance(value, list) or len(value) < 2 or not all(isinstance(b, dict) for b in value):
                raise InvalidPatternError(f"{where}: $or takes a list of at least two pattern objects")
            for index, branch in enumerate(value):
                if not branch:
                    raise InvalidPatternError(f"{where}[{index}]: an $or branch is an empty object")
                _validate_object(branch, path)
        elif isinstance(value, Mapping):
            if not value:
                raise InvalidPatternError(f"{where}: a nested pattern is an empty object")
            _validate_object(value, where)
        elif isinstance(value, list):
            if not value:
                raise InvalidPatternError(f"{where}: empty arrays are not allowed")
            for matcher in value:
                _validate_matcher(matcher, where)
        else:
            raise InvalidPatternError(f"{where}: must be an object or an array, got {_type_name(value)}")


def _validate_matcher(matcher: Any, where: str) -> None:
    if matcher is None or isinstance(matcher, str | bool):
        return
    if isinstance(matcher, int | float):
        # An exact number is matched at any size (an account id); only numeric matching has a range.
        # event-ruler's JsonRuleCompiler: "the number might not be representable as a
        # ComparableNumber, for example an AWS account number, so make that condition survivable".
        if not math.isfinite(matcher):
            raise InvalidPatternError(f"{where}: {matcher} is not a JSON number")
        return
    if not isinstance(matcher, Mapping):
        raise InvalidPatternError(f"{where}: {json.dumps(matcher)} is neither a value nor an operator")
    if len(matcher) != 1:
        raise InvalidPatternError(f"{where}: an operator object has exactly one key, got {sorted(matcher)}")
    ((operator, argument),) = matcher.items()
    if operator in ("prefix", "suffix"):
        _validate_affix(operator, argument, where)
    elif operator == "equals-ignore-case":
        _require_string(argument, where, operator)
    elif operator == "wildcard":
        _require_string(argument, where, operator)
        _wildcard_regex(argument, where)
    elif operator == "anything-but":
        _validate_anything_but(argument, where)
    elif operator == "numeric":
        _validate_numeric(argument, where)
    elif operator == "exists":
        if not isinstance(argument, bool):
            raise InvalidPatternError(f"{where}: exists takes true or false, got {json.dumps(argument)}")
    elif operator == "cidr":
        _require_string(argument, where, operator)
        try:
            ipaddress.ip_network(argument, strict=False)
        except ValueError:
            raise InvalidPatternError(f"{where}: {argument!r} is not a CIDR block") from None
    else:
        raise InvalidPatternError(f"{where}: unknown operator {operator!r}")


def _validate_affix(operator: str, argument: Any, where: str) -> None:
    if isinstance(argument, Mapping):
        if set(argument) != {"equals-ignore-case"}:
            raise InvalidPatternError(f"{where}: {operator} takes a string or {{'equals-ignore-case': ...}}")
        _require_string(argument["equals-ignore-case"], where, f"{operator}.equals-ignore-case")
        return
    _require_string(argument, where, operator)


def _validate_anything_but(argument: Any, where: str) -> None:
    """event-ruler's ``JsonRuleCompiler`` (processMatchExpression and the anything-but helpers)."""
    if isinstance(argument, str):
        return
    if _is_number(argument):
        _check_number(argument, where)
        return
    if isinstance(argument, list):
        if not argument:
            raise InvalidPatternError(f"{where}: anything-but takes a non-empty list")
        all_strings = all(isinstance(v, str) for v in argument)
        all_numbers = all(_is_number(v) for v in argument)
        if not (all_strings or all_numbers):
            raise InvalidPatternError(f"{where}: an anything-but list holds only strings or only numbers")
        for number in argument if all_numbers else ():
            _check_number(number, where)
        return
    if isinstance(argument, Mapping) and len(argument) == 1:
        ((operator, value),) = argument.items()
        if operator not in _STRING_OPERATORS:
            raise InvalidPatternError(
                f"{where}: anything-but takes a value, a list, or one of {', '.join(_STRING_OPERATORS)}"
            )
        values = value if isinstance(value, list) and value else [value]
        for item in values:
            _require_string(item, where, f"anything-but.{operator}")
            if operator in ("prefix", "suffix") and not item:
                # "Null prefix/suffix not allowed": an empty affix would exclude every string.
                raise InvalidPatternError(f"{where}: anything-but.{operator} cannot be empty")
            if operator == "wildcard":
                _wildcard_regex(item, where)
        return
    # true, false and null included: "Value of anything-but must be an array or single string/number value".
    raise InvalidPatternError(
        f"{where}: anything-but takes a string, a number or a list, not {json.dumps(argument)}"
    )


def _validate_numeric(argument: Any, where: str) -> None:
    if not isinstance(argument, list) or len(argument) not in (2, 4):
        raise InvalidPatternError(f"{where}: numeric takes [op, number] or [op, number, op, number]")
    for operator, bound in zip(argument[::2], argument[1::2], strict=True):
        if operator not in _NUMERIC_OPERATORS:
            raise InvalidPatternError(f"{where}: numeric operator {operator!r} is not one of <, <=, =, >=, >")
        if not isinstance(bound, int | float) or isinstance(bound, bool):
            raise InvalidPatternError(f"{where}: numeric bound {json.dumps(bound)} is not a number")
        _check_number(bound, where)
    if len(argument) == 4:
        lower, upper = argument[0], argument[2]
        if lower not in (">", ">=") or upper not in ("<", "<="):
            raise InvalidPatternError(f"{where}: a numeric range is [>|>=, low, <|<=, high]")
        if argument[1] >= argument[3]:
            raise InvalidPatternError(f"{where}: numeric range bottom must be below its top")


def _check_number(value: float, where: str) -> None:
    if not math.isfinite(value) or abs(value) > _NUMERIC_LIMIT:
        raise InvalidPatternError(f"{where}: {value} is outside EventBridge's numeric range (±5e9)")


def _require_string(value: Any, where: str, operator: str) -> None:
    if not isinstance(value, str):
        raise InvalidPatternError(f"{where}: {operator} takes a string, got {json.dumps(value)}")


@cache
def _wildcard_regex(pattern: str, where: str = "") -> re.Pattern[str]:
    """``*`` is any run of characters (``/`` included); ``\\*`` and ``\\\\`` are literal."""
    parts: list[str] = []
    index = 0
    previous_star = False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            following = pattern[index + 1 : index + 2]
            if following not in ("*", "\\"):
                raise InvalidPatternError(
                    f"{where}: wildcard {pattern!r} escapes something other than * or \\"
                )
            parts.append(re.escape(following))
            index += 2
            previous_star = False
            continue
        if char == "*":
            if previous_star:
                raise InvalidPatternError(f"{where}: wildcard {pattern!r} has consecutive *")
            parts.append(".*")
            previous_star = True
        else:
            parts.append(re.escape(char))
            previous_star = False
        index += 1
    return re.compile("".join(parts), re.DOTALL)


# -- matching --------------------------------------------------------------------------------------


def match(pattern: Mapping[str, Any], event: Any) -> MatchResult:
    """Whether ``event`` matches ``pattern``; validates the pattern first."""
    validate_pattern(pattern)
    reasons = _match_object(pattern, event, "")
    return MatchResult(matched=not reasons, reasons=tuple(reasons))


def _match_object(pattern: Mapping[str, Any], value: Any, path: str) -> list[str]:
    """The reasons ``value`` (an object, an array of objects, or anything else) does not match."""
    if isinstance(value, list):
        # Arrays nested in arrays are crushed out too (event-ruler's README, "JSON Array Matching").
        objects = [item for item in _flatten(value) if isinstance(item, dict)]
        if not objects:
            return _match_object(pattern, MISSING, path)
        first: list[str] | None = None
        for item in objects:
            reasons = _match_object(pattern, item, path)
            if not reasons:
                return []
            first = first if first is not None else reasons
        assert first is not None
        if len(objects) == 1:
            return first
        return [
            f"{_label(path)}: no element of the array matches every field; first element: {'; '.join(first)}"
        ]
    fields = value if isinstance(value, dict) else {}
    folded, alternatives = _or_alternatives(pattern)
    found: list[str] = []
    for key, sub in pattern.items():
        if key == OR_KEY:
            found.extend(_match_or(alternatives, value, path))
        elif key in folded:
            continue
        elif isinstance(sub, Mapping):
            found.extend(_match_object(sub, fields.get(key, MISSING), _join(path, key)))
        else:
            reason = _match_leaf(sub, fields.get(key, MISSING), _join(path, key))
            if reason:
                found.append(reason)
    return found


def _flatten(items: list[Any]) -> list[Any]:
    flat: list[Any] = []
    for item in items:
        flat.extend(_flatten(item) if isinstance(item, list) else [item])
    return flat


def _or_alternatives(pattern: Mapping[str, Any]) -> tuple[frozenset[str], list[Mapping[str, Any]]]:
    """The ``$or`` branches at this level, each with the fields beside the ``$or`` that it also names.

    Those fields are folded into every branch (and skipped beside it) in document order, so the later
    of two references to a path wins within a branch, as event-ruler compiles them; fields of one
    object folded together also keep array consistency. Without such overlap the branches are the
    pattern's own, and the explanation reads as written.
    """
    branches: list[Mapping[str, Any]] = pattern.get(OR_KEY, [])
    folded = frozenset(key for key in pattern if key != OR_KEY and any(key in branch for branch in branches))
    if not folded:
        return folded, branches
    alternatives: list[Mapping[str, Any]] = []
    for branch in branches:
        merged: dict[str, Any] = {}
        for key, sub in pattern.items():
            if key == OR_KEY:
                merged = _overlay(merged, branch)
            elif key in folded:
                merged = _overlay(merged, {key: sub})
        alternatives.append(merged)
    return folded, alternatives


def _overlay(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` written after ``base``: objects merge path by path, a later value list replaces.

    A value list and an object under one key are two paths to event-ruler (``a`` and ``a.b``); a JSON
    object holds one of them, so here too the later one is kept.
    """
    merged = dict(base)
    for key, sub in top.items():
        if key == OR_KEY and OR_KEY in merged:
            # Two ORs over the same object must both hold: the second nests inside each branch of the first.
            merged[OR_KEY] = [_overlay(branch, {OR_KEY: sub}) for branch in merged[OR_KEY]]
        elif isinstance(sub, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _overlay(merged[key], sub)
        else:
            merged.pop(key, None)
            merged[key] = sub
    return merged


def _match_or(branches: Sequence[Mapping[str, Any]], value: Any, path: str) -> list[str]:
    failures = []
    for index, branch in enumerate(branches, start=1):
        reasons = _match_object(branch, value, path)
        if not reasons:
            return []
        failures.append(f"[{index}] {'; '.join(reasons)}")
    where = f"{path}.$or" if path else "$or"
    return [f"{where}: none of the {len(branches)} alternatives matches: {' | '.join(failures)}"]


def _leaf_values(value: Any) -> list[Any]:
    """The leaf values a field contributes: none when missing or an object, the elements of an array."""
    if value is MISSING or isinstance(value, dict):
        return []
    if isinstance(value, list):
        leaves: list[Any] = []
        for item in value:
            leaves.extend(_leaf_values(item))
        return leaves
    return [value]


def _match_leaf(matchers: Sequence[Any], value: Any, path: str) -> str:
    leaves = _leaf_values(value)
    for matcher in matchers:
        if isinstance(matcher, Mapping) and "exists" in matcher:
            if bool(leaves) == matcher["exists"]:
                return ""
            continue
        if any(_matches(matcher, leaf) for leaf in leaves):
            return ""
    return f"{path}: {_describe_value(value)}{_describe_matchers(matchers)}"


def _matches(matcher: Any, leaf: Any) -> bool:
    if not isinstance(matcher, Mapping):
        return _equal(matcher, leaf)
    ((operator, argument),) = matcher.items()
    if operator in ("prefix", "suffix", "equals-ignore-case", "wildcard"):
        return _string_operator(operator, argument, leaf)
    if operator == "anything-but":
        return _anything_but(argument, leaf)
    if operator == "numeric":
        return _numeric(argument, leaf)
    if operator == "cidr":
        return _cidr(argument, leaf)
    return False


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(expected: Any, leaf: Any) -> bool:
    if expected is None or leaf is None:
        return expected is None and leaf is None
    if isinstance(expected, bool) or isinstance(leaf, bool):
        return isinstance(expected, bool) and isinstance(leaf, bool) and expected == leaf
    if _is_number(expected):
        # Python compares ints and floats exactly, so two account ids that share a float stay apart.
        return _is_number(leaf) and expected == leaf
    return isinstance(leaf, str) and expected == leaf


def _string_operator(operator: str, argument: Any, leaf: Any) -> bool:
    if not isinstance(leaf, str):
        return False
    ignore_case = isinstance(argument, Mapping)
    expected: str = argument["equals-ignore-case"] if ignore_case else argument
    if operator == "equals-ignore-case":
        return leaf.lower() == expected.lower()
    if operator == "wildcard":
        return _wildcard_regex(expected).fullmatch(leaf) is not None
    subject, affix = (leaf.lower(), expected.lower()) if ignore_case else (leaf, expected)
    return subject.startswith(affix) if operator == "prefix" else subject.endswith(affix)


def _anything_but(argument: Any, leaf: Any) -> bool:
    if isinstance(argument, list):
        return not any(_equal(item, leaf) for item in argument)
    if isinstance(argument, Mapping):
        ((operator, value),) = argument.items()
        values = value if isinstance(value, list) else [value]
        if not isinstance(leaf, str):
            return True
        return not any(_string_operator(operator, item, leaf) for item in values)
    return not _equal(argument, leaf)


def _numeric(argument: Sequence[Any], leaf: Any) -> bool:
    # Numeric matching works on -5.0e9..+5.0e9 only; event-ruler before its float64 range (#188) did
    # not compare a number outside, and the user guide still states that range.
    if not _is_number(leaf) or abs(leaf) > _NUMERIC_LIMIT:
        return False
    number = float(leaf)
    for operator, bound in zip(argument[::2], argument[1::2], strict=True):
        limit = float(bound)
        ok = {
            "<": number < limit,
            "<=": number <= limit,
            "=": number == limit,
            ">=": number >= limit,
            ">": number > limit,
        }[operator]
        if not ok:
            return False
    return True


def _cidr(argument: str, leaf: Any) -> bool:
    if not isinstance(leaf, str):
        return False
    try:
        address = ipaddress.ip_address(leaf)
    except ValueError:
        return False
    network = ipaddress.ip_network(argument, strict=False)
    return address.version == network.version and address in network


# -- explanations ----------------------------------------------------------------------------------


def _describe_value(value: Any) -> str:
    if value is MISSING:
        return "is missing"
    if isinstance(value, dict):
        return "is an object, not a value"
    if isinstance(value, list) and not _leaf_values(value):
        return "is an empty array"
    return f"is {json.dumps(value)}"


def _describe_matchers(matchers: Sequence[Any]) -> str:
    exact = [m for m in matchers if not isinstance(m, Mapping)]
    operators = [m for m in matchers if isinstance(m, Mapping)]
    parts = []
    if exact:
        parts.append(f"one of {json.dumps(exact)}" if len(exact) > 1 else json.dumps(exact[0]))
    parts.extend(_describe_operator(m) for m in operators)
    return "; expected " + " or ".join(parts)


def _describe_operator(matcher: Mapping[str, Any]) -> str:
    ((operator, argument),) = matcher.items()
    if operator == "exists":
        return "the field to exist" if argument else "the field to be absent"
    if operator == "numeric":
        bounds = " and ".join(
            f"{op} {bound}" for op, bound in zip(argument[::2], argument[1::2], strict=True)
        )
        return f"a number {bounds}"
    return f"{operator} {json.dumps(argument)}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _label(path: str) -> str:
    return path or "(event)"


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )
