"""One-shot ``idmint`` commands in the tests (``tests.support.server.run_idmint``), exec'd against forked from the
fork server (tests/support/forkserver.py): CPU seconds of the command's process (user + sys: the exec'd one from this
process's reaped-children usage, the forked one from the fork server's, which reaps it) and wall seconds of the
call, alternated, N commands each (default 20).

    .venv/bin/python bench/bench_test_commands.py [N]
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_test_starts import alternate

from tests.support import forkserver
from tests.support.server import REPO, _zygote_environment, run_idmint

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
COMMAND = ("decode", "01ARZ3NDEKTSV4RRFFQ69G5FAV")


def reaped_cpu_s(pid: int | None) -> float:
    """User + sys seconds of the reaped children of ``pid`` (None: this process)."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[13]) + int(fields[14])) / TICKS_PER_S  # cutime, cstime


def one(fork: bool, zygote: int) -> tuple[float, float]:
    os.environ[forkserver.SWITCH] = "1" if fork else "0"
    parent = zygote if fork else None
    before = reaped_cpu_s(parent)
    started = time.monotonic()
    done = run_idmint(COMMAND, timeout=120, check=True)
    wall = time.monotonic() - started
    assert done.stdout
    return reaped_cpu_s(parent) - before, wall


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    zygote = forkserver.fork_server(str(REPO), _zygote_environment()).pid  # its own start is not a command's
    alternate(lambda fork: one(fork, zygote), n, f"idmint {' '.join(COMMAND)}", "wall")


if __name__ == "__main__":
    main()
