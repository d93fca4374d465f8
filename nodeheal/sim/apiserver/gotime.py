"""Go's ``time.Parse`` for the two layouts the API uses, with Go's exact error texts.

``metav1.Time`` decodes with ``time.Parse(time.RFC3339, s)`` and ``metav1.MicroTime`` with
``time.Parse(metav1.RFC3339Micro, s)`` (k8s.io/apimachinery/pkg/apis/meta/v1/time.go and
micro_time.go, ``UnmarshalJSON``). A value either layout rejects makes the whole request body
undecodable (400), and the message the client reads is Go's ``ParseError`` text, so this module
follows ``parse`` in https://github.com/golang/go/blob/master/src/time/format.go chunk by chunk:
the same acceptance (one- or two-digit hour, any run of fractional digits after the seconds of
RFC3339, exactly six for RFC3339Micro, ``Z`` or ``±hh:mm``) and the same error for each failure.

A parsed time is kept as whole seconds since the Unix epoch plus nanoseconds, because Go allows
years 0000 to 9999 and Python's ``datetime`` starts at year 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeheal.sim.apiserver import messages

RFC3339 = "2006-01-02T15:04:05Z07:00"
RFC3339_MICRO = messages.RFC3339_MICRO_LAYOUT

# Go's zero time.Time, 0001-01-01T00:00:00Z, in Unix seconds: metav1.Time and MicroTime encode it
# as JSON null.
_ZERO_UNIX = -62135596800

# The chunks of each layout, as time.nextStdChunk splits them: (literal prefix, std element).
_DATE_AND_CLOCK = (("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05"))
_CHUNKS: dict[str, tuple[tuple[str, str], ...]] = {
    RFC3339: (*_DATE_AND_CLOCK, ("", "Z07:00")),
    RFC3339_MICRO: (*_DATE_AND_CLOCK, ("", ".000000"), ("", "Z07:00")),
}


class GoTimeParseError(ValueError):
    """``time.ParseError``; ``str()`` is Go's ``Error()``."""


@dataclass(frozen=True, slots=True)
class GoTime:
    """An instant: Unix seconds and nanoseconds (0 <= nanos < 1e9)."""

    seconds: int
    nanos: int

    @property
    def is_zero(self) -> bool:
        return self.seconds == _ZERO_UNIX and self.nanos == 0


def go_quote(value: str) -> str:
    """``time.quote``: double quotes, ``\\"`` and ``\\\\`` escaped, non-ASCII and control bytes as \\xNN."""
    out = ['"']
    for char in value:
        if ord(char) >= 0x80 or char < " ":
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))
        else:
            if char in '"\\':
                out.append("\\")
            out.append(char)
    out.append('"')
    return "".join(out)


class _BadChunkError(Exception):
    """Go's errBad: the chunk does not match."""


def _is_digit(value: str, index: int) -> bool:
    return index < len(value) and "0" <= value[index] <= "9"


def _getnum(value: str, fixed: bool) -> tuple[int, str]:
    if not _is_digit(value, 0):
        raise _BadChunkError
    if not _is_digit(value, 1):
        if fixed:
            raise _BadChunkError
        return int(value[0]), value[1:]
    return int(value[:2]), value[2:]


def _atoi(text: str) -> int:
    """Go's time.atoi: an optional sign, then decimal digits and nothing else (none reads as 0)."""
    negative = False
    if text and text[0] in "+-":
        negative = text[0] == "-"
        text = text[1:]
    if text and not (text.isascii() and text.isdigit()):
        raise _BadChunkError
    number = int(text or "0")
    return -number if negative else number


def _nanoseconds(value: str, nbytes: int) -> tuple[int, str]:
    """Go's parseNanoseconds: (nanoseconds, range error name or "")."""
    if value[0] not in ".,":
        raise _BadChunkError
    nbytes = min(nbytes, 10)
    number = _atoi(value[1:nbytes])
    if number < 0:
        return 0, "fractional second"
    return number * 10 ** (10 - nbytes), ""


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if _is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (any year, 0 included)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    doe = days - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (month <= 2), month, day


