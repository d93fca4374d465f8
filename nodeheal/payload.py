"""How big anything NodeHeal puts in a Step Functions state may be (D17), and how it is cut.

Step Functions fails an execution whose state grows past 256 KiB (``States.DataLimitExceeded``,
which no ``States.ALL`` Catch catches: no record, no notification, the lock and budget slot held
until their TTL). NodeHeal keeps the whole state under 64 KiB instead, a quarter of the limit, by
bounding every value that comes from outside and can grow:

* a condition message is cut to 4 KiB, keeping whole the lines (and the node monitoring agent's
  "; "-joined parts of a line) that carry its most severe Xids (:func:`bound_message`);
* every other free-text value (a condition reason, an API server's message about a pod) is cut to
  its own small bound (:func:`cut_text`);
* no step copies a message that is already in the state.

Sizes are counted as Step Functions counts them: the UTF-8 bytes of the value as JSON, so a quote,
a newline or a control character costs what its escape costs. Cutting never splits a character,
marks what it removed (``…[truncated N bytes]``), and is idempotent: a cut value is within its
bound, so cutting it again changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from nodeheal.conditions import Condition
from nodeheal.config import PolicySettings
from nodeheal.policy.classify import default_xid_action
from nodeheal.policy.signals import xids_in_message

#: Step Functions' limit on a state, an execution's input and a task's result: 256 KiB of UTF-8.
STATE_LIMIT_BYTES = 256 * 1024
#: What NodeHeal allows itself (D17): a quarter of the limit, so a state that grows by a step we
#: did not foresee still has three quarters of the room before the execution is lost.
STATE_BUDGET_BYTES = 64 * 1024
#: A condition message (D17). The kernel line of an Xid is under 300 bytes; 4 KiB keeps a few
#: joined lines of context.
MAX_MESSAGE_BYTES = 4096
#: A condition reason: Kubernetes' own bound for ``metav1.Condition.reason``. Reasons are
#: CamelCase words (``NvidiaXID79Error``); anything near this long is not one a policy names.
MAX_REASON_BYTES = 1024

_MARKER = "…[truncated {} bytes]"
#: A line the policy may read an Xid from: any mention of "Xid" (the classifier's pattern is
#: stricter, so every line it would read is kept) or the driver's "fallen off the bus" text,
#: which the classifier reads as Xid 79.
_XID_LINE = re.compile(r"(?<![A-Za-z0-9_])xid(?![A-Za-z])|fallen\s+off\s+the\s+bus", re.IGNORECASE)
_LINE_ENDS = ("\n", "\r")


#: The most bytes one character takes inside a JSON string: ``\uXXXX`` for a control character
#: (a UTF-8 character is at most four).
_MAX_JSON_BYTES_PER_CHARACTER = 6


def fits(text: str, limit: int) -> bool:
    """Whether ``text`` takes at most ``limit`` bytes inside a JSON document (:func:`json_bytes`),
    without encoding it when it is too short to exceed the limit."""
    return len(text) * _MAX_JSON_BYTES_PER_CHARACTER <= limit or json_bytes(text) <= limit


def json_bytes(text: str) -> int:
    """Bytes ``text`` takes inside a JSON document as Step Functions counts it (UTF-8, escaped)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text)  # nothing to escape, one byte a character
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


