"""The embedded sequence store: one file per sequence under the state directory, advanced under an flock."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.errors import BackendUnavailableError, SequenceConflictError, SequenceOverflowError, UnknownSequenceError
from app.storage.embedded.sequences import EmbeddedSequenceStore
from app.storage.sequences import MAX_VALUE, Docs, Outcome, Run, period_doc, run_last

pytestmark = pytest.mark.anyio


def span(run: Run) -> tuple[int, int]:
    """(first, last) of a run of increment 1."""
    assert run[2] == 1
    return run[0], run_last(run)


ROOT = Path(__file__).resolve().parents[3]


async def test_create_is_idempotent_and_settings_never_change(tmp_path: Path) -> None:
    store = EmbeddedSequenceStore(tmp_path, max_sequences=2)
    try:
        await store.start()
        record, created = await store.create("orders", 1, 1000)
        assert created and record.next == 1
        again, created = await store.create("orders", 1, 1000)
        assert not created and again == record
        with pytest.raises(SequenceConflictError, match="other settings"):
            await store.create("orders", 1, 50)
        await store.create("invoices", 100, 10)
        with pytest.raises(SequenceConflictError, match="at most 2 sequences"):
            await store.create("third", 1, 1)
        assert [r.name for r in await store.list()] == ["invoices", "orders"]
        with pytest.raises(UnknownSequenceError):
            await store.get("nope")
        with pytest.raises(UnknownSequenceError):
            await store.reserve("nope", 1)
    finally:
        await store.close()


async def test_ranges_are_contiguous_durable_and_refused_past_the_maximum(tmp_path: Path) -> None:
    store = EmbeddedSequenceStore(tmp_path)
    await store.create("orders", 5, 10)
    assert span(await store.reserve("orders", 3)) == (5, 7)
    assert span(await store.reserve("orders", 2**40)) == (8, 2**40 + 7)
    reopened = EmbeddedSequenceStore(tmp_path)
    assert (await reopened.get("orders")).next == 2**40 + 8
    assert json.loads((tmp_path / "sequences" / "orders.json").read_text()) == {
        "start": 5,
        "cache": 10,
        "next": 2**40 + 8,
    }

    await store.create("edge", MAX_VALUE - 9, 10)
    with pytest.raises(SequenceOverflowError, match=r"would pass the maximum value 2\*\*63-1"):
        await store.reserve("edge", 11)
    assert span(await store.reserve("edge", 100, partial=True)) == (MAX_VALUE - 9, MAX_VALUE)
    with pytest.raises(SequenceOverflowError, match="0 remain"):
        await store.reserve("edge", 1, partial=True)


async def test_an_unreadable_record_is_never_taken_as_empty(tmp_path: Path) -> None:
    store = EmbeddedSequenceStore(tmp_path)
    await store.create("orders", 1, 10)
    (tmp_path / "sequences" / "orders.json").write_text('{"start": 1, "cache": 10}')
    with pytest.raises(BackendUnavailableError, match="unreadable"):
        await store.reserve("orders", 1)


WORKER = """
import asyncio, json, random, sys
from app.storage.embedded.sequences import EmbeddedSequenceStore
async def main():
    store = EmbeddedSequenceStore(sys.argv[1])
    out = []
    for _ in range(int(sys.argv[2])):
        first, count, _ = await store.reserve("orders", random.randint(1, 50))
        out.append((first, first + count - 1))
    print(json.dumps(out))