def parse(layout: str, value: str) -> GoTime:
    """``time.Parse(layout, value)`` for RFC3339 and RFC3339Micro."""
    original = value
    fields = {"year": 0, "month": 1, "day": 1, "hour": 0, "minute": 0, "second": 0, "nanos": 0, "offset": 0}
    chunks = _CHUNKS[layout]

    def failure(element: str, rest: str) -> GoTimeParseError:
        return GoTimeParseError(
            messages.TIME_CANNOT_PARSE.format(
                value=go_quote(original),
                layout=go_quote(layout),
                rest=go_quote(rest),
                element=go_quote(element),
            )
        )

    for position, (prefix, element) in enumerate(chunks):
        if not value.startswith(prefix):
            # time.skip consumes the prefix byte by byte and reports what is left at the mismatch.
            matched = 0
            while matched < len(prefix) and matched < len(value) and value[matched] == prefix[matched]:
                matched += 1
            raise failure(prefix, value[matched:])
        value = value[len(prefix) :]
        hold = value
        range_error = ""
        try:
            if element == "2006":
                if len(value) < 4 or not _is_digit(value, 0):
                    raise _BadChunkError
                fields["year"], value = _atoi(value[:4]), value[4:]
            elif element == "01":
                fields["month"], value = _getnum(value, True)
                if not 1 <= fields["month"] <= 12:
                    range_error = "month"
            elif element == "02":
                # Any one- or two-digit day; the day of the month is checked after the loop.
                fields["day"], value = _getnum(value, True)
            elif element == "15":
                fields["hour"], value = _getnum(value, False)
                if not 0 <= fields["hour"] < 24:
                    range_error = "hour"
            elif element == "04":
                fields["minute"], value = _getnum(value, True)
                if not 0 <= fields["minute"] < 60:
                    range_error = "minute"
            elif element == "05":
                fields["second"], value = _getnum(value, True)
                if not 0 <= fields["second"] < 60:
                    range_error = "second"
                elif (
                    len(value) >= 2
                    and value[0] in ".,"
                    and _is_digit(value, 1)
                    and chunks[position + 1][1] != ".000000"
                ):
                    # A fraction the layout does not name: Go takes every digit that follows.
                    end = 2
                    while _is_digit(value, end):
                        end += 1
                    fields["nanos"], range_error = _nanoseconds(value, end)
                    value = value[end:]
            elif element == ".000000":
                # stdFracSecond0 requires exactly the layout's number of digits.
                if len(value) < 7:
                    raise _BadChunkError
                fields["nanos"], range_error = _nanoseconds(value, 7)
                value = value[7:]
            else:
                value = _zone(value, fields)
        except _BadChunkError:
            raise failure(element, hold) from None
        except _ZoneRangeError as exc:
            range_error = str(exc)
        if range_error:
            raise GoTimeParseError(
                messages.TIME_OUT_OF_RANGE.format(value=go_quote(original), what=range_error)
            )
    if value:
        raise GoTimeParseError(
            messages.TIME_EXTRA_TEXT.format(value=go_quote(original), extra=go_quote(value))
        )
    if not 1 <= fields["day"] <= _days_in(fields["month"], fields["year"]):
        raise GoTimeParseError(messages.TIME_DAY_OUT_OF_RANGE.format(value=go_quote(original)))
    days = _days_from_civil(fields["year"], fields["month"], fields["day"])
    seconds = days * 86400 + fields["hour"] * 3600 + fields["minute"] * 60 + fields["second"]
    return GoTime(seconds - fields["offset"], fields["nanos"])


class _ZoneRangeError(Exception):
    pass


def _zone(value: str, fields: dict[str, int]) -> str:
    """stdISO8601ColonTZ: ``Z``, or a sign and ``hh:mm``."""
    if value[:1] == "Z":
        return value[1:]
    if len(value) < 6 or value[3] != ":":
        raise _BadChunkError
    sign, hour, minute, value = value[0], value[1:3], value[4:6], value[6:]
    hours, _ = _getnum(hour, True)
    minutes, _ = _getnum(minute, True)
    range_error = ""
    # Go's test is > rather than >=: offsets of 24 hours or 60 minutes are accepted.
    if hours > 24:
        range_error = "time zone offset hour"
    if minutes > 60:
        range_error = "time zone offset minute"
    if range_error:
        # Go reports a range error before a bad sign.
        raise _ZoneRangeError(range_error)
    if sign not in "+-":
        raise _BadChunkError
    offset = (hours * 60 + minutes) * 60
    fields["offset"] = -offset if sign == "-" else offset
    return value


def _utc_fields(moment: GoTime) -> tuple[int, int, int, int, int, int]:
    days, rest = divmod(moment.seconds, 86400)
    year, month, day = _civil_from_days(days)
    return year, month, day, rest // 3600, rest % 3600 // 60, rest % 60


def format_rfc3339(moment: GoTime) -> str:
    """``t.UTC().Format(time.RFC3339)``: whole seconds, ``Z``."""
    year, month, day, hour, minute, second = _utc_fields(moment)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"


def format_rfc3339_micro(moment: GoTime) -> str:
    """``t.UTC().Format(metav1.RFC3339Micro)``: six fractional digits (truncated), ``Z``."""
    year, month, day, hour, minute, second = _utc_fields(moment)
    micros = moment.nanos // 1000
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{micros:06d}Z"
