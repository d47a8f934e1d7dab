"""``EtcdClient.call_hedged`` (the lease keepalive's call) against fake members: ``_call_one`` replaced by a fake
whose endpoints answer, stall until cancelled, fail, or say the lease is gone. The real-etcd case (a SIGSTOPped
member) is tests/storage/etcd/test_cluster.py's; here are the edges a real cluster cannot be made to show on cue.
Times are small and only pace the hedges: every outcome is decided by what each fake member does."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from app.storage.etcd.client import EtcdCallError, EtcdClient

pytestmark = pytest.mark.anyio

HEDGE_S = 0.01


class InOrder(random.Random):
    """Leaves the endpoints in the order given (the client shuffles them with its rng)."""

    def shuffle(self, x: Any) -> None:
        return None


class Members:
    """Fake members by endpoint: "ok" answers, "stall" never answers (until cancelled), "fail" refuses (a transport
    error: try the next), "gone" says the lease is not found (final). Counts calls and attempts out at once."""

    def __init__(self, **behaviour: str) -> None:
        self.behaviour = {f"http://{name}": kind for name, kind in behaviour.items()}
        self.calls: list[str] = []
        self.out = 0
        self.most_out = 0
        self.cancelled = 0
        self.all_out = asyncio.Event()
        """Set once every member has an attempt out."""

    async def call_one(self, endpoint: str, path: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        self.calls.append(endpoint)
        self.out += 1
        self.most_out = max(self.most_out, self.out)
        if self.out == len(self.behaviour):
            self.all_out.set()
        try:
            kind = self.behaviour[endpoint]
            if kind == "ok":
                return {"result": {"TTL": "10"}, "by": endpoint}
            if kind == "fail":
                raise EtcdCallError(None, "refused", endpoint)
            if kind == "gone":
                raise EtcdCallError(5, "requested lease not found", endpoint)
            await asyncio.Event().wait()  # a stalled member
            raise AssertionError("unreachable")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.out -= 1

    def client(self, budget: float = 0.5) -> EtcdClient:
        client = EtcdClient(list(self.behaviour), timeout=1, budget=budget, connect_timeout=1, rng=InOrder())
        client._call_one = self.call_one  # type: ignore[method-assign]
        return client


async def test_a_stalled_member_in_use_is_hedged_and_the_answer_moves_the_client_there() -> None:
    members = Members(a="stall", b="ok", c="ok")
    client = members.client()
    answer = await client.call_hedged("/v3/lease/keepalive", {}, None, HEDGE_S)
    assert answer["by"] == "http://b" and client.endpoint == "http://b"
    assert members.calls == ["http://a", "http://b"] and members.out == 0 and members.cancelled == 1


async def test_each_member_has_at_most_one_attempt_out_and_a_single_one_is_never_hedged() -> None:
    every = Members(a="stall", b="stall", c="stall")
    task = asyncio.create_task(every.client().call_hedged("/v3/lease/keepalive", {}, None, HEDGE_S))
    await every.all_out.wait()
    for _ in range(20):  # twenty hedge intervals more: nothing new starts while every member has one out
        await asyncio.sleep(HEDGE_S)
    assert every.calls == ["http://a", "http://b", "http://c"] and every.most_out == 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert every.out == 0 and every.cancelled == 3  # the caller's cancellation ends every attempt

    single = Members(a="stall")
    task = asyncio.create_task(single.client().call_hedged("/v3/lease/keepalive", {}, None, HEDGE_S))
    for _ in range(20):
        await asyncio.sleep(HEDGE_S)
    assert single.calls == ["http://a"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert single.out == 0


async def test_a_failure_asks_the_next_member_at_once_and_everything_failing_raises_the_last_error() -> None:
    members = Members(a="fail", b="ok")
    assert (await members.client().call_hedged("/v3/lease/keepalive", {}, None, 60))["by"] == "http://b"
    failing = Members(a="fail", b="fail")
    with pytest.raises(EtcdCallError, match="refused"):
        await failing.client(budget=0.2).call_hedged("/v3/lease/keepalive", {}, None, HEDGE_S)
    assert {"http://a", "http://b"} <= set(failing.calls) and failing.out == 0


async def test_a_lease_not_found_is_final_at_once_even_with_another_attempt_out() -> None:
    members = Members(a="stall", b="gone", c="ok")
    with pytest.raises(EtcdCallError) as caught:
        await members.client().call_hedged("/v3/lease/keepalive", {}, None, HEDGE_S)
    assert caught.value.code == 5
    assert members.calls == ["http://a", "http://b"] and members.out == 0 and members.cancelled == 1


async def test_a_closed_client_asks_nobody_and_a_hedge_delay_must_be_positive() -> None:
    members = Members(a="ok")
    client = members.client()
    with pytest.raises(ValueError, match="hedge_after"):
        await client.call_hedged("/v3/lease/keepalive", {}, None, 0)
    await client.close()
    with pytest.raises(EtcdCallError, match="closed"):
        await client.call_hedged("/v3/lease/keepalive", {}, None, HEDGE_S)
    assert members.calls == []
