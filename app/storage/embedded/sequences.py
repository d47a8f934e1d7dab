"""Embedded sequence storage: a file per sequence under the state directory, for processes on one machine.

Layout under ``state_dir``::

    sequences/<name>.json    {"start", "cache", "next"}: replaced atomically (write, fsync, rename, fsync dir)
    sequences/<name>.lock    flock(LOCK_EX) held while the record is read, advanced and written
    sequences/.create.lock   flock(LOCK_EX) held while a sequence is created (and the sequences counted)

A reservation reads the record, writes ``next + count`` and fsyncs it (and the directory) before the range is
returned, all under the sequence's lock; so two processes on one state directory (two ``idmint serve``, uvicorn
workers, ``idmint sequence range``) never get overlapping ranges, and a crash at any point loses at most a range
nobody was given. Locks are ``flock`` locks on their own open file description, released by the kernel when the
process dies. All file work runs in a worker thread (``asyncio.to_thread``), never on the event loop; a lock held
longer than ``LOCK_TIMEOUT_S`` (another process stuck) is reported as BackendUnavailableError.

A hand-back (:meth:`~app.storage.sequences.SequenceStore.give_back`) is the same read and write under the same
lock, applied only when the record read is the one this process's latest reservation wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.errors import BackendUnavailableError
from app.storage.sequences import SequenceRecord, SequenceStore, conflict, handed_back, too_many, unknown

FOLDER = "sequences"
CREATE_LOCK = ".create.lock"
LOCK_TIMEOUT_S = 5.0
LOCK_POLL_S = 0.001


class EmbeddedSequenceStore(SequenceStore):
    """Sequences as files under ``state_dir/sequences``."""

    name = "embedded"

    def __init__(self, state_dir: Path, max_sequences: int = 1000) -> None:
        self.folder = Path(state_dir) / FOLDER
        self.max_sequences = max_sequences
        self._wrote: dict[str, SequenceRecord] = {}
        """name -> the record as this process's latest reservation wrote it (what a hand-back compares)."""

    async def start(self) -> None:
        with contextlib.suppress(BackendUnavailableError):  # reported by every call until it can be created
            await asyncio.to_thread(self._ensure_dir)

    def _ensure_dir(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendUnavailableError(f"sequence directory {self.folder} cannot be created: {exc}") from exc

    # -- file helpers (worker thread) -------------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    @contextlib.contextmanager
    def _locked(self, lock_name: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        self._ensure_dir()
        path = self.folder / lock_name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BackendUnavailableError(f"sequence lock {path} cannot be opened: {exc}") from exc
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise BackendUnavailableError(
                            f"sequence lock {path} held by another process for over {timeout:g} s", retry_after=2
                        ) from None
                    time.sleep(LOCK_POLL_S)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _read(self, name: str) -> SequenceRecord | None:
        path = self._path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BackendUnavailableError(f"sequence record {path} cannot be read: {exc}") from exc
        return SequenceRecord.from_json(name, data, str(path))

    def _write(self, record: SequenceRecord) -> None:
        """Atomic, durable replace: temp file fsync'd, renamed over the record, directory fsync'd."""
        path = self._path(record.name)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, record.to_json())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            dir_fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise BackendUnavailableError(f"sequence record {path} cannot be written: {exc}") from exc

    def _create(self, name: str, start: int, cache: int) -> tuple[SequenceRecord, bool]:
        with self._locked(CREATE_LOCK):
            existing = self._read(name)
            if existing is not None:
                if not existing.same_settings(start, cache):
                    raise conflict(existing, start, cache)
                return existing, False
            if sum(1 for _ in self.folder.glob("*.json")) >= self.max_sequences:
                raise too_many(self.max_sequences)
            record = SequenceRecord(name, start, cache, start)
            self._write(record)
            return record, True

    def _get(self, name: str) -> SequenceRecord:
        self._ensure_dir()
        record = self._read(name)
        if record is None:
            raise unknown(name)
        return record

    def _list(self) -> list[SequenceRecord]:
        self._ensure_dir()
        names = sorted(p.stem for p in self.folder.glob("*.json"))[: self.max_sequences]
        records = (self._read(n) for n in names)
        return [r for r in records if r is not None]

    def _reserve(self, name: str, count: int, partial: bool) -> tuple[int, int]:
        if not self._path(name).exists():
            raise unknown(name)
        with self._locked(f"{name}.lock"):
            record = self._read(name)
            if record is None:
                raise unknown(name)
            first, last, after = record.advance(count, partial)
            self._write(after)
            self._wrote[name] = after
            return first, last

    def _give_back(self, name: str, first: int, last: int, timeout: float) -> bool:
        wrote = self._wrote.pop(name, None)
        if wrote is None or wrote.next != last + 1:
            return False
        with self._locked(f"{name}.lock", timeout):
            found = self._read(name)
            if not handed_back(wrote, found, first, last) or found is None:
                return False
            self._write(dataclasses.replace(found, next=first))
            return True

    # -- interface --------------------------------------------------------------------------------------------
    async def create(self, name: str, start: int, cache: int) -> tuple[SequenceRecord, bool]:
        return await asyncio.to_thread(self._create, name, start, cache)

    async def get(self, name: str) -> SequenceRecord:
        return await asyncio.to_thread(self._get, name)

    async def list(self) -> list[SequenceRecord]:
        return await asyncio.to_thread(self._list)

    async def reserve(self, name: str, count: int, partial: bool = False) -> tuple[int, int]:
        return await asyncio.to_thread(self._reserve, name, count, partial)

    async def give_back(self, name: str, first: int, last: int, timeout: float) -> bool:
        # The thread bounds its own lock wait (half the time; a thread is not cancelled with its await), so a lock
        # held elsewhere is named; the await is bounded as a whole (a slow fsync: TimeoutError).
        async with asyncio.timeout(timeout):
            return await asyncio.to_thread(self._give_back, name, first, last, timeout / 2)

    def status(self) -> dict[str, Any]:
        return {"store": self.name, "directory": str(self.folder)}
