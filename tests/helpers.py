"""Small shared test helpers: settings in a temp state dir, an app with its lifespan running, free ports."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

SCHEMES = ("muid", "eight-byte", "hlc-ulid", "siq", "wiji")
HEX_DIGITS = {"muid": 32, "eight-byte": 16, "hlc-ulid": 32, "siq": 28, "wiji": 32}


def make_settings(state_dir: Path, **overrides: Any) -> Settings:
    return Settings(state_dir=state_dir, **overrides)


@contextlib.contextmanager
def running_app(state_dir: Path, **overrides: Any) -> Iterator[TestClient]:
    """The real ASGI app, lifespan started (claims made), driven over HTTP semantics by TestClient."""
    with TestClient(create_app(make_settings(state_dir, **overrides))) as client:
        yield client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_process(state_dir: Path, *args: str, env: dict[str, str] | None = None,
                  timeout: float = 20.0) -> Iterator[str]:
    """A real ``idmint serve`` in a subprocess on a free loopback port; yields its base URL; stops it by PID."""
    port = free_port()
    full_env = {**os.environ, "IDMINT_STATE_DIR": str(state_dir), **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
        env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                raise RuntimeError(f"idmint serve exited with {proc.returncode}:\n{out}")
            try:
                if httpx.get(f"{base}/readyz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("idmint serve did not become ready in time")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
