"""Strict, path-aware reading of JSON-shaped settings (cdk.json context, execution input, env).

Every settings object in NodeHeal is parsed through :class:`SettingsReader` so that a typo such as
``maxInflight`` is an error that names the path and suggests ``maxInFlight`` instead of a silently
ignored key, and so that every error message has the same shape: it starts with the key's path.

A whole configuration is parsed inside :func:`all_problems`: a reader then records each problem
instead of raising, a value it refused takes its default (so the parse goes on and the checks
after it still run), and the block raises one :class:`ConfigurationError` listing every problem.
A person fixes a file in one pass, not one error per ``cdk synth``. Outside the block a reader
raises at the first problem.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nodeheal.errors import ConfigurationError

T = TypeVar("T")
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class SettingRead:
    """One key a parser read, and how: what :mod:`nodeheal.contracts.config_schema` turns into the
    JSON Schema of cdk.json, so the schema is the parser's own account of what it accepts."""

    #: The reader's path (``policy.nodePools.gpu``) and the key it read there.
    path: str
    key: str
    #: The reader method: string, optional_string, boolean, integer, number, choice, string_list,
    #: mapping, child, each; or finish (the object at ``path`` refuses keys nobody read).
    kind: str
    #: The default, or None with ``required`` set.
    default: Any = None
    required: bool = False
    constraints: dict[str, Any] = field(default_factory=dict)


#: The reads of the parsers running inside :func:`recording_reads`, in order; None outside it.
_RECORDING: ContextVar[list[SettingRead] | None] = ContextVar("settings_reads", default=None)
#: The problems found inside :func:`all_problems`, in the order found; None outside it.
_PROBLEMS: ContextVar[list[str] | None] = ContextVar("settings_problems", default=None)


@contextmanager
def recording_reads() -> Iterator[list[SettingRead]]:
    """Record every read of every :class:`SettingsReader` created inside the block."""
    reads: list[SettingRead] = []
    token = _RECORDING.set(reads)
    try:
        yield reads
    finally:
        _RECORDING.reset(token)


@contextmanager
def all_problems() -> Iterator[None]:
    """Parse a whole configuration: every problem found inside is recorded, and the block raises one
    ConfigurationError listing them all (each starting with its key's path) when it ends.

    A ConfigurationError raised inside the block joins the list. Nested blocks are one: only the
    outermost raises.
    """
    if _PROBLEMS.get() is not None:
        yield
        return
    problems: list[str] = []
    token = _PROBLEMS.set(problems)
    try:
        yield
    except ConfigurationError as exc:
        problems.append(str(exc))
    finally:
        _PROBLEMS.reset(token)
    if len(problems) == 1:
        raise ConfigurationError(problems[0])
    if problems:
        raise ConfigurationError(
            f"{len(problems)} problems (a refused value counts as its default in the checks after it):\n"
            + "\n".join(f"  - {problem}" for problem in problems)
        )


def problem(message: str) -> None:
    """Report a problem: recorded inside :func:`all_problems`, raised outside it."""
    problems = _PROBLEMS.get()
    if problems is None:
        raise ConfigurationError(message)
    problems.append(message)


def salvage(parse: Callable[[], T], fallback: T) -> T:
    """``parse()``; when it raises a ConfigurationError, report it and go on with ``fallback``."""
    try:
        return parse()
    except ConfigurationError as exc:
        problem(str(exc))
        return fallback


