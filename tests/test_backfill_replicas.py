"""Backfill on three real replicas (``idmint serve``) sharing the session's etcd or PostgreSQL (the ``store``
fixture): back-dated IDs interleaved with live issue into the same milliseconds never repeat, each decodes to the
time asked; two replicas backfilling into one millisecond stay disjoint, and a restarted replica continues above
(on MariaDB too).
The duplicate hunt is a soak: 1,000,000 IDs per backend in ``scripts/soak.sh``, 20,000 in the test command."""

from __future__ import annotations

import concurrent.futures
import random
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from app.schemes import get_scheme
from tests.support.order import soak_size
from tests.support.server import Server, until_available
from tests.support.storage import EVERY_BACKEND, Store
from tests.test_replicas import replicas

pytestmark = pytest.mark.integration  # real replicas and etcd or PostgreSQL

TOTAL = soak_size(1_000_000, 20_000)
"""Back-dated IDs per backend, half snowflake, half eight-byte (mode time_sequential)."""
BATCH = soak_size(10_000, 1_000)
HOT_SHARE = 0.1
HOT_WINDOW = 32
"""The latest distinct milliseconds of live issue a request draws from."""
HOT_PER_MS = 8
"""At most this many times of one request fall in one of them (eight-byte holds 64 a ms per backfill identity)."""
LIVE_PER_JOB = 200
"""Live IDs a replica issues right before each of its backfill requests."""
"""At most this share of each request's times is taken from the milliseconds live issue used moments before."""
IDENTITY_SCHEMES = {"snowflake": {}, "eight-byte": {"mode": "time_sequential"}}
PAST_FROM_MS = 1_420_070_400_000  # 2015-01-01


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def backfill(node: Server, scheme: str, times_ms: list[int], **options: str) -> list[str]:
    body = {"times": [rfc3339(ms) for ms in times_ms], **options}
    r = until_available(lambda: httpx.post(f"{node.url}/v1/ids/{scheme}/backfill", json=body, timeout=120))
    assert r.status_code == 200, r.text
    ids: list[str] = r.json()["ids"]
    assert len(ids) == len(times_ms)
    return ids


def decoded_ms(scheme: str, texts: list[str]) -> list[int]:
    codec = get_scheme(scheme)
    stamps = [codec.timestamp_ns(codec.parse(text)) for text in texts]
    return [stamp // 1_000_000 if stamp is not None else -1 for stamp in stamps]


class Live:
    """What the jobs share: the live IDs issued, every millisecond they used, the latest ones (``hot``), under
    ``lock``."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.used: set[int] = set()
        self.hot: list[int] = []
        self.lock = threading.Lock()


def env_of(store: Store) -> dict[str, str]:
    return store.env(IDMINT_BACKFILL_IDENTITIES="8", IDMINT_BACKFILL_MIN_AGE="0", IDMINT_EIGHT_BYTE_GENERATORS="2")


@pytest.mark.soak
def test_backfill_on_three_replicas_interleaved_with_live_issue_never_repeats(tmp_path: Path, store: Store) -> None:
    rng = random.Random(40)
    with replicas(tmp_path, 3, env_of(store)) as nodes:
        for scheme, options in IDENTITY_SCHEMES.items():
            live = Live()

            def job(
                node: Server, count: int, scheme: str = scheme, options: dict = options, live: Live = live
            ) -> tuple[list, list]:
                # live issue on this replica, while the other replicas backfill, then a backfill partly into the
                # milliseconds live issue (here or on another replica) used moments before
                issued = node.issue(scheme, LIVE_PER_JOB, **options)
                stamps = decoded_ms(scheme, issued)
                with live.lock:
                    live.ids.extend(issued)
                    live.used.update(stamps)
                    live.hot = [ms for ms in dict.fromkeys(live.hot + stamps)][-HOT_WINDOW:]
                    recent = list(live.hot)
                now_ms = int(datetime.now(UTC).timestamp() * 1000)
                hot = min(int(count * HOT_SHARE), HOT_PER_MS * len(recent))
                times = [recent[i % len(recent)] for i in range(hot)]
                times += [rng.randrange(PAST_FROM_MS, now_ms - 3_600_000) for _ in range(count - hot)]
                rng.shuffle(times)
                return times, backfill(node, scheme, times, **options)

            per_scheme = TOTAL // len(IDENTITY_SCHEMES)
            with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
                jobs = [pool.submit(job, nodes[i % 3], BATCH) for i in range(per_scheme // BATCH)]
                results = [j.result() for j in jobs]
            asked = [ms for times, _ in results for ms in times]
            got = [text for _, ids in results for text in ids]
            assert len(got) == per_scheme
            assert decoded_ms(scheme, got) == asked, f"{scheme}: a back-dated ID decodes to another time"
            every = got + live.ids
            assert len(set(every)) == len(every), f"{scheme}: {len(every) - len(set(every))} repeats"
            assert set(asked) & live.used, "no backfill landed in a millisecond live issue used"


@pytest.mark.parametrize("store", EVERY_BACKEND, indirect=True)
def test_two_replicas_into_one_millisecond_stay_disjoint_and_a_restarted_one_continues_above(
    tmp_path: Path, store: Store
) -> None:
    ms = 1_614_834_367_890
    with replicas(tmp_path, 2, env_of(store)) as nodes:
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            jobs = [pool.submit(backfill, node, "eight-byte", [ms] * 50) for node in nodes for _ in range(2)]
            first = [text for job in jobs for text in job.result()]
        assert len(set(first)) == 200
        assert set(decoded_ms("eight-byte", first)) == {ms}
        nodes[0].stop()
    # new processes on the same store: they continue above the marks the others left
    with replicas(tmp_path, 1, env_of(store)) as (restarted,):
        after = backfill(restarted, "eight-byte", [ms] * 100)
        assert set(after).isdisjoint(first)
        body = {"times": [rfc3339(ms)] * 300}  # 8 x 64 = 512 in all, 300 of them taken
        r = until_available(lambda: httpx.post(f"{restarted.url}/v1/ids/eight-byte/backfill", json=body, timeout=60))
        assert r.status_code == 409 and "64 IDs per tick" in r.json()["detail"], r.text
