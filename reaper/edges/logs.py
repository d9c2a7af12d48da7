"""The reaper's log lines on stderr, as text or as JSON, their time in UTC.

The reaper's log lines on stderr: one UTC timestamp format (``2026-12-06T06:40:01.123Z``,
as every output prints time) and, for ``reaper serve`` under a log shipper, one JSON object per
line (``--log-format json``)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Final

from reaper.core.moments import utc
from reaper.core.terminal import for_terminal, one_line

__all__ = ["LOG_FORMATS", "THIRD_PARTY_LOGGERS", "configure"]

LOG_FORMATS: Final = ("text", "json")
#: Loggers that are not the reaper's: at WARNING unless -vv (one line per HTTP request is
#: noise; the report says what the pass saw).
THIRD_PARTY_LOGGERS: Final = ("httpx", "httpcore", "asyncio")


def _utc(record: logging.LogRecord) -> str:
    return utc(datetime.fromtimestamp(record.created, UTC), "milliseconds")


class TextFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> <logger>: <message>`` on one line, a traceback below when there is
    one, shown as a terminal may (:func:`~reaper.core.terminal.for_terminal`)."""

    def format(self, record: logging.LogRecord) -> str:
        # the message one line (a name in it cannot start another), a traceback below it
        line = f"{_utc(record)} {record.levelname} {record.name}: {one_line(record.getMessage())}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return for_terminal(line)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time``, ``level``, ``logger``, ``message`` (and
    ``exception``), the message's text exact, every character past ASCII as a JSON escape
    (nothing in the line drives a terminal)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": _utc(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=True)


def configure(verbose: int, quiet: bool, log_format: str = "text") -> None:
    """The root logger on stderr at the level ``-v``/``-q`` ask, in ``log_format``."""
    level = logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    # a no-op where the root logger has a handler already (a test's capture, an embedding app)
    logging.basicConfig(level=level, handlers=[handler])
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose >= 2 else logging.WARNING)
