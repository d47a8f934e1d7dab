"""The embedded lease backend: OS file locks and persisted high-water marks under a state directory."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from app.errors import NotReadyError, PoolExhaustedError
from app.storage.embedded.lease import EmbeddedBackend, EmbeddedClaim
from app.storage.lease import Owner
from tests.helpers import CLAIMING, SCHEMES, pool_spec
from tests.support.server import serve_process

HOLDER = Owner(host="test", pid=1, version="0", started_at="2026-01-01T00:00:00Z")
POOL = pool_spec("eight-byte", minimum=0, maximum=2, settings={"cluster_id": 0})

pytestmark = pytest.mark.anyio


async def test_claims_are_exclusive_and_released(tmp_path: Path) -> None:
    a, b = EmbeddedBackend(tmp_path), EmbeddedBackend(tmp_path)
    c1 = await a.claim(POOL, HOLDER)
    c2 = await b.claim(POOL, HOLDER)
    c3 = await a.claim(POOL, HOLDER)
    assert sorted([c1.identity, c2.identity, c3.identity]) == [0, 1, 2]
    with pytest.raises(PoolExhaustedError, match="held by another process"):
        await b.claim(POOL, HOLDER)
    await a.release(c1, 123)
    again = await b.claim(POOL, HOLDER)
    assert again.identity == c1.identity and again.high_water_mark == 123


async def test_static_assignment_conflict(tmp_path: Path) -> None:
    static = pool_spec("siq", minimum=0, maximum=255, static=9)
    backend = EmbeddedBackend(tmp_path)
    assert (await backend.claim(static, HOLDER)).identity == 9
    with pytest.raises(PoolExhaustedError, match="statically assigned"):
        await EmbeddedBackend(tmp_path).claim(static, HOLDER)


async def test_marks_only_rise_until_the_exact_final_mark(tmp_path: Path) -> None:
    backend = EmbeddedBackend(tmp_path)
    claim = await backend.claim(POOL, HOLDER)
    await claim.record_mark(500)
    await claim.record_mark(400)  # a lower reservation never lowers the mark
    await backend.release(claim, None)
    assert (await backend.claim(POOL, HOLDER)).high_water_mark == 500


async def test_a_killed_process_frees_its_identity_but_keeps_its_mark(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import asyncio, sys, time
        from pathlib import Path
        from app.storage.lease import Owner
        from app.storage.embedded.lease import EmbeddedBackend
        from tests.helpers import pool_spec
        pool = pool_spec("eight-byte", minimum=0, maximum=2, settings={{"cluster_id": 0}})
        b = EmbeddedBackend(Path({str(tmp_path)!r}))
        c = asyncio.run(b.claim(pool, Owner("x", 1, "0", "now")))
        asyncio.run(c.record_mark(777))
        print(c.identity, flush=True)
        time.sleep(60)
    """)
    async with await anyio.open_process([sys.executable, "-c", script]) as proc:
        try:
            assert proc.stdout is not None
            held = int(await BufferedByteReceiveStream(proc.stdout).receive_until(b"\n", 100))
            backend = EmbeddedBackend(tmp_path)
            mine = await backend.claim(POOL, HOLDER)
            assert mine.identity != held
        finally:
            proc.kill()
            await proc.wait()
    pool = pool_spec("eight-byte", minimum=held, maximum=held, settings={"cluster_id": 0})
    taken = await EmbeddedBackend(tmp_path).claim(pool, HOLDER)
    assert taken.identity == held and taken.high_water_mark == 777


@pytest.mark.integration
def test_two_servers_on_one_machine_hold_distinct_identities(tmp_path: Path) -> None:
    with serve_process(tmp_path) as a, serve_process(tmp_path) as b:
        cat_a = {s["name"]: s["node"] for s in httpx.get(f"{a}/v1/schemes").json()["schemes"]}
        cat_b = {s["name"]: s["node"] for s in httpx.get(f"{b}/v1/schemes").json()["schemes"]}
        for name in SCHEMES:
            if name == "wiji":
                assert cat_a[name]["random_part"] != cat_b[name]["random_part"]
            elif name in CLAIMING:
                assert set(cat_a[name]["identities"]).isdisjoint(cat_b[name]["identities"]), name
        for name in SCHEMES:
            n = 20_000 if name != "eight-byte" else 2_000
            ids_a = httpx.get(f"{a}/v1/ids/{name}/stream", params={"count": n}).content.split()
            ids_b = httpx.get(f"{b}/v1/ids/{name}/stream", params={"count": n}).content.split()
            assert len(set(ids_a) | set(ids_b)) == 2 * n, name


