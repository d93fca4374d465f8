"""The fixed instant of the tests whose clock stands at 10:00 UTC, shared so that they agree.

Tests that need another instant on purpose keep their own: a few seconds later, where an event's
time must follow the clock, or ``tests.unit.workflow.fakes.NOW`` (10:05), the in-memory step
fakes' clock.
"""

from __future__ import annotations

from datetime import UTC, datetime

#: 21 November 2026, 10:00 UTC.
NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
