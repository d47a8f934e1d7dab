"""docs/sequences-business.md runs as printed: every ``http`` block's exchanges, in order, against the app with its
clock at 2026-11-27 12:00 UTC. A ``> METHOD PATH [JSON body]`` line is a request; the ``< STATUS JSON`` line after
it is the answer, which must hold every member shown (objects may have more members; lists are compared element by
element). ``<name>`` in an answer remembers that value (or checks it against the one remembered); in a request, or
inside a longer string, it stands for the value remembered."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.helpers import FakeClock, running_app

DOC = Path(__file__).resolve().parents[2] / "docs" / "sequences-business.md"
NOV_27_NOON_NS = 1_795_780_800 * 10**9
PLACEHOLDER = re.compile(r"<([a-z]+)>")


def exchanges() -> list[tuple[str, str, Any, int, Any]]:
    """(method, path, body or None, status, expected answer) of every exchange, in the document's order."""
    out = []
    for block in re.findall(r"```http\n(.*?)```", DOC.read_text(), re.S):
        lines = [line for line in block.splitlines() if line.strip()]
        assert len(lines) % 2 == 0, f"a request without its answer in:\n{block}"
        for request, answer in zip(lines[::2], lines[1::2], strict=True):
            assert request.startswith("> ") and answer.startswith("< "), (request, answer)
            method, path, *body = request[2:].split(" ", 2)
            status, expected = answer[2:].split(" ", 1)
            out.append((method, path, json.loads(body[0]) if body else None, int(status), json.loads(expected)))
    return out


def substitute(value: Any, remembered: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: str(remembered[m.group(1)]), value)
    if isinstance(value, dict):
        return {k: substitute(v, remembered) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, remembered) for v in value]
    return value


def holds(actual: Any, expected: Any, remembered: dict[str, Any], where: str) -> None:
    if isinstance(expected, str) and PLACEHOLDER.fullmatch(expected):
        name = expected[1:-1]
        if name in remembered:
            assert actual == remembered[name], f"{where}: {actual!r} is not the {name} remembered"
        remembered[name] = actual
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not an object"
        for key, value in expected.items():
            assert key in actual, f"{where}: no member {key!r} in {actual!r}"
            holds(actual[key], value, remembered, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: {actual!r}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            holds(a, e, remembered, f"{where}[{i}]")
    else:
        assert actual == substitute(expected, remembered), f"{where}: {actual!r} != {expected!r}"


def test_the_sequences_document_runs_as_printed(tmp_path: Path) -> None:
    steps = exchanges()
    assert len(steps) >= 25
    remembered: dict[str, Any] = {}
    with running_app(tmp_path, FakeClock.from_ns(NOV_27_NOON_NS)) as client:
        for method, path, body, status, expected in steps:
            sent = substitute(body, remembered)
            r = client.request(method, path, json=sent) if sent is not None else client.request(method, path)
            assert r.status_code == status, f"{method} {path}: {r.status_code} {r.text}"
            holds(r.json(), expected, remembered, f"{method} {path}")
