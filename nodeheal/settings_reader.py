"""Strict, path-aware reading of JSON-shaped settings (cdk.json context, execution input, env).

Every settings object in NodeHeal is parsed through :class:`SettingsReader` so that a typo such as
``maxInflight`` is an error that names the path and suggests ``maxInFlight`` instead of a silently
ignored key, and so that every error message has the same shape.
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


@contextmanager
def recording_reads() -> Iterator[list[SettingRead]]:
    """Record every read of every :class:`SettingsReader` created inside the block."""
    reads: list[SettingRead] = []
    token = _RECORDING.set(reads)
    try:
        yield reads
    finally:
        _RECORDING.reset(token)


class SettingsReader:
    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"{path} must be an object, got {type(data).__name__}")
        self._data: Mapping[str, Any] = data
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

    def _get(self, key: str, default: Any) -> Any:
        self._seen.add(key)
        if key in self._data:
            return self._data[key]
        if default is _MISSING:
            raise ConfigurationError(f"{self.where(key)} is required")
        return default

    def string(self, key: str, default: Any = _MISSING, *, allow_empty: bool = False) -> str:
        self._note(key, "string", default, allow_empty=allow_empty)
        value = self._get(key, default)
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            raise ConfigurationError(f"{self.where(key)} must be a non-empty string, got {value!r}")
        return value

    def optional_string(self, key: str) -> str | None:
        self._note(key, "optional_string", None)
        value = self._get(key, None)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(f"{self.where(key)} must be a non-empty string or absent")
        return value

    def boolean(self, key: str, default: Any = _MISSING) -> bool:
        self._note(key, "boolean", default)
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise ConfigurationError(f"{self.where(key)} must be true or false, got {value!r}")
        return value

    def integer(
        self, key: str, default: Any = _MISSING, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        self._note(key, "integer", default, minimum=minimum, maximum=maximum)
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"{self.where(key)} must be an integer, got {value!r}")
        _check_range(self.where(key), value, minimum, maximum)
        return int(value)

    def number(
        self, key: str, default: Any = _MISSING, *, minimum: float | None = None, maximum: float | None = None
    ) -> float:
        self._note(key, "number", default, minimum=minimum, maximum=maximum)
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigurationError(f"{self.where(key)} must be a number, got {value!r}")
        _check_range(self.where(key), float(value), minimum, maximum)
        return float(value)

    def choice(self, key: str, choices: Iterable[str], default: Any = _MISSING) -> str:
        allowed = tuple(choices)
        self._note(key, "choice", default, choices=allowed)
        value = self._get(key, default)
        if value not in allowed:
            raise ConfigurationError(f"{self.where(key)} must be one of {', '.join(allowed)}; got {value!r}")
        return str(value)

    def string_list(self, key: str, default: Any = _MISSING, *, non_empty: bool = False) -> tuple[str, ...]:
        self._note(key, "string_list", default, non_empty=non_empty)
        value = self._get(key, default)
        if not isinstance(value, list | tuple) or not all(
            isinstance(item, str) and item.strip() for item in value
        ):
            raise ConfigurationError(f"{self.where(key)} must be a list of non-empty strings")
        if non_empty and not value:
            raise ConfigurationError(f"{self.where(key)} must list at least one value")
        return tuple(value)

    def mapping(self, key: str, default: Any = _MISSING) -> Mapping[str, Any]:
        self._note(key, "mapping", default)
        value = self._get(key, default)
        if not isinstance(value, Mapping):
            raise ConfigurationError(f"{self.where(key)} must be an object")
        return value

    def child(self, key: str, *, optional: bool = True) -> SettingsReader:
        self._note(key, "child", {} if optional else _MISSING)
        value = self._get(key, {} if optional else _MISSING)
        return SettingsReader(value, self.where(key))

    def each(self, key: str, parse: Callable[[Any, str], T], default: Any = _MISSING) -> tuple[T, ...]:
        self._note(key, "each", default)
        value = self._get(key, default)
        if not isinstance(value, list | tuple):
            raise ConfigurationError(f"{self.where(key)} must be a list")
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
        raise ConfigurationError("unknown setting(s): " + "; ".join(hints))


def _check_range(where: str, value: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and value < minimum:
        raise ConfigurationError(f"{where} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"{where} must be <= {maximum}, got {value}")
