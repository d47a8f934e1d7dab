"""``idmint mint SCHEME -n N --server URL[,URL]``: the client's stream, from a real subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.server import Server, free_port
from tests.test_cli import idmint

pytestmark = pytest.mark.integration  # a real idmint serve


def test_mint_from_a_server_with_a_dead_replica_listed_first(tmp_path: Path, server: Server) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    r = idmint(
        tmp_path,
        "mint",
        "eight-byte",
        "-n",
        "150000",
        "--mode",
        "time_sequential",
        "--format",
        "decimal",
        "--server",
        f"{dead},{server.url}",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 150_000 and len(set(lines)) == 150_000 and all(x.isdigit() for x in lines)
    assert not list((tmp_path).iterdir()), "minted locally instead of asking the server"


def test_mint_from_servers_errors_are_clear(tmp_path: Path, server: Server) -> None:
    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    r = idmint(tmp_path, "mint", "wiji", "-n", "10", "--server", ",".join(dead))
    assert r.returncode == 1 and "no replica available" in r.stderr and all(u in r.stderr for u in dead)
    r = idmint(tmp_path, "mint", "no-such-scheme", "--server", server.url)
    assert r.returncode == 1 and "unknown scheme 'no-such-scheme'" in r.stderr
    r = idmint(tmp_path, "mint", "wiji", "--server", "localhost:8000")
    assert r.returncode == 2 and "http://" in r.stderr
