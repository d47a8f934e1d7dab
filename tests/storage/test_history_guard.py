"""The history guard's rules on a store whose facts a test sets (:class:`FakeStore`), and on the embedded backend's
real state directory: recorded once, unchanged rounds never refuse, a changed identity, a position or generation
gone back, or a record gone refuse (once, told to listeners) until a fence; a new timeline passes only when
accepted; the guarded sequence store refuses writes (and the gapless points a fence left) but not reads."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from app.errors import BackendUnavailableError, NotReadyError
from app.schemes.pool import IdentityPool
from app.storage.embedded.lease import EmbeddedBackend
from app.storage.history import (
    HISTORY_RECORD,
    PENDING,
    TIMELINE,
    GuardedSequenceStore,
    HistoryGuard,
)
from app.storage.lease import Claim, Facts, LeaseBackend, Owner
from app.storage.sequences import MemorySequenceStore, SequenceRecord


class FakeStore(LeaseBackend):
    """Fleet records in a dict, facts as the test sets them."""

    name = "fake"

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.facts = Facts({"cluster": "a", TIMELINE: 1}, 100)

    async def start(self) -> None: ...

    async def claim(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> Claim:
        raise NotImplementedError

    async def release(self, claim: Claim, final_mark: int | None) -> None: ...

    async def fleet_id(self) -> str:
        return "00000000-0000-0000-0000-000000000000"

    async def history_facts(self) -> Facts:
        return self.facts

    async def read_record(self, name: str) -> dict[str, Any] | None:
        return self.records.get(name)

    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        if self.records.get(name) != expected:
            return False
        self.records[name] = value
        return True

    async def close(self) -> None: ...


def test_recorded_once_then_unchanged_rounds_raise_the_generation() -> None:
    async def main() -> None:
        store = FakeStore()
        guard = HistoryGuard(store)
        assert guard.refusal == PENDING
        await guard.round()
        assert guard.refusal is None and store.records[HISTORY_RECORD]["generation"] == 1
        store.facts = Facts(store.facts.identity, 150)
        for _ in range(3):
            await guard.round()
        assert guard.refusal is None and store.records[HISTORY_RECORD]["generation"] == 4
        assert store.records[HISTORY_RECORD]["position"] == 150
        again = HistoryGuard(store)  # a restart: nothing changed
        await again.round()
        assert again.refusal is None

    asyncio.run(main())


@pytest.mark.parametrize(
    "change", ["identity", "position back", "record restored", "record gone", "timeline, not accepted"]
)
def test_a_store_that_went_back_is_refused_until_fenced(change: str) -> None:
    async def main() -> None:
        store = FakeStore()
        guard = HistoryGuard(store)
        told: list[str | None] = []
        guard.on_change(told.append)
        await guard.round()
        old = dict(store.records[HISTORY_RECORD])
        await guard.round()
        if change == "identity":
            store.facts = Facts({**store.facts.identity, "cluster": "b"}, 100)
        elif change == "position back":
            store.facts = Facts(store.facts.identity, 50)
        elif change == "record restored":
            store.records[HISTORY_RECORD] = old
        elif change == "record gone":
            del store.records[HISTORY_RECORD]
        else:
            store.facts = Facts({**store.facts.identity, TIMELINE: 2}, 100)
        await guard.round()
        await guard.round()
        assert guard.changed and guard.refusal is not None and "idmint storage fence" in guard.refusal
        assert told == [None, guard.refusal]  # checked, then changed: told once
        with pytest.raises(NotReadyError):
            guard.check()
        # A fence: the store's identity now, a new fence ID.
        record = store.records.get(HISTORY_RECORD)
        store.records[HISTORY_RECORD] = {
            "identity": store.facts.identity,
            "position": store.facts.position,
            "generation": 9,
            "fence": {"id": "f1", "mark_floor_ns": 5, "gapless": [["g", None]]},
        }
        del record
        await guard.round()
        assert guard.refusal is None and told[-1] is None
        assert guard.mark_floor_ns == 5 and guard.gapless_pending() == {("g", None)}

    asyncio.run(main())


def test_a_new_timeline_passes_when_accepted_but_not_a_position_gone_back() -> None:
    async def main() -> None:
        store = FakeStore()
        guard = HistoryGuard(store, frozenset({TIMELINE}))
        await guard.round()
        store.facts = Facts({**store.facts.identity, TIMELINE: 2}, 120)
        await guard.round()
        assert guard.refusal is None and store.records[HISTORY_RECORD]["identity"][TIMELINE] == 2
        store.facts = Facts({**store.facts.identity, TIMELINE: 3}, 110)
        await guard.round()
        assert guard.changed

    asyncio.run(main())


def test_the_guarded_sequence_store_refuses_writes_but_not_reads() -> None:
    async def main() -> None:
        store = FakeStore()
        guard = HistoryGuard(store)
        inner = MemorySequenceStore()
        inner.put(SequenceRecord.new("s", 1, 10))
        inner.put(SequenceRecord.new("g", 1, 10, {"mode": "gapless"}))
        guarded = GuardedSequenceStore(inner, guard)
        assert await guarded.reserve("s", 5) == (1, 5, 1)  # the first write checks the history first
        store.facts = Facts({**store.facts.identity, "cluster": "b"}, 100)
        await guard.round()
        with pytest.raises(BackendUnavailableError, match="storage went back in time"):
            await guarded.reserve("s", 5)
        assert (await guarded.get("s")).next == 6
        assert not await guarded.give_back("s", 1, 5, 1.0)
        store.records[HISTORY_RECORD] = {
            "identity": store.facts.identity,
            "generation": 9,
            "fence": {"id": "f1", "gapless": [["g", None]]},
        }
        await guard.round()
        assert await guarded.reserve("s", 5) == (6, 5, 1)
        with pytest.raises(BackendUnavailableError, match="idmint sequence setval g N"):
            await guarded.update("g", ("record",), lambda docs: None)  # type: ignore[return-value]

    asyncio.run(main())


@pytest.mark.parametrize("how", ["whole directory", "files into the same directory"])
def test_an_embedded_state_directory_put_back_is_seen(tmp_path: Path, how: str) -> None:
    async def main() -> None:
        state, copy = tmp_path / "state", tmp_path / "copy"
        backend = EmbeddedBackend(state)
        await backend.start()
        guard = HistoryGuard(backend)
        await guard.round()
        await guard.round()
        shutil.copytree(state, copy)
        await guard.round()
        if how == "whole directory":
            shutil.rmtree(state)
            shutil.copytree(copy, state)
        else:
            shutil.copytree(copy, state, dirs_exist_ok=True)
        fresh = HistoryGuard(EmbeddedBackend(state))  # a process started on it: only the witness remembers
        await fresh.round()
        assert fresh.changed, fresh.refusal
        await guard.round()  # the running one
        assert guard.changed

    asyncio.run(main())
