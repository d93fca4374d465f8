"""Structured JSON logs: one object per line, so CloudWatch Logs Insights / Loki can filter fields.

Call sites pass context as ``extra={"fields": {...}}``; it lands as top-level keys.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

_RESERVED = {"timestamp", "level", "logger", "message"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
            + "Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                body[key if key not in _RESERVED else f"field_{key}"] = value
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str, separators=(",", ":"))


def configure_logging(level: str, stream: TextIO | None = None) -> None:
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The HTTP stack logs every retry at WARNING with its own format; ours says what happened.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.getLogger("botocore").setLevel(logging.WARNING)


def fields(**values: Any) -> dict[str, Any]:
    """``logger.info("...", extra=fields(node=name))``."""
    return {"fields": values}
