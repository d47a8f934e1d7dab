"""Logging for idmint and uvicorn: text or JSON lines on stderr, one ``dictConfig`` for both.

``IDMINT_LOG_FORMAT=text`` (default)::

    2026-11-21T05:12:00.123Z INFO idmint.lease: lease gained scheme=eight-byte identity=7

``IDMINT_LOG_FORMAT=json`` (one object per line; ``extra=`` members become keys)::

    {"ts": "2026-11-21T05:12:00.123Z", "level": "INFO", "logger": "idmint.lease", "msg": "lease gained",
     "scheme": "<scheme>", "identity": 7}

Access lines (``uvicorn.access``) are off unless ``IDMINT_ACCESS_LOG=true``: they cost throughput. In JSON they
carry ``client``, ``method``, ``path``, ``http_version`` and ``status`` as keys.

:func:`uvicorn_log_config` builds the dict that ``idmint serve`` passes to ``uvicorn.run(log_config=...)``, so
that every worker process configures the same handlers (uvicorn applies it in each worker);
:func:`configure_logging` applies it in the current process (``idmint`` commands that run without uvicorn).
"""

from __future__ import annotations

import json
import logging
import logging.config
import time
from typing import Any, Protocol

LOGGER_NAME = "idmint"
"""Root of idmint's logger tree (``idmint.lease``, ``idmint.api`` ...)."""

_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",
    "taskName",
}
"""LogRecord attributes that are not ``extra=`` members (``color_message`` is uvicorn's ANSI copy of msg)."""


class LogSettings(Protocol):
    """The part of :class:`app.settings.Settings` logging reads."""

    log_format: str
    log_level: str
    access_log: bool


def _timestamp(record: logging.LogRecord) -> str:
    """RFC 3339 UTC with milliseconds: ``2026-11-21T05:12:00.123Z``."""
    seconds = int(record.created)
    millis = int((record.created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key, value in vars(record).items() if key not in _RECORD_ATTRIBUTES}


def _access_fields(record: logging.LogRecord) -> dict[str, Any]:
    """uvicorn's access record args: (client_addr, method, full_path, http_version, status_code)."""
    args = record.args
    if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
        client, method, path, http_version, status = args
        return {"client": client, "method": method, "path": path, "http_version": http_version, "status": status}
    return {}


class TextFormatter(logging.Formatter):
    """``<RFC 3339 UTC> <LEVEL> <logger>: <message> key=value ...`` (extras appended as key=value)."""

    def __init__(self, use_colors: bool | None = None) -> None:  # use_colors: uvicorn may pass it; ignored
        super().__init__()

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{key}={_text_value(value)}" for key, value in extras.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _text_value(value: Any) -> str:
    text = str(value)
    if not text or any(ch.isspace() or ch in '"=' for ch in text):
        return json.dumps(text)
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, then extras, access fields, ``exc``."""

    def __init__(self, use_colors: bool | None = None) -> None:  # use_colors: uvicorn may pass it; ignored
        super().__init__()

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _access_fields(record).items():
            entry.setdefault(key, value)
        for key, value in _extras(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False, separators=(", ", ": "))


def uvicorn_log_config(settings: LogSettings) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` dict for ``uvicorn.run(log_config=...)`` and :func:`configure_logging`.

    Formatter names ``default`` and ``access`` are uvicorn's own, so uvicorn's ``use_colors`` handling finds them.
    The ``uvicorn.access`` logger gets no handler (and does not propagate) unless ``settings.access_log``; pass
    ``access_log=settings.access_log`` to uvicorn as well, so that it does not even build the lines.
    """
    if settings.log_format not in ("text", "json"):
        raise ValueError(f"log_format must be text or json, got {settings.log_format!r}")
    formatter = f"{__name__}.{'JsonFormatter' if settings.log_format == 'json' else 'TextFormatter'}"
    level = settings.log_level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": {"()": formatter},
            "access": {"()": formatter},
        },
        "handlers": {
            "default": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"},
            "access": {"class": "logging.StreamHandler", "formatter": "access", "stream": "ext://sys.stderr"},
        },
        "loggers": {
            LOGGER_NAME: {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {
                "handlers": ["access"] if settings.access_log else [],
                "level": "INFO" if settings.access_log else "WARNING",
                "propagate": False,
            },
        },
    }


def configure_logging(settings: LogSettings) -> None:
    """Apply :func:`uvicorn_log_config` in this process (idempotent: reconfigures the same handlers)."""
    logging.config.dictConfig(uvicorn_log_config(settings))
