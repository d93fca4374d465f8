"""How big anything NodeHeal puts in a Step Functions state may be (D17), and how it is cut.

Step Functions fails an execution whose state grows past 256 KiB (``States.DataLimitExceeded``,
which no ``States.ALL`` Catch catches: no record, no notification, the lock and budget slot held
until their TTL). NodeHeal keeps the whole state under 64 KiB instead, a quarter of the limit, by
bounding every value that comes from outside and can grow:

* a condition message is cut to 4 KiB, keeping its Xid lines whole (:func:`bound_message`);
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


def json_bytes(text: str) -> int:
    """Bytes ``text`` takes inside a JSON document as Step Functions counts it (UTF-8, escaped)."""
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
    if json_bytes(text) <= limit:
        return text
    size = _raw_bytes(text)
    kept = _prefix_within(text, limit - _marker_cost(size))
    return f"{kept}{_MARKER.format(size - _raw_bytes(kept))}"


def bound_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """A condition message cut to ``limit`` bytes, its Xid lines kept whole.

    Xid lines are kept first, in order, while they fit (one too long on its own keeps its text
    from the Xid on); the rest of the budget goes to the message's other lines from the top, the
    first that does not fit cut at a character boundary. What is kept stays in its original order,
    every cut line ends with a line break (so no kept line runs into the next), and a last line
    says how many bytes were removed. The classifier therefore reads the same Xids from the cut
    message as from the whole one, as long as the Xid lines alone fit in ``limit``.
    """
    if json_bytes(message) <= limit:
        return message
    size = _raw_bytes(message)
    budget = limit - _marker_cost(size)
    newline = json_bytes("\n")
    lines = message.splitlines(keepends=True)
    kept: dict[int, str] = {}
    kept_bytes = 0

    def take(index: int, text: str, *, whole: bool) -> None:
        nonlocal budget, kept_bytes
        kept[index] = text if whole else f"{text}\n"
        budget -= json_bytes(text) + (0 if whole else newline)
        kept_bytes += _raw_bytes(text)

    for index, line in enumerate(lines):
        match = _XID_LINE.search(line)
        if match is None:
            continue
        if json_bytes(line) <= budget:
            take(index, line, whole=True)
            continue
        piece = _prefix_within(line[match.start() :], budget - newline)
        if piece:
            take(index, piece, whole=False)
        break
    for index, line in enumerate(lines):
        if index in kept or budget <= 0:
            continue
        if json_bytes(line) <= budget:
            take(index, line, whole=True)
            continue
        piece = _prefix_within(line, budget - newline)
        if piece:
            take(index, piece, whole=False)
        break
    text = "".join(kept[index] for index in sorted(kept))
    if text and not text.endswith(_LINE_ENDS):
        text += "\n"
    return text + _MARKER.format(size - kept_bytes)