class SettingsReader:
    def __init__(self, data: Any, path: str, *, report: bool = True) -> None:
        """``report`` False: ``data`` is already reported missing (a required object)."""
        #: False when ``data`` is not an object: that is reported once, and the reads take their
        #: defaults without reporting each required key as missing too.
        self._usable = isinstance(data, Mapping)
        if not self._usable and report:
            problem(f"{path} must be an object, got {type(data).__name__}")
        self._data: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
        self._path = path
        self._seen: set[str] = set()

    def where(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def key_names(self) -> list[str]:
        return [str(key) for key in self._data]

    def _note(self, key: str, kind: str, default: Any, **constraints: Any) -> None:
        reads = _RECORDING.get()
        if reads is not None:
            required = default is _MISSING
            reads.append(
                SettingRead(self._path, key, kind, None if required else default, required, constraints)
            )

    def _read(self, key: str, default: Any, fallback: Any, refusal: Callable[[Any], str | None]) -> Any:
        """The value at ``key``, or ``default`` when it is absent. A value ``refusal`` finds fault with
        (it says what is wrong, after the key's path) is reported and replaced by its default, or by
        ``fallback`` for a required key: a value of the right type that no later check refuses again."""
        self._seen.add(key)
        if key not in self._data:
            if default is not _MISSING:
                return default
            if self._usable:
                problem(f"{self.where(key)} is required")
            return fallback
        value = self._data[key]
        fault = refusal(value)
        if fault is None:
            return value
        problem(f"{self.where(key)} {fault}")
        return fallback if default is _MISSING else default

    def refuse(self, key: str, message: str) -> None:
        """Report a key as a problem of its own, so :meth:`finish` does not report it as unknown."""
        self._seen.add(key)
        problem(message)

    def string(self, key: str, default: Any = _MISSING, *, allow_empty: bool = False) -> str:
        self._note(key, "string", default, allow_empty=allow_empty)
        return str(
            self._read(
                key,
                default,
                "",
                lambda v: None
                if isinstance(v, str) and (allow_empty or v.strip())
                else f"must be a non-empty string, got {v!r}",
            )
        )

    def optional_string(self, key: str) -> str | None:
        self._note(key, "optional_string", None)
        value = self._read(
            key,
            None,
            None,
            lambda v: None
            if v is None or (isinstance(v, str) and v.strip())
            else "must be a non-empty string or absent",
        )
        return None if value is None else str(value)

    def boolean(self, key: str, default: Any = _MISSING) -> bool:
        self._note(key, "boolean", default)
        return bool(
            self._read(
                key,
                default,
                False,
                lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r}",
            )
        )

    def integer(
        self, key: str, default: Any = _MISSING, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        self._note(key, "integer", default, minimum=minimum, maximum=maximum)

        def refusal(value: Any) -> str | None:
            if isinstance(value, bool) or not isinstance(value, int):
                return f"must be an integer, got {value!r}"
            return _out_of_range(value, minimum, maximum)

        return int(self._read(key, default, minimum or 0, refusal))

    def number(
        self, key: str, default: Any = _MISSING, *, minimum: float | None = None, maximum: float | None = None
    ) -> float:
        self._note(key, "number", default, minimum=minimum, maximum=maximum)

        def refusal(value: Any) -> str | None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"must be a number, got {value!r}"
            return _out_of_range(float(value), minimum, maximum)

        return float(self._read(key, default, minimum or 0.0, refusal))

    def choice(self, key: str, choices: Iterable[str], default: Any = _MISSING) -> str:
        allowed = tuple(choices)
        self._note(key, "choice", default, choices=allowed)
        return str(
            self._read(
                key,
                default,
                allowed[0],
                lambda v: None if v in allowed else f"must be one of {', '.join(allowed)}; got {v!r}",
            )
        )

    def string_list(self, key: str, default: Any = _MISSING, *, non_empty: bool = False) -> tuple[str, ...]:
        self._note(key, "string_list", default, non_empty=non_empty)

        def refusal(value: Any) -> str | None:
            if not isinstance(value, list | tuple) or not all(
                isinstance(item, str) and item.strip() for item in value
            ):
                return "must be a list of non-empty strings"
            return "must list at least one value" if non_empty and not value else None

        return tuple(self._read(key, default, (), refusal))

    def mapping(self, key: str, default: Any = _MISSING) -> Mapping[str, Any]:
        self._note(key, "mapping", default)
        value: Mapping[str, Any] = self._read(
            key, default, {}, lambda v: None if isinstance(v, Mapping) else "must be an object"
        )
        return value

    def child(self, key: str, *, optional: bool = True) -> SettingsReader:
        self._note(key, "child", {} if optional else _MISSING)
        value = self._read(key, {} if optional else _MISSING, _MISSING, lambda _: None)
        return SettingsReader(value, self.where(key), report=value is not _MISSING)

    def each(self, key: str, parse: Callable[[Any, str], T], default: Any = _MISSING) -> tuple[T, ...]:
        self._note(key, "each", default)
        value = self._read(
            key, default, (), lambda v: None if isinstance(v, list | tuple) else "must be a list"
        )
        return tuple(parse(item, f"{self.where(key)}[{index}]") for index, item in enumerate(value))

    def finish(self) -> None:
        """Reject keys nobody read: they are typos or settings this version does not know."""
        self._note("", "finish", None)
        unknown = sorted(set(self._data) - self._seen)
        if not unknown:
            return
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(self._seen), n=1)
            hints.append(f"{self.where(key)}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        problem("unknown setting(s): " + "; ".join(hints))


def _out_of_range(value: float, minimum: float | None, maximum: float | None) -> str | None:
    if minimum is not None and value < minimum:
        return f"must be >= {minimum}, got {value}"
    if maximum is not None and value > maximum:
        return f"must be <= {maximum}, got {value}"
    return None
