"""The conformance runner of the Python client (``idmint_client.Client``): one command a line in on stdin, one
result a line out on stdout, as ``clients/conformance/README.md`` describes (the protocol all runners share)."""

from __future__ import annotations

import json
import sys
from typing import Any

from idmint_client import (
    Client,
    IdmintClientError,
    NoReplicaAvailableError,
    RequestRejectedError,
    Revealed,
    Unrevealed,
)


def error_result(exc: IdmintClientError, ids: list[str] | None = None) -> dict[str, Any]:
    """A failed op: the class caught (the driver checks it against the case's error kind) and its data."""
    out: dict[str, Any] = {"ok": False, "class": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, NoReplicaAvailableError):
        out["reasons"] = exc.reasons
        out["delivered"] = exc.delivered
    if isinstance(exc, RequestRejectedError):
        out["status"] = exc.status
    if ids is not None:
        out["ids"] = ids
    return out


class Runner:
    def __init__(self) -> None:
        self.client: Client | None = None

    def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["op"]
        if op == "client":
            if self.client is not None:
                self.client.close()
            self.client = Client(
                cmd["replicas"],
                timeout=cmd.get("timeout", 10.0),
                api_key=cmd.get("api_key"),
                max_age=cmd.get("max_age", 1.0),
                buffer=cmd.get("buffer", True),
                min_refill=cmd.get("min_refill", 64),
                max_refill=cmd.get("max_refill", 100_000),
            )
            return {"ok": True}
        client = self.client
        assert client is not None, "no client: send {'op': 'client'} first"
        fmt = cmd.get("format")
        options = cmd.get("options") or {}
        got: list[str] = []
        try:
            if op == "ids":
                return {"ok": True, "ids": client.ids(cmd["scheme"], cmd["count"], format=fmt, **options)}
            if op == "stream":
                for one in client.stream(cmd["scheme"], cmd["count"], format=fmt, **options):
                    got.append(one)
                return {"ok": True, "ids": got}
            if op == "new_ids":
                for _ in range(cmd["count"]):
                    got.append(client.new_id(cmd["scheme"], format=fmt, **options))
                return {"ok": True, "ids": got}
            if op == "decode":
                if cmd.get("scheme"):
                    return {"ok": True, "decoded": decoded(client.decode(cmd["id"], scheme=cmd["scheme"]))}
                return {"ok": True, "candidates": [decoded(c) for c in client.decode(cmd["id"])]}
            if op == "schemes":
                infos = client.schemes()
                return {"ok": True, "schemes": [{"name": i.name, "formats": list(i.formats)} for i in infos]}
            if op == "next":
                if fmt is not None:
                    return {"ok": True, "values": client.next(cmd["name"], cmd["count"], format=fmt)}
                return {"ok": True, "values": [str(v) for v in client.next(cmd["name"], cmd["count"])]}
            if op == "reveal":
                return {"ok": True, "revealed": revealed(client.reveal(cmd["text"]))}
            if op == "reveal_many":
                return {"ok": True, "items": [revealed(item) for item in client.reveal_many(cmd["texts"])]}
            if op == "range":
                block = client.range(cmd["name"], cmd["count"])
                return {"ok": True, "first": str(block.first), "last": str(block.last), "count": str(block.count)}
            if op == "close":
                client.close()
                return {"ok": True}
        except IdmintClientError as exc:
            return error_result(exc, got if op in ("stream", "new_ids") else None)
        return {"ok": False, "error": "unknown_op", "message": f"unknown op {op!r}"}


def decoded(one: Any) -> dict[str, Any]:
    return {"scheme": one.scheme, "id": one.id, "hex": one.hex, "timestamp": one.timestamp_text, "fields": one.fields}


def revealed(item: Revealed | Unrevealed) -> dict[str, Any]:
    if isinstance(item, Unrevealed):
        return {"text": item.text, "error": item.error}
    reading = decoded(item.decoded) if item.decoded is not None else None
    return {"text": item.text, "id": item.id, "scheme": item.scheme, "key_id": item.key_id, "decoded": reading}


def main() -> None:
    runner = Runner()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = runner.run(json.loads(line))
        except Exception as exc:  # reported to the driver as a failure of the runner, not raised
            result = {"ok": False, "error": "runner_crashed", "message": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
    if runner.client is not None:
        runner.client.close()


if __name__ == "__main__":
    main()
