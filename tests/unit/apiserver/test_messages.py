"""Server strings live in one module (nodeheal.sim.apiserver.messages), each with its source.

A test that spelled out a server message itself would pin the fake's wording instead of the real
server's; when the wording is corrected in `messages`, such a test would keep the old one alive.
So no file under tests/ may contain a server string (or the literal part of a template) of its own.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

from nodeheal.sim.apiserver import messages

TESTS = Path(__file__).resolve().parents[2]
#: Shorter literal parts ("Forbidden", "patch") are ordinary words, not server sentences.
MIN_FRAGMENT = 24


def _fragments(text: str) -> list[str]:
    """The literal parts of a ``str.format`` template (all of a plain string)."""
    literal = [part for part, _, _, _ in string.Formatter().parse(text) if part]
    return [part.strip() for part in literal if len(part.strip()) >= MIN_FRAGMENT]


def _server_strings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in vars(messages).items():
        if name.isupper() and isinstance(value, str):
            fragments = _fragments(value)
            if fragments:
                found[name] = fragments
    return found


def test_every_server_string_has_its_source_next_to_it() -> None:
    source = Path(messages.__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    for name in _server_strings():
        at = next(i for i, line in enumerate(lines) if re.match(rf"{name}\b\s*(:.*)?=", line))
        # The paragraph it is in (its own comment, or the one a group of constants shares) names
        # the source: the lines above it up to the previous blank line.
        start = at
        while start > 0 and lines[start - 1].strip():
            start -= 1
        above = "\n".join(lines[start:at])
        assert "https://github.com/" in above or "(Go's src/" in above, f"{name} has no source link above it"


def test_no_test_spells_out_a_server_string() -> None:
    strings = _server_strings()
    assert strings, "messages has no server strings: the check below would prove nothing"
    offenders: list[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        for name, fragments in strings.items():
            for fragment in fragments:
                if fragment in text:
                    offenders.append(f"{path.relative_to(TESTS.parent)}: {fragment!r} (messages.{name})")
    assert offenders == [], "import these from nodeheal.sim.apiserver.messages instead:\n" + "\n".join(
        offenders
    )
