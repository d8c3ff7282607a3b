"""Logging: structlog, JSON in production, readable in a terminal, never content or secrets."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

SENSITIVE_KEYS = frozenset(
    {
        "content",
        "body",
        "secret",
        "alert_secret",
        "secret_key",
        "secret_key_previous",
        "token",
        "password",
        "authorization",
        "signature",
        "payload",
        "mail",
        "reply",
        "dsn",
        "database_url",
    }
)
"""Keys whose values never reach a log line, whatever a caller binds."""


def drop_sensitive(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor that replaces sensitive values with ``[redacted]``."""
    for key in event_dict.keys() & SENSITIVE_KEYS:
        event_dict[key] = "[redacted]"
    return event_dict


def configure(*, log_format: str = "auto", level: str = "info") -> None:
    """Configure structlog for the process.

    Args:
        log_format: ``json``, ``console``, or ``auto`` (console on a terminal, else JSON).
        level: the lowest level written.
    """
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if renders_json(log_format)
        else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            drop_sensitive,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def renders_json(log_format: str) -> bool:
    """Whether logs are JSON lines: ``json``, or ``auto`` when stderr is not a terminal.

    Args:
        log_format: ``json``, ``console`` or ``auto``.

    Returns:
        True when every line on stderr must be a JSON object.
    """
    return log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())


def redact_dsn(dsn: str) -> str:
    """A DSN with its password masked, for messages meant for people."""
    return re.sub(r"(://[^/:@]*:)[^@]*@", r"\1***@", dsn)


class _JsonLines(logging.Formatter):
    """A stdlib log record as one JSON line: level, logger, event (the message)."""

    def format(self, record: logging.LogRecord) -> str:
        import json  # noqa: PLC0415

        return json.dumps(
            {
                "level": record.levelname.lower(),
                "logger": record.name,
                "event": record.getMessage(),
            }
        )


def json_stdlib_logs(level: int = logging.WARNING) -> None:
    """Send the standard library's log records (libraries' warnings) to stderr as JSON lines.

    For processes whose stdout is a protocol and whose stderr must be JSON throughout.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
