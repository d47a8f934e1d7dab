"""app/logs.py: text and JSON lines for idmint and uvicorn, access log off unless asked for -- in-process, and in
the output of a real ``idmint serve``."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import re
import sys
from dataclasses import dataclass

import httpx
import pytest

from app.logs import JsonFormatter, TextFormatter, configure_logging, uvicorn_log_config

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


@dataclass
class LogSettings:
    log_format: str = "text"
    log_level: str = "info"
    access_log: bool = False


def _record(name: str, msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord(name, logging.INFO, __file__, 1, msg, args or None, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_text_lines_carry_extras_as_key_value() -> None:
    line = TextFormatter().format(
        _record("idmint.lease", "lease gained", scheme="eight-byte", identity=7, holder="host-1 pid 9")
    )
    assert TEXT_LINE.match(line)
    assert line.endswith('idmint.lease: lease gained scheme=eight-byte identity=7 holder="host-1 pid 9"')


def test_json_lines_are_one_object_with_extras_and_access_fields() -> None:
    fmt = JsonFormatter()
    entry = json.loads(
        fmt.format(_record("idmint.lease", "lease lost: %s", "expired", scheme="muid", color_message="\x1b[31mx"))
    )
    assert set(entry) == {"ts", "level", "logger", "msg", "scheme"}
    assert entry["msg"] == "lease lost: expired" and entry["level"] == "INFO" and entry["logger"] == "idmint.lease"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["ts"])
    access = json.loads(
        fmt.format(
            _record(
                "uvicorn.access", '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/v1/ids/muid?count=2", "1.1", 200
            )
        )
    )
    assert access["status"] == 200 and access["method"] == "GET" and access["path"] == "/v1/ids/muid?count=2"
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = _record("idmint", "failed")
        record.exc_info = sys.exc_info()
    failed = json.loads(fmt.format(record))
    assert "RuntimeError: boom" in failed["exc"] and "\n" not in fmt.format(record)


@pytest.mark.parametrize("access_log", [False, True])
def test_uvicorn_log_config_switches_the_access_log(access_log: bool) -> None:
    config = uvicorn_log_config(LogSettings(log_format="json", access_log=access_log))
    access = config["loggers"]["uvicorn.access"]
    assert access["propagate"] is False
    assert access["handlers"] == (["access"] if access_log else [])
    assert set(config["formatters"]) == {"default", "access"}  # uvicorn's names: its use_colors handling finds them
    assert config["loggers"]["idmint"]["handlers"] == ["default"]


def test_uvicorn_log_config_rejects_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="log_format must be text or json, got 'xml'"):
        uvicorn_log_config(LogSettings(log_format="xml"))


def test_configure_logging_applies_to_the_idmint_tree(capsys: pytest.CaptureFixture[str]) -> None:
    saved = {
        name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate, logging.getLogger(name).level)
        for name in ("idmint", "uvicorn", "uvicorn.access")
    }
    try:
        configure_logging(LogSettings(log_format="json"))
        logging.getLogger("idmint.node").warning("clock rollback", extra={"scheme": "siq", "step_seconds": 0.25})
        logging.getLogger("uvicorn.access").info("dropped")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
        assert lines == [
            {
                "ts": lines[0]["ts"],
                "level": "WARNING",
                "logger": "idmint.node",
                "msg": "clock rollback",
                "scheme": "siq",
                "step_seconds": 0.25,
            }
        ]
    finally:
        for name, (handlers, propagate, level) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.setLevel(level)


# -- a real idmint serve ---------------------------------------------------------------------------------------


def test_serve_writes_json_lines_and_access_lines_when_enabled(idmint_server) -> None:
    server = idmint_server(workers=1, env={"IDMINT_LOG_FORMAT": "json", "IDMINT_ACCESS_LOG": "true"})
    assert httpx.get(f"{server.url}/v1/ids/wiji", params={"count": 2}, timeout=5).status_code == 200
    assert httpx.get(f"{server.url}/v1/ids/nope", timeout=5).status_code == 404
    server.proc.terminate()
    server.proc.wait(timeout=15)
    lines = [line for line in server.log().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "msg"} <= set(e) for e in entries)
    assert any(e["logger"] == "uvicorn.error" and "Application startup complete" in e["msg"] for e in entries)
    access = [e for e in entries if e["logger"] == "uvicorn.access"]
    assert [(e["method"], e["path"].split("?")[0], e["status"]) for e in access if "/v1/ids" in e["path"]] == [
        ("GET", "/v1/ids/wiji", 200),
        ("GET", "/v1/ids/nope", 404),
    ]


def test_serve_has_no_access_lines_by_default(idmint_server) -> None:
    server = idmint_server(workers=1)
    for _ in range(3):
        assert httpx.get(f"{server.url}/v1/ids/muid", timeout=5).status_code == 200
    server.proc.terminate()
    server.proc.wait(timeout=15)
    lines = [line for line in server.log().splitlines() if line.strip() and not line.startswith(" ")]
    assert lines and all(TEXT_LINE.match(line) for line in lines), lines
    assert not [line for line in lines if "uvicorn.access" in line or "/v1/ids" in line]


def test_stream_handler_output_is_exactly_one_line_per_record() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("idmint.test-one-line")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error("multi\nline message", extra={"reason": "a\nb"})
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert out.count("\n") == 1 and json.loads(out)["msg"] == "multi\nline message"
