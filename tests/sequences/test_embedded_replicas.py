"""Two real ``idmint serve`` processes on one state directory (embedded storage): concurrent next and range
calls for two sequences never share an integer, through a SIGKILL and a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.sequences.support import Served, check, create, run_clients
from tests.support.server import Server

pytestmark = pytest.mark.integration  # real processes

CLIENTS_PER_REPLICA = 8


def test_two_processes_on_one_state_directory_crash_and_restart(tmp_path: Path) -> None:
    env = {"IDMINT_STATE_DIR": str(tmp_path / "state")}
    a, b = Server(tmp_path, env), Server(tmp_path, env)
    restarted: Server | None = None
    try:
        a.wait("/readyz")
        b.wait("/readyz")
        create(a.url, cache=20)  # small ranges: buffers turn over many times in a few seconds
        served = Served()
        run_clients([a.url, b.url], CLIENTS_PER_REPLICA, 4.0, served)
        check(served, a.url)
        before = {name: served.integers(name) for name in served.calls}
        assert all(n > 1000 for n in before.values()), before

        def crash_b() -> None:
            time.sleep(1.5)
            b.kill()  # SIGKILL under load: no clean stop, its buffers are simply gone
            time.sleep(0.5)

        run_clients([a.url, b.url], CLIENTS_PER_REPLICA, 0, served, during=crash_b, tolerate=(0,))
        restarted = Server(tmp_path, env)
        restarted.wait("/readyz")
        run_clients([a.url, restarted.url], CLIENTS_PER_REPLICA, 3.0, served)
        check(served, restarted.url)
        assert all(served.integers(name) > before[name] for name in before)
    finally:
        for r in (a, b, restarted):
            if r is not None:
                r.stop()
