"""How close an etcd lease comes to failing closed when one member stalls, with the keepalive hedged or not.

A real 3-member etcd cluster (started here on free loopback ports) and one lease kept alive by idmint's
:class:`~app.storage.etcd.session.Session` at the defaults (TTL 10 s, safety margin 2 s: a renewal falls due every
3.33 s, the lease fails closed 8 s after the last one was sent, 1.67 s per attempt). Each round, 0.2 s before a
renewal falls due, one member is stalled with SIGSTOP for 5 s, in turn: a follower in use; the leader while a
follower is in use (which forwards the keepalive to the stalled leader); the leader in use. Printed per round: the
least time left before the deadline, during the stall and until the first renewal after it (the slack; 0 would be
a 503); then the least and the mean of each variant: the hedged keepalive (idmint's) and one attempt at a time
(``EtcdClient.call``, the behaviour before it), run in turn, and the load average.

Usage: python bench/bench_member_stall.py [--rounds 6]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.storage.etcd.client import EtcdClient
from app.storage.etcd.session import Session
from tests.support.etcd import EtcdCluster, EtcdServer

TTL_S, MARGIN_S, ATTEMPT_S, STALL_S = 10, 2.0, 10 / 3 / 2, 5.0


def leader(cluster: EtcdCluster) -> EtcdServer:
    for member in cluster.members:
        status = json.loads(member.etcdctl("endpoint", "status", "-w", "json"))[0]["Status"]
        if status["header"]["member_id"] == status["leader"]:
            return member
    raise RuntimeError("no leader")


async def one_attempt_at_a_time(
    self: EtcdClient, path: str, body: dict[str, Any], timeout: float | None, _: float
) -> dict[str, Any]:
    return await self.call(path, body, timeout)


async def rounds(cluster: EtcdCluster, count: int, label: str) -> list[float]:
    client = EtcdClient(cluster.endpoints.split(","), timeout=ATTEMPT_S, budget=3 * ATTEMPT_S, connect_timeout=1.0)
    session = await Session.grant(client, TTL_S, MARGIN_S, time.monotonic, ATTEMPT_S)
    slacks = []
    try:
        for r in range(count):
            sent = session.last_sent
            while session.last_sent == sent:  # just renewed
                await asyncio.sleep(0.01)
            lead = leader(cluster)
            await asyncio.sleep(max(0.0, session.last_sent + session.interval - 0.2 - time.monotonic()))
            follower = next(m for m in cluster.members if m is not lead)
            # In turn: a follower stalls while in use; the leader stalls while a follower is in use (which forwards
            # the keepalive to it); the leader stalls while in use.
            member, in_use = [(follower, follower), (lead, follower), (lead, lead)][r % 3]
            client._link.current = client.endpoints.index(in_use.endpoint)  # noqa: SLF001 (sets the member in use)
            what = ["follower in use", "leader, not in use", "leader in use"][r % 3]
            member.pause()
            least = float("inf")
            end = time.monotonic() + STALL_S
            while time.monotonic() < end:
                least = min(least, session.deadline - time.monotonic())
                await asyncio.sleep(0.01)
            member.resume()
            resumed = time.monotonic()
            while session.last_sent < resumed:
                least = min(least, session.deadline - time.monotonic())
                await asyncio.sleep(0.01)
            slacks.append(least)
            print(f"  {label:<24} round {r}: {what:<18} least slack {least:5.2f} s", flush=True)
            member.wait_healthy()
    finally:
        await session.close(2)
        await client.close()
    return slacks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="stalls per variant (a multiple of 3)")
    args = parser.parse_args()
    hedged = EtcdClient.call_hedged
    with tempfile.TemporaryDirectory() as workdir:
        cluster = EtcdCluster(Path(workdir))
        cluster.start()
        try:
            results = {}
            variants: list[tuple[str, Callable[..., Awaitable[dict[str, Any]]]]] = [
                ("hedged (idmint)", hedged),
                ("one attempt at a time", one_attempt_at_a_time),
            ]
            for label, call in variants:
                EtcdClient.call_hedged = call  # type: ignore[method-assign,assignment]
                results[label] = asyncio.run(rounds(cluster, args.rounds, label))
        finally:
            EtcdClient.call_hedged = hedged  # type: ignore[method-assign]
            cluster.stop()
    for label, slacks in results.items():
        print(
            f"{label:<24} least {min(slacks):.2f} s, mean {sum(slacks) / len(slacks):.2f} s over {len(slacks)} stalls"
        )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