asyncio.run(main())
"""


@pytest.mark.integration
async def test_processes_sharing_a_state_directory_never_overlap(tmp_path: Path) -> None:
    store = EmbeddedSequenceStore(tmp_path)
    await store.create("orders", 1, 10)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp_path), "150"], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    ranges = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0
            ranges += [tuple(r) for r in json.loads(out)]
    finally:
        for proc in procs:  # a worker left running by a failure above
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    ranges.sort()
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges)), "two processes got overlapping ranges"
    assert ranges[-1][1] == (await store.get("orders")).next - 1


async def test_give_back_applies_only_over_this_process_s_latest_reservation(tmp_path: Path) -> None:
    mine, other = EmbeddedSequenceStore(tmp_path), EmbeddedSequenceStore(tmp_path)  # two processes' stores
    await mine.create("orders", 1, 10)
    assert span(await mine.reserve("orders", 100)) == (1, 100)
    assert await mine.give_back("orders", 41, 100, 1.0)  # 1..40 issued, 41..100 unused
    assert (await other.get("orders")).next == 41
    assert not await mine.give_back("orders", 41, 100, 1.0)  # never twice
    assert span(await other.reserve("orders", 10)) == (41, 50)  # the next reservation follows the last one issued

    assert span(await mine.reserve("orders", 100)) == (51, 150)
    assert span(await other.reserve("orders", 5)) == (151, 155)  # someone reserved since
    assert not await mine.give_back("orders", 60, 150, 1.0)
    assert (await other.get("orders")).next == 156

    assert span(await mine.reserve("orders", 10)) == (156, 165)
    assert not await mine.give_back("orders", 160, 164, 1.0)  # not the top of the reservation: nothing goes back
    assert not await mine.give_back("orders", 160, 165, 1.0)  # and the chance is spent
    assert span(await mine.reserve("orders", 10)) == (166, 175)
    record = tmp_path / "sequences" / "orders.json"
    record.write_text(json.dumps({"next": 176, "start": 1, "cache": 10}, indent=2))  # rewritten, same values
    assert await mine.give_back("orders", 170, 175, 1.0)  # same values: the record is still what we wrote
    assert (await other.get("orders")).next == 170

    assert span(await mine.reserve("orders", 10)) == (170, 179)
    with (tmp_path / "sequences" / "orders.lock").open("w") as held:  # another process holds the lock
        import fcntl

        fcntl.flock(held, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises((BackendUnavailableError, TimeoutError)) as caught:  # the lock wait, or the bound
            await mine.give_back("orders", 175, 179, 1.0)
        assert time.monotonic() - started < 2.0
        if isinstance(caught.value, BackendUnavailableError):
            assert "held by another process for over 0.5 s" in str(caught.value)
    assert (await other.get("orders")).next == 180


async def test_events_a_crash_kept_from_the_audit_file_are_recovered_from_the_journal(tmp_path: Path) -> None:
    store = EmbeddedSequenceStore(tmp_path)
    doc = period_doc("2026-11-27")
    at = 1_795_780_800 * 10**9

    def change(n: int) -> Callable[[Docs], Outcome[None]]:
        def apply(docs: Docs) -> Outcome[None]:
            event = {"id": f"{at + n:020d}-0000000{n}", "at_ns": at + n, "event": "reserve", "period": "2026-11-27"}
            return Outcome(None, {doc: {"next": n}}, [event])

        return apply

    await store.update("orders", (doc,), change(1))
    audit_file = tmp_path / "sequences" / ".audit" / "orders" / "2026-11-27.jsonl"
    written = audit_file.read_bytes()
    assert json.loads(written)["id"].endswith("-00000001")
    journal = json.loads((tmp_path / "sequences" / ".periods" / "orders" / "2026-11-27.json").read_text())["journal"]
    assert journal["offset"] == 0 and journal["file"] == "2026-11-27"
    audit_file.write_bytes(b"")  # as if the process died after renaming the document, before the append
    events, _ = await store.audit("orders", None, 10)  # a read recovers them
    assert [e["id"][-1] for e in events] == ["1"]
    audit_file.write_bytes(b'{"id": "cut')  # or died in the middle of an append: a partial line
    await store.update("orders", (doc,), change(2))  # the next write of the document checks its journal first
    events, _ = await store.audit("orders", None, 10)
    assert [e["id"][-1] for e in events] == ["1", "2"]  # each once, the partial line skipped
    assert (await store.update("orders", (doc,), lambda docs: Outcome(docs[doc]))) == {"next": 2}  # journal unseen
