"""The exporter logs JSON lines (its help says so, in place of a --json flag): one object per line,
with the call's fields as top-level keys."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from nodeheal.exporter.logs import configure_logging, fields


@pytest.fixture
def root_logging() -> Iterator[None]:
    """configure_logging takes over the root logger and two library loggers: give them back.

    The ``nodeheal`` logger starts as the exporter's process has it (no level, no handler of its
    own): a Lambda handler run earlier in the same test process configures it through Powertools
    (service ``nodeheal``, its own level and handler), which would decide what these records do
    instead of configure_logging."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    libraries = {name: logging.getLogger(name).level for name in ("urllib3", "botocore")}
    nodeheal = logging.getLogger("nodeheal")
    nodeheal_state = (nodeheal.level, nodeheal.handlers[:], nodeheal.propagate, nodeheal.disabled)
    nodeheal.setLevel(logging.NOTSET)
    nodeheal.handlers[:] = []
    nodeheal.propagate, nodeheal.disabled = True, False
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, library_level in libraries.items():
        logging.getLogger(name).setLevel(library_level)
    nodeheal.setLevel(nodeheal_state[0])
    nodeheal.handlers[:] = nodeheal_state[1]
    nodeheal.propagate, nodeheal.disabled = nodeheal_state[2], nodeheal_state[3]


def test_every_record_is_one_json_object_on_its_own_line(root_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("INFO", stream)
    logger = logging.getLogger("nodeheal.exporter.test")
    logger.info("published\nacross lines", extra=fields(node="gpu-a", count=2, message="clash"))
    logger.debug("below the level")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("publish failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "INFO" and first["logger"] == "nodeheal.exporter.test"
    assert first["message"] == "published\nacross lines"  # escaped inside the line, never split
    assert (first["node"], first["count"]) == ("gpu-a", 2)
    assert first["field_message"] == "clash"  # a field never overwrites the record's own keys
    assert first["timestamp"].endswith("Z") and len(first["timestamp"]) == len("2026-11-21T10:00:00.000Z")
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exception"]