def state_bytes(value: object) -> int:
    """Bytes a whole state (any JSON value) takes, serialised as compactly as Step Functions does."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


def _raw_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _prefix_within(text: str, budget: int) -> str:
    """The longest prefix of ``text`` (whole characters) that costs at most ``budget`` bytes."""
    if budget <= 0:
        return ""
    low, high = 0, min(len(text), budget)  # every character costs at least one byte
    while low < high:
        middle = (low + high + 1) // 2
        if json_bytes(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def _marker_cost(size: int) -> int:
    # The marker for ``size`` dropped bytes is the longest it can be: fewer are always dropped.
    return json_bytes(_MARKER.format(size)) + json_bytes("\n")


def cut_text(text: str, limit: int) -> str:
    """``text`` when it fits in ``limit`` bytes, else its beginning and a truncation marker."""
    if fits(text, limit):
        return text
    size = _raw_bytes(text)
    kept = _prefix_within(text, limit - _marker_cost(size))
    return f"{kept}{_MARKER.format(size - _raw_bytes(kept))}"


class _Segment(NamedTuple):
    """One piece of a message that is kept or dropped whole: a line, or a "; "-separated part."""

    text: str
    line: int
    #: Text follows it on the same line: the "; " parts but a line's last, and a last line that
    #: has no line break. Kept without what follows, it needs a line break of its own.
    open: bool
    #: What the default policy's verdict on it costs (:func:`_severity_reader`), or one of
    #: ``_MENTION`` and ``_FILLER`` when the policy reads no Xid from it.
    severity: int


#: The severity of a segment that mentions an Xid the policy reads no number from.
_MENTION = -1
#: The severity of a segment the policy reads nothing from.
_FILLER = -2


def _segments(message: str, severity: Callable[[str], int]) -> list[_Segment]:
    """``message`` as segments, which joined give ``message`` back.

    The EKS node monitoring agent does not add a line when a condition faults again: while the
    status stays the same it joins the new message to the old one with "; " on the same line
    (``Fatal()``, pkg/manager/node_exporter.go). A segment is therefore a "; "-separated part of
    a line, the separator kept at its end.
    """
    segments: list[_Segment] = []
    for number, line in enumerate(message.splitlines(keepends=True)):
        parts = line.split("; ")
        texts = [f"{part}; " for part in parts[:-1]]
        if parts[-1]:
            texts.append(parts[-1])
        for index, text in enumerate(texts):
            is_open = index < len(texts) - 1 or not text.endswith(_LINE_ENDS)
            segments.append(_Segment(text, number, is_open, severity(text)))
    return segments


def _severity_reader() -> Callable[[str], int]:
    """A function giving the severity of a segment: the cost (:attr:`~nodeheal.actions.Action.cost`)
    of what the default policy decides on the most severe Xid in it, read as the classifier reads
    it (the driver's text decoded for 94/95, 144-150 and 154, "fallen off the bus" as Xid 79). An
    Xid the default cannot judge costs what the default ``unknownAction`` does."""
    unknown = PolicySettings().unknown_action
    seen: dict[str, int] = {}  # a joined message repeats its lines

    def severity(text: str) -> int:
        known = seen.get(text)
        if known is not None:
            return known
        if _XID_LINE.search(text) is None:
            found = _FILLER
        else:
            costs = [(default_xid_action(s)[0] or unknown).cost for s in xids_in_message(text)]
            found = max(costs, default=_MENTION)
        seen[text] = found
        return found

    return severity


def _cut_signal(text: str, budget: int) -> str:
    """The longest beginning of ``text`` within ``budget`` bytes that does not end inside a number
    (cut from ``Xid 154``, ``Xid 15`` would be read as another Xid)."""
    piece = _prefix_within(text, budget)
    if piece and len(piece) < len(text) and piece[-1].isdigit() and text[len(piece)].isdigit():
        piece = piece.rstrip("0123456789")
    return piece


def bound_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """A condition message cut to ``limit`` bytes, its most severe lines kept whole (D17).

    The message is read as segments: its lines, and the "; "-separated parts of a line (the EKS
    node monitoring agent joins its messages so). Segments that carry an Xid are kept first, the
    most severe first: the one on which the default policy decides the most costly action (a
    replacement before a reboot, a reboot before an alert, an alert before nothing), equals in
    message order, then those that only mention an Xid. Each is kept whole or not at all; only
    one longer than ``limit`` on its own keeps its text from the Xid on, cut at a character
    boundary and never inside a number, when the policy still reads an Xid from it. What room is
    left goes to the other segments from the top, the first that does not fit cut at a character
    boundary, and nothing after it.

    What is kept stays in its original order. A kept segment whose continuation on its line was
    dropped ends with a line break, as does every cut one, so nothing runs into what follows; a
    last line says how many bytes were removed. The classifier therefore decides on the cut
    message at least the action it decides on the most severe segment, as long as that segment
    fits in ``limit`` on its own. Severity is the default policy's (an operator's overrides are
    not read): the exporter cuts before any policy is, and no later step can recover a dropped
    line.
    """
    if fits(message, limit):
        return message
    size = _raw_bytes(message)
    budget = limit - _marker_cost(size)
    newline = json_bytes("\n")
    severity = _severity_reader()
    segments = _segments(message, severity)
    kept: dict[int, str] = {}
    #: Per line, the last segment kept and whether a line break must follow it.
    line_end: dict[int, tuple[int, bool]] = {}
    kept_bytes = 0

    def cost(index: int, text: str, *, is_open: bool) -> int:
        """What keeping ``text`` for segment ``index`` adds, its line's closing break included."""
        segment = segments[index]
        last, was_open = line_end.get(segment.line, (-1, False))
        now_open = is_open if index > last else was_open
        return json_bytes(text) + newline * (int(now_open) - int(was_open))

    def take(index: int, text: str, *, whole: bool) -> None:
        nonlocal budget, kept_bytes
        segment = segments[index]
        is_open = segment.open if whole else False
        budget -= cost(index, text if whole else f"{text}\n", is_open=is_open)
        kept[index] = text if whole else f"{text}\n"
        kept_bytes += _raw_bytes(text)
        last, _ = line_end.get(segment.line, (-1, False))
        if index > last:
            line_end[segment.line] = (index, is_open)

    room = budget
    order = sorted(range(len(segments)), key=lambda index: (-segments[index].severity, index))
    for index in order:
        segment = segments[index]
        # Every character costs at least a byte: most segments that cannot fit are seen so.
        if (
            len(segment.text) - newline <= budget
            and cost(index, segment.text, is_open=segment.open) <= budget
        ):
            take(index, segment.text, whole=True)
            continue
        if segment.severity == _FILLER:
            # The rest of the message, from the top: the first line that does not fit is cut.
            piece = _prefix_within(segment.text, budget - newline)
            if piece:
                take(index, piece, whole=False)
            break
        if len(segment.text) <= room and json_bytes(segment.text) + newline * segment.open <= room:
            continue  # fits on its own, but not beside what is more severe: never cut in half
        # Longer than the bound on its own: its text from the Xid on, when the policy still reads
        # an Xid from what fits.
        match = _XID_LINE.search(segment.text)
        tail = segment.text[match.start() :] if match is not None else segment.text
        piece = _cut_signal(tail, budget - newline)
        if not piece or severity(piece) < min(segment.severity, 0):
            continue
        take(index, piece, whole=False)
        if piece != tail:
            break
    parts: list[str] = []
    for index in sorted(kept):
        parts.append(kept[index])
        last, is_open = line_end[segments[index].line]
        if index == last and is_open:
            parts.append("\n")
    text = "".join(parts)
    if text and not text.endswith(_LINE_ENDS):
        text += "\n"
    return text + _MARKER.format(size - kept_bytes)


def bounded_condition(condition: Condition) -> Condition:
    """``condition`` with its message and reason cut to their bounds (D17); itself when both
    already fit."""
    message = bound_message(condition.message)
    reason = cut_text(condition.reason, MAX_REASON_BYTES)
    if message is condition.message and reason is condition.reason:
        return condition
    return replace(condition, message=message, reason=reason)
