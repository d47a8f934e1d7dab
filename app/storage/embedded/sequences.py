"""Embedded sequence storage: a file per document under the state directory, for processes on one machine.

Layout under ``state_dir`` (documents and events: :mod:`app.storage.sequences`)::

    sequences/<name>.json                     the record (today's file, byte for byte for a plain sequence)
    sequences/<name>.lock                     flock(LOCK_EX) held while any document of <name> is read and written
    sequences/.tombstones/<name>.json         the tombstone of a deleted sequence
    sequences/.periods/<name>/<key>.json      the allocation point of one period
    sequences/.audit/<name>/<YYYY-MM-DD>.jsonl  audit events, one JSON object a line, by the UTC day they happened

An update (:meth:`~app.storage.sequences.SequenceStore.update`) takes the sequence's lock, reads its documents,
calls the change, replaces each document written (temporary file fsync'd, renamed over it, directory fsync'd),
then deletes the documents deleted (puts first: a crash in between leaves a record beside its tombstone, never
neither), all before the lock is released; so two processes on one state directory (two ``idmint serve``, uvicorn
workers, ``idmint sequence range``) never interleave, and a crash at any point loses at most a range nobody was
given. Locks are ``flock`` locks on their own open file description, released by the kernel when the process dies.
All file work runs in a worker thread (``asyncio.to_thread``), never on the event loop; a lock held longer than
``LOCK_TIMEOUT_S`` (another process stuck) is reported as BackendUnavailableError.

Events are durable exactly when their change is: the document an update writes carries them in a ``journal``
member (``{"file": <day>, "offset": <byte offset>, "events": [...]}``), written in the same rename as the change;
they are appended to the day's audit file just after, and the next write of that document (or a read of the audit
log) checks that the bytes at ``offset`` are theirs, appending them if a crash came first. The ``journal`` member is
this backend's own: it is never handed to the code above.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.errors import BackendUnavailableError
from app.storage import sequences as shared
from app.storage.embedded.files import fsync_dir, replace_file
from app.storage.sequences import (
    PERIOD_KEY,
    PERIOD_PREFIX,
    RECORD,
    AuditPage,
    Change,
    SequenceRecord,
    SequenceStore,
    T,
)

FOLDER = "sequences"
TOMBSTONES = ".tombstones"
PERIODS = ".periods"
AUDIT = ".audit"
JOURNAL = "journal"
LOCK_TIMEOUT_S = 5.0
LOCK_POLL_S = 0.001
LOCK_STRIPES = 64
NS_IN_S = 1_000_000_000


def day_of(ns: int) -> str:
    """The UTC day of an instant (ns since the epoch): the audit file it goes to."""
    return datetime.fromtimestamp(ns // NS_IN_S, tz=UTC).strftime("%Y-%m-%d")


def _lines(events: Sequence[dict[str, Any]]) -> bytes:
    return b"".join(shared.dumps(e) + b"\n" for e in events)


class EmbeddedSequenceStore(SequenceStore):
    """Sequences as files under ``state_dir/sequences``."""

    name = "embedded"

    def __init__(self, state_dir: Path, max_sequences: int = 1000) -> None:
        super().__init__(max_sequences)
        self.folder = Path(state_dir) / FOLDER
        self._stripes = [asyncio.Lock() for _ in range(LOCK_STRIPES)]

    def _stripe(self, name: str) -> asyncio.Lock:
        return self._stripes[hash(name) % LOCK_STRIPES]

    async def start(self) -> None:
        with contextlib.suppress(BackendUnavailableError):  # reported by every call until it can be created
            await asyncio.to_thread(self._ensure_dir)

    def _ensure_dir(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendUnavailableError(f"sequence directory {self.folder} cannot be created: {exc}") from exc

    # -- file helpers (worker thread) -------------------------------------------------------------------------
    def _path(self, name: str, doc: str = RECORD) -> Path:
        if doc == RECORD:
            return self.folder / f"{name}.json"
        if doc == shared.TOMBSTONE:
            return self.folder / TOMBSTONES / f"{name}.json"
        return self.folder / PERIODS / name / f"{shared.check_doc(doc)[len(PERIOD_PREFIX) :]}.json"

    def _audit_dir(self, name: str) -> Path:
        return self.folder / AUDIT / name

    @contextlib.contextmanager
    def _locked(self, name: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        self._ensure_dir()
        path = self.folder / f"{name}.lock"
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

    def _read(self, path: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(the document without its journal, its journal) at ``path``; (None, None) when absent."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            raise BackendUnavailableError(f"sequence document {path} cannot be read: {exc}") from exc
        obj = shared.loads(data, str(path))
        journal = obj.pop(JOURNAL, None)
        if journal is not None and not (
            isinstance(journal, dict)
            and isinstance(journal.get("events"), list)
            and isinstance(journal.get("offset"), int)
        ):
            raise BackendUnavailableError(f"sequence document {path} holds an unreadable journal")
        return obj, journal

    def _write(self, path: Path, obj: dict[str, Any]) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(path, shared.dumps(obj))
        except OSError as exc:
            raise BackendUnavailableError(f"sequence document {path} cannot be written: {exc}") from exc

    def _delete(self, path: Path) -> None:
        try:
            path.unlink()
            fsync_dir(path.parent)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise BackendUnavailableError(f"sequence document {path} cannot be deleted: {exc}") from exc

    def _end_of(self, path: Path) -> tuple[int, bool]:
        """(size of the audit file, whether a newline must come first: a crash cut its last line)."""
        try:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    return 0, False
                f.seek(size - 1)
                return size, f.read(1) != b"\n"
        except FileNotFoundError:
            return 0, False

    def _append(self, path: Path, data: bytes, newline_first: bool) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                payload = (b"\n" if newline_first else b"") + data
                if os.write(fd, payload) != len(payload):
                    raise OSError(f"short write to {path}")
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise BackendUnavailableError(f"sequence audit file {path} cannot be written: {exc}") from exc

    def _flush(self, name: str, journal: dict[str, Any] | None) -> None:
        """Make sure a document's journal is in its audit file (appended now if a crash came before)."""
        if not journal:
            return
        path = self._audit_dir(name) / f"{journal.get('file')}.jsonl"
        if PERIOD_KEY.fullmatch(str(journal.get("file"))) is None:
            raise BackendUnavailableError(f"sequence {name}: a journal names no audit file: {journal.get('file')!r}")
        data = _lines(journal["events"])
        offset = journal["offset"]
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                if f.read(len(data)) == data:
                    return
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise BackendUnavailableError(f"sequence audit file {path} cannot be read: {exc}") from exc
        size, cut = self._end_of(path)
        self._append(path, data, cut)

    def _update(self, name: str, docs: Sequence[str], change: Change[T], lock_timeout: float) -> Any:
        paths = {doc: self._path(name, shared.check_doc(doc)) for doc in docs}
        with self._locked(name, lock_timeout):
            found = {doc: self._read(path) for doc, path in paths.items()}
            outcome = change({doc: obj for doc, (obj, _) in found.items()})
            shared.check_outcome(docs, outcome)
            events = list(outcome.events)
            for doc, value in outcome.writes.items():
                if value is None:
                    continue
                self._flush(name, found[doc][1])
                if events:
                    day = day_of(int(events[0]["at_ns"]))
                    audit = self._audit_dir(name) / f"{day}.jsonl"
                    size, cut = self._end_of(audit)
                    self._write(paths[doc], {**value, JOURNAL: {"file": day, "offset": size + cut, "events": events}})
                    self._append(audit, _lines(events), cut)
                else:
                    self._write(paths[doc], value)
            for doc, value in outcome.writes.items():
                if value is None:
                    self._flush(name, found[doc][1])
                    self._delete(paths[doc])
        return outcome

    def _get(self, name: str) -> SequenceRecord:
        self._ensure_dir()
        obj, _ = self._read(self._path(name))
        if obj is None:
            raise shared.unknown(name)
        return SequenceRecord.from_obj(name, obj, str(self._path(name)))

    def _list(self) -> list[SequenceRecord]:
        self._ensure_dir()
        names = sorted(p.stem for p in self.folder.glob("*.json"))[: self.max_sequences]
        out = []
        for name in names:
            obj, _ = self._read(self._path(name))
            if obj is not None:
                out.append(SequenceRecord.from_obj(name, obj, str(self._path(name))))
        return out

    def _audit(self, name: str, after: str | None, limit: int, period: str | None) -> AuditPage:
        with self._locked(name):  # every journal a crash left unflushed goes to the audit files first
            journals = [self._read(self._path(name))[1]]
            folder = self.folder / PERIODS / name
            if folder.is_dir():
                journals += [self._read(p)[1] for p in sorted(folder.glob("*.json"))]
            for journal in journals:
                self._flush(name, journal)
        files = sorted(self._audit_dir(name).glob("*.jsonl")) if self._audit_dir(name).is_dir() else []
        day, offset = "", 0
        if after is not None:
            day, _, at = after.partition(":")
            offset = int(at) if at.isdigit() else 0
        page: list[dict[str, Any]] = []
        scanned = 0
        for path in files:
            if path.stem < day:
                continue
            start = offset if path.stem == day else 0
            with open(path, "rb") as f:
                f.seek(start)
                position = start
                for line in f:
                    if not line.endswith(b"\n"):
                        break  # an append in progress (or cut by a crash): not yet an event
                    position += len(line)
                    scanned += 1
                    try:
                        event = shared.loads(line, str(path))
                    except BackendUnavailableError:
                        continue
                    if period is None or (event.get("period") or "never") == period:
                        page.append(event)
                    if len(page) >= limit or scanned >= shared.AUDIT_SCAN_MAX:
                        more = position < path.stat().st_size or path != files[-1]
                        return page, (f"{path.stem}:{position}" if more else None)
        return page, None

    def _prune_names(self) -> list[str]:
        self._ensure_dir()
        names = {p.stem for p in self.folder.glob("*.json")}
        for kind in (AUDIT, PERIODS):
            folder = self.folder / kind
            if folder.is_dir():
                names.update(p.name for p in folder.iterdir() if p.is_dir())
        return sorted(names)

    def _prune(self, name: str, events_before_ns: int, periods_before: str) -> int:
        cut_day = day_of(events_before_ns)
        removed = 0
        with self._locked(name):  # journals go to their files first; then what is old goes, journals with it
            paths = [self._path(name)]
            periods = self.folder / PERIODS / name
            if periods.is_dir():
                paths += sorted(periods.glob("*.json"))
            for path in paths:
                obj, journal = self._read(path)
                if obj is None:
                    continue
                self._flush(name, journal)
                if path.parent == periods and path.stem < periods_before:
                    self._delete(path)
                    removed += 1
                elif journal is not None and str(journal.get("file")) < cut_day:
                    self._write(path, obj)  # its events are in a file about to go: the journal goes too
            audit = self._audit_dir(name)
            for path in sorted(audit.glob("*.jsonl")) if audit.is_dir() else []:
                if path.stem < cut_day:
                    path.unlink(missing_ok=True)
                    removed += 1
        return removed

    # -- interface --------------------------------------------------------------------------------------------
    async def get(self, name: str) -> SequenceRecord:
        return await asyncio.to_thread(self._get, name)

    async def list(self) -> list[SequenceRecord]:
        return await asyncio.to_thread(self._list)

    async def update(self, name: str, docs: Sequence[str], change: Change[T], timeout: float | None = None) -> T:
        # The thread bounds its own lock wait (half the time given; a thread is not cancelled with its await), so a
        # lock held elsewhere is named; the await is bounded as a whole (a slow fsync: TimeoutError).
        lock_timeout = LOCK_TIMEOUT_S if timeout is None else timeout / 2
        async with asyncio.timeout(timeout), self._stripe(name):
            outcome = await asyncio.to_thread(self._update, name, docs, change, lock_timeout)
        if outcome.error is not None:
            raise outcome.error
        return outcome.result  # type: ignore[no-any-return]

    async def audit(self, name: str, after: str | None, limit: int, period: str | None = None) -> AuditPage:
        async with self._stripe(name):
            return await asyncio.to_thread(self._audit, name, after, limit, period)

    async def prune(self, events_before_ns: int, periods_before: str) -> int:
        removed = 0
        for name in await asyncio.to_thread(self._prune_names):
            async with self._stripe(name):
                removed += await asyncio.to_thread(self._prune, name, events_before_ns, periods_before)
        return removed

    def status(self) -> dict[str, Any]:
        return {**super().status(), "directory": str(self.folder)}
