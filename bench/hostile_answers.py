"""Hostile answers against each client (Python, TypeScript, Go), through the conformance suite's fault proxy in
front of a real ``idmint serve``, with the figures printed (not asserted):

huge     a 200 of 100 MB to ``ids("wiji", 1000)`` (Content-Length declared, then chunked) and a stream whose first
         line never ends: the client's reason, the time to refuse, and its peak RSS (VmHWM of the runner process)
         after a legitimate call of the same count and after the hostile one. The legitimate answer is 1000 x 29
         bytes + framing (about 30 kB).
silent   a replica that accepts and never answers, listed first before a healthy one, timeout 3 s: ``--calls`` calls,
         each by a fresh client (so each starts at the silent replica): how many the second replica answered, and
         the time per call.

Each client runs as its conformance runner (``clients/conformance/runners``; the TypeScript and Go ones are built
first), driven over its JSON-lines protocol. Usage: python bench/hostile_answers.py [--client go] [--calls 12]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "clients" / "conformance"))

from driver import Runner, prepare, runner_commands  # noqa: E402
from proxy import FaultProxy  # noqa: E402

from tests.support.server import Server  # noqa: E402

HUGE = 100 * 1024 * 1024


def peak_kib(runner: Runner) -> int:
    """The runner process's peak resident set (VmHWM), in KiB."""
    assert runner.proc is not None
    for line in Path(f"/proc/{runner.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def timed(runner: Runner, command: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    result = runner.ask(command)
    return result, time.monotonic() - started


def reason_of(result: dict[str, Any]) -> str:
    if result.get("ok"):
        return f"ok, {len(result.get('ids') or [])} IDs"
    reasons = " | ".join(str(r) for r in (result.get("reasons") or {}).values())
    return f"{result.get('error')}: {reasons[:150]}"


def huge(client: str, runner: Runner, good: FaultProxy, bad: FaultProxy) -> None:
    runner.ask({"op": "client", "replicas": [good.url], "timeout": 60})
    for _ in range(3):  # warm: the catalogue, connections, the runtime's own first allocations
        runner.ask({"op": "ids", "scheme": "wiji", "count": 1000})
        runner.ask({"op": "stream", "scheme": "wiji", "count": 1000})
    base = peak_kib(runner)
    print(f"{client}: peak RSS after legitimate calls of 1000 IDs: {base / 1024:.1f} MiB")
    for declared, op in ((True, "ids"), (False, "ids"), (False, "stream")):
        bad.set("huge", size=HUGE, declared=declared)
        runner.ask({"op": "client", "replicas": [bad.url], "timeout": 60})
        result, seconds = timed(runner, {"op": op, "scheme": "wiji", "count": 1000})
        peak = peak_kib(runner)
        label = f"{op} of 1000, 100 MB answer{' (declared)' if declared else ' (chunked)'}"
        print(
            f"{client}: {label}: refused in {seconds:.2f} s; peak RSS {peak / 1024:.1f} MiB "
            f"(+{(peak - base) / 1024:.1f} MiB); {reason_of(result)}"
        )


def silent(client: str, runner: Runner, quiet: FaultProxy, good: FaultProxy, calls: int) -> None:
    answered, times = 0, []
    for _ in range(calls):
        runner.ask({"op": "client", "replicas": [quiet.url, good.url], "timeout": 3})
        result, seconds = timed(runner, {"op": "ids", "scheme": "wiji", "count": 5})
        times.append(seconds)
        answered += bool(result.get("ok"))
        if not result.get("ok"):
            print(f"{client}:   failed: {reason_of(result)}")
    asked = sum(1 for s in quiet.seen if s.path.startswith("/v1/ids/"))
    print(
        f"{client}: silent first replica (timeout 3 s): {answered}/{calls} calls answered by the second "
        f"(the silent one asked {asked} times); per call median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", action="append", choices=["python", "typescript", "go"])
    parser.add_argument("--calls", type=int, default=12)
    args = parser.parse_args()
    clients = args.client or ["python", "typescript", "go"]
    commands = runner_commands()
    for client in clients:
        prepare(client, commands[client])
    with tempfile.TemporaryDirectory(prefix="idmint-hostile-") as workdir:
        server = Server(Path(workdir) / "server", {"IDMINT_MAX_COUNT": "1000"})
        try:
            server.wait_ready()
            for client in clients:
                good, bad, quiet = FaultProxy([server.url]), FaultProxy([server.url]), FaultProxy([server.url])
                quiet.set("silent")
                runner = Runner(commands[client])
                try:
                    huge(client, runner, good, bad)
                    runner.stop()  # a fresh process: its peak is the silent part's own
                    silent(client, runner, quiet, good, args.calls)
                finally:
                    runner.stop()
                    for proxy in (good, bad, quiet):
                        proxy.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