@pytest.mark.integration
def test_uvicorn_workers_hold_distinct_identities(tmp_path: Path) -> None:
    import fcntl
    import os
    import time

    with serve_process(tmp_path, "--workers", "2"):
        # Both workers claim at start-up; readiness answers once either is up, so wait for the second.
        deadline = time.monotonic() + 20
        while True:
            held: dict[str, list[str]] = {}
            for lock in tmp_path.glob("*/*/*.lock"):
                fd = os.open(lock, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                except BlockingIOError:
                    held.setdefault(lock.parts[-3], []).append(lock.stem)
                finally:
                    os.close(fd)
            if all(len(held.get(s, [])) == 2 for s in CLAIMING):
                break
            assert time.monotonic() < deadline, f"two workers should each hold one identity per scheme: {held}"
            time.sleep(0.2)
        for scheme, identities in held.items():
            assert len(set(identities)) == 2, scheme


async def test_fleet_records_are_compared_and_set(tmp_path: Path) -> None:
    """A fleet record is created once (the first writer wins), replaced only from the value it holds, and read the
    same by every backend on the state directory."""
    one, two = EmbeddedBackend(tmp_path), EmbeddedBackend(tmp_path)
    assert await one.read_record("scheme.snowflake") is None
    assert await one.swap_record("scheme.snowflake", None, {"layout": "a"})
    assert not await two.swap_record("scheme.snowflake", None, {"layout": "b"})
    assert await two.read_record("scheme.snowflake") == {"layout": "a"}
    assert not await two.swap_record("scheme.snowflake", {"layout": "b"}, {"layout": "c"})
    assert await two.swap_record("scheme.snowflake", {"layout": "a"}, {"layout": "c"})
    assert await one.read_record("scheme.snowflake") == {"layout": "c"}
    (tmp_path / "records" / "broken.json").write_text("[1]")
    with pytest.raises(NotReadyError, match="not a JSON object"):
        await one.read_record("broken")
    with pytest.raises(ValueError, match="fleet record name"):
        await one.read_record("../escape")


def test_mark_writes_at_once_in_one_process_never_fail_nor_mix(tmp_path: Path) -> None:
    """A mark write in a worker thread and a release's final mark may run at the same moment in one process: each
    writes under a temporary name of its own, so none fails and the file always holds one whole mark."""
    import json
    import threading

    from app.storage.embedded.lease import _write_mark

    path = tmp_path / "1.mark"
    failures: list[BaseException] = []

    def write(values: range) -> None:
        for value in values:
            try:
                _write_mark(path, value)
            except BaseException as exc:  # every failure is the finding
                failures.append(exc)

    threads = [threading.Thread(target=write, args=(range(n * 10**6, n * 10**6 + 200),)) for n in range(1, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert json.loads(path.read_text())["high_water_mark"] % 10**6 == 199
    assert [p.name for p in tmp_path.iterdir()] == ["1.mark"]  # no temporary file left behind


async def test_a_mark_write_that_outlives_its_release_writes_nothing(tmp_path: Path) -> None:
    """A mark write whose await was cancelled still runs in its worker thread: once the identity is released (the
    final mark written, the lock freed for the next process) it writes nothing, so it cannot overwrite the mark of
    the identity's next holder."""
    import json

    backend = EmbeddedBackend(tmp_path)
    claim = await backend.claim(POOL, HOLDER)
    assert isinstance(claim, EmbeddedClaim)
    await backend.release(claim, 100)
    with pytest.raises(NotReadyError, match="was released"):
        claim._write_while_held(900)  # what the late thread runs
    assert json.loads(claim.mark_path.read_text())["high_water_mark"] == 100
