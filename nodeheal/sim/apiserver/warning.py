"""The per-request ``Warning`` header recorder of the real apiserver.

Each warning is written once (duplicates are dropped), as ``299 - "<text>"`` with ``"`` and
``\\`` escaped; past 4096 runes of text in one response every warning is cut to 256 runes
(https://github.com/kubernetes/apiserver/blob/v0.33.1/pkg/endpoints/filters/warning.go and
https://github.com/kubernetes/apimachinery/blob/v0.33.1/pkg/util/net/http.go ``NewWarningHeader``).
"""

from __future__ import annotations

from nodeheal.sim.apiserver import messages

_TRUNCATE_AT_TOTAL_RUNES = 4 * 1024
_TRUNCATE_ITEM_RUNES = 256


def warning_header(text: str) -> str:
    """``NewWarningHeader(299, "", text)``: makeQuotedString escapes only ``"`` and ``\\``."""
    quoted = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return messages.WARNING_HEADER.format(quoted_text=quoted)


class WarningRecorder:
    """Collects the warnings of one request; :attr:`headers` are the ``Warning`` values to send."""

    def __init__(self) -> None:
        self._recorded: set[str] = set()
        self._ordered: list[str] = []
        self._written = 0
        self._truncating = False
        self.headers: list[str] = []

    def add(self, text: str) -> None:
        if not text or (self._written >= _TRUNCATE_AT_TOTAL_RUNES and self._truncating):
            return
        if text in self._recorded:
            return
        self._recorded.add(text)
        self._ordered.append(text)
        if self._truncating and len(text) > _TRUNCATE_ITEM_RUNES:
            text = text[:_TRUNCATE_ITEM_RUNES]
        if self._written + len(text) <= _TRUNCATE_AT_TOTAL_RUNES or self._truncating:
            self._written += len(text)
            self.headers.append(warning_header(text))
            return
        # Over the limit: start truncating and write every warning so far again, cut short.
        self._truncating = True
        self._written = 0
        self.headers = []
        for earlier in self._ordered:
            cut = earlier[:_TRUNCATE_ITEM_RUNES]
            self._written += len(cut)
            self.headers.append(warning_header(cut))
