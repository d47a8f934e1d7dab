"""Storage and clock faults: a full or read-only state directory, unreadable marks, inherited marks ahead of the clock,
a clock stepped back while running. Against real ``idmint serve`` processes where a process can show it (the disk
faults use a real 1 MiB tmpfs mounted over the state directory), and a node on the real embedded backend with an
injected clock where the clock must move under a running process."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from app.errors import NotReadyError
from app.issuing.issuer import no_charge
from app.storage.embedded.lease import EmbeddedBackend, MarkUnreadableError, _read_mark
from app.storage.lease import Owner
from tests.helpers import CLAIMING, FakeClock, new_node, pool_spec, started
from tests.support.server import Server

pytestmark = pytest.mark.anyio

MARKED = CLAIMING
"""Schemes whose issuers record high-water marks: those that claim an identity."""


@pytest.fixture()
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted on a fresh directory (the tests run as root, as CI does); unmounted afterwards."""
    mount_point = tmp_path / "state"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    assert done.returncode == 0, f"these tests need to mount a tmpfs (root): {done.stderr}"
    try:
        yield mount_point
    finally:
        while subprocess.run(["umount", "-l", str(mount_point)], capture_output=True).returncode == 0:
            pass  # a bind mount left by a failed test, then the tmpfs


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` until ENOSPC; returns the filler file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as out:  # unbuffered: nothing is left to fail again on close
        for size in (65536, 4096, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError:
                pass
    return filler


def read_only(directory: Path) -> None:
    """Make ``directory`` read-only under a running process: a read-only bind mount over it (a plain remount is
    refused while the process holds its lock files open for writing). ``umount`` once makes it writable again."""
    subprocess.run(["mount", "--bind", str(directory), str(directory)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(directory)], check=True)


def mark_files(state: Path) -> dict[str, Path]:
    return {scheme: next((state / scheme).rglob("*.mark")) for scheme in MARKED}


def read_marks(state: Path) -> dict[str, int]:
    return {scheme: json.loads(path.read_text())["high_water_mark"] for scheme, path in mark_files(state).items()}


def wait_status(replica: Server, path: str, status: int, timeout: float = 10) -> httpx.Response:
    return replica.wait(path, status=status, timeout=timeout)


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["disk full", "read-only"])
def test_a_storage_fault_is_503_naming_it_and_issuing_resumes_when_it_clears(tmpfs: Path, fault: str) -> None:
    replica = Server(tmpfs.parent, {"IDMINT_STATE_DIR": str(tmpfs)})
    try:
        replica.wait("/readyz")
        before = read_marks(tmpfs)
        filler = None
        if fault == "disk full":
            filler = fill(tmpfs)
        else:
            read_only(tmpfs)

        # Each scheme finds the fault at its own next mark record: wait until every one has (not only the first).
        deadline = time.monotonic() + 15
        while True:
            r = wait_status(replica, "/readyz", 503)
            reasons = {name: s.get("reason", "") for name, s in r.json()["schemes"].items()}
            if all("cannot be written" in reasons[scheme] for scheme in MARKED) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert r.headers["retry-after"]
        for scheme in MARKED:
            assert "cannot be written" in reasons[scheme], reasons
            assert str(tmpfs) in reasons[scheme]  # the file is named
        assert reasons["wiji"] == ""  # nothing to record: still issuing
        for scheme in MARKED:
            issued = replica.get(f"/v1/ids/{scheme}")
            assert issued.status_code == 503, (scheme, issued.text)
            assert int(issued.headers["retry-after"]) >= 1
            assert "cannot be written" in issued.json()["detail"]
        assert replica.get("/v1/ids/wiji").status_code == 200

        if filler is not None:
            filler.unlink()
        else:
            subprocess.run(["umount", str(tmpfs)], check=True)  # the read-only bind mount goes
        wait_status(replica, "/readyz", 200)
        for scheme in MARKED:
            assert replica.get(f"/v1/ids/{scheme}").status_code == 200
        after = read_marks(tmpfs)
        assert all(after[s] > before[s] for s in MARKED), (before, after)  # recording again
        assert "high-water mark recorded again" in replica.log()
        assert replica.proc.poll() is None
    finally:
        replica.stop()


@pytest.mark.parametrize(
    "content",
    [
        "true",
        "1.5",
        '"7"',
        '{"high_water_mark": true}',
        '{"high_water_mark": 1.5}',
        '{"high_water_mark": "7"}',
        '{"high_water_mark": -2}',
        "{}",
        "",
        "not json",
    ],
)
def test_marks_are_read_strictly(tmp_path: Path, content: str) -> None:
    path = tmp_path / "3.mark"
    path.write_text(content)
    with pytest.raises(MarkUnreadableError, match=str(path)):
        _read_mark(path)


def test_marks_that_are_integers_are_read(tmp_path: Path) -> None:
    path = tmp_path / "3.mark"
    path.write_text('{"high_water_mark": 1795000000000}')
    assert _read_mark(path) == 1795000000000
    assert _read_mark(tmp_path / "absent.mark") == -1


@pytest.mark.integration
def test_an_unreadable_mark_refuses_that_identity_naming_the_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Server(tmp_path, {"IDMINT_STATE_DIR": str(state)})
    try:
        first.wait("/readyz")
    finally:
        first.stop()
    mark = mark_files(state)["eight-byte"]
    identity = int(mark.stem)
    mark.write_text('{"high_water_mark": true}')

    pooled = Server(tmp_path, {"IDMINT_STATE_DIR": str(state)})
    try:
        pooled.wait("/readyz")
        held = pooled.get("/v1/schemes").json()["schemes"][1]["node"]["identities"]
        assert identity not in held and held
        assert str(mark) in pooled.log() and "refused generator_id" in pooled.log()
    finally:
        pooled.stop()

    static = Server(tmp_path, {"IDMINT_STATE_DIR": str(state), "IDMINT_EIGHT_BYTE_GENERATOR_ID": str(identity)})
    try:
        r = static.wait("/readyz", status=503)
        reason = r.json()["schemes"]["eight-byte"]["reason"]
        assert str(mark) in reason and "integer" in reason
        assert static.get("/v1/ids/eight-byte").status_code == 503
    finally:
        static.stop()


@pytest.mark.integration
def test_an_inherited_mark_more_than_a_second_ahead_is_not_ready_until_it_can_issue(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Server(tmp_path, {"IDMINT_STATE_DIR": str(state)})
    try:
        first.wait("/readyz")
        assert first.get("/v1/ids/eight-byte").status_code == 200
    finally:
        first.kill()  # no final mark: the next holder inherits the reservation recorded ahead of the clock
    # 8 s behind (a start-up takes a few seconds on a loaded machine), within a 30 s max_clock_wait: waited out.
    nxt = Server(
        tmp_path, {"IDMINT_STATE_DIR": str(state), "IDMINT_CLOCK_OFFSET_MS": "-8000", "IDMINT_MAX_CLOCK_WAIT": "30"}
    )
    try:
        r = nxt.wait("/readyz", status=503, timeout=20)
        reason = r.json()["schemes"]["eight-byte"]["reason"]
        assert "waiting" in reason and "inherited" in reason, reason
        t0 = time.monotonic()
        answer = nxt.get("/v1/ids/eight-byte")
        assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1
        assert time.monotonic() - t0 < 1.0  # answered at once, not after the wait
        nxt.wait("/readyz", status=200, timeout=15)
        assert nxt.get("/v1/ids/eight-byte").status_code == 200
    finally:
        nxt.stop()


# -- the clock stepped back under a running node (injected clock; real embedded backend and generators) -------------


async def test_a_clock_stepped_back_while_running_refuses_the_identity_and_claims_another(tmp_path: Path) -> None:
    clock = FakeClock.running_from_now()
    async with started(new_node(tmp_path, clock, max_clock_wait=1.0)) as node:
        issuer = node.issuers["eight-byte"]
        before = set((await issuer.issue(5000, {}, charge=no_charge)).values())
        held = issuer.holder.claims[0].identity
        clock.ns -= 8 * 3600 * 10**9  # eight hours back
        t0 = time.monotonic()
        with pytest.raises(NotReadyError, match="IDMINT_MAX_CLOCK_WAIT") as caught:
            for _ in range(200):  # the current millisecond's slots run out within a few requests
                await issuer.issue(64, {}, charge=no_charge)
        assert time.monotonic() - t0 < 60  # no 28,800 s wait (generous: a loaded machine is slow, not that slow)
        assert caught.value.retry_after >= 1
        assert held in issuer.holder.ahead
        for _ in range(600):  # the background task claims another generator ID (in 30 s: a loaded machine)
            if issuer.generator is not None:
                break
            await anyio.sleep(0.05)
        assert issuer.holder.claims and issuer.holder.claims[0].identity != held
        after = set((await issuer.issue(5000, {}, charge=no_charge)).values())
        assert not before & after
        refused = node.metrics.registry.get_sample_value("idmint_identity_refused_total", {"scheme": "eight-byte"})
        assert refused == 1


async def test_a_static_identity_under_a_clock_stepped_back_stays_not_ready(tmp_path: Path) -> None:
    clock = FakeClock.running_from_now()
    async with started(new_node(tmp_path, clock, max_clock_wait=1.0, eight_byte_generator_id=9)) as node:
        issuer = node.issuers["eight-byte"]
        await issuer.issue(100, {}, charge=no_charge)
        clock.ns -= 3600 * 10**9
        with pytest.raises(NotReadyError):
            for _ in range(200):
                await issuer.issue(64, {}, charge=no_charge)
        await anyio.sleep(1.0)  # time for the background task to act (it must not claim another)
        for _ in range(600):  # its reason, once the task ran: a loaded machine may run it late
            ready, detail = node.readiness()
            if "static generator_id 9" in (detail["eight-byte"].get("reason") or ""):
                break
            await anyio.sleep(0.05)
        assert not ready and "static generator_id 9" in detail["eight-byte"]["reason"], detail["eight-byte"]


async def test_the_background_task_survives_an_unexpected_exception(tmp_path: Path) -> None:
    async with started(new_node(tmp_path, FakeClock.running_from_now(), max_clock_wait=1.0)) as node:
        issuer = node.issuers["siq"]
        holder = issuer.holder
        claim = holder.claims[0]
        real = claim.record_mark
        failures = {"left": 3}

        async def flaky(mark: int) -> None:
            if failures["left"]:
                failures["left"] -= 1
                raise RuntimeError("injected")
            await real(mark)

        claim.record_mark = flaky  # type: ignore[method-assign]
        task = next(t for t in node._tasks if t.get_name() == "idmint-issuer-siq")
        for _ in range(200):
            if not failures["left"] and holder.fault is None and holder.recorded_mark > claim.high_water_mark:
                break
            await anyio.sleep(0.05)
        assert not task.done()
        assert failures["left"] == 0 and holder.fault is None
        await issuer.issue(10, {}, charge=no_charge)


@pytest.mark.integration
async def test_a_read_only_lock_directory_is_not_ready_naming_the_file(tmpfs: Path) -> None:
    (tmpfs / "eight-byte" / "0").mkdir(parents=True)
    read_only(tmpfs)
    backend = EmbeddedBackend(tmpfs)
    pool = pool_spec("eight-byte", minimum=0, maximum=3)
    holder = Owner(host="t", pid=os.getpid(), version="0", started_at="2026-01-01T00:00:00Z")
    try:
        with pytest.raises(NotReadyError, match=rf"lock file {tmpfs}/eight-byte/0/[0-3]\.lock cannot be opened"):
            await backend.claim(pool, holder)
    finally:
        await anyio.run_process(["umount", str(tmpfs)])


@pytest.mark.integration
def test_a_node_starting_on_an_empty_state_directory_says_earlier_ids_cannot_be_protected(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Server(tmp_path, {"IDMINT_STATE_DIR": str(state)})
    try:
        first.wait("/readyz")
        assert "is empty" in first.log() and "cannot be protected" in first.log()
    finally:
        first.stop()
    again = Server(tmp_path, {"IDMINT_STATE_DIR": str(state)})
    try:
        again.wait("/readyz")
        assert "cannot be protected" not in again.log()
    finally:
        again.stop()


async def test_a_clock_stepped_back_under_wiji_starts_a_fresh_generator_at_once(tmp_path: Path) -> None:
    clock = FakeClock.running_from_now()
    async with started(new_node(tmp_path, clock, max_clock_wait=1.0)) as node:
        issuer = node.issuers["wiji"]
        old_part = issuer.generator.random_part  # type: ignore[union-attr]
        before = set((await issuer.issue(1000, {}, charge=no_charge)).values())
        clock.ns -= 8 * 3600 * 10**9
        waits = node.metrics.registry.get_sample_value("idmint_issue_wait_seconds_sum", {"scheme": "wiji"}) or 0.0
        t0 = time.monotonic()
        # more than one microsecond's 65,536 sequences
        after = set((await issuer.issue(200_000, {}, charge=no_charge)).values())
        assert time.monotonic() - t0 < 60  # no 8 h wait (generous: a loaded machine is slow, not that slow)
        # At once: the clock waits it asked for (none, or a fresh generator's microseconds; the time asked, not how
        # long a loaded machine took) come nowhere near max_clock_wait (1 s), let alone the 8 h.
        waited = node.metrics.registry.get_sample_value("idmint_issue_wait_seconds_sum", {"scheme": "wiji"})
        assert waited is not None and waited - waits < 0.1, (waited, waits)
        assert len(after) == 200_000 and not before & after
        assert issuer.generator.random_part != old_part  # type: ignore[union-attr]
