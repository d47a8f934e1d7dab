"""The claim ledger in the state directory: append-only daily files, shared by every process on it.

Layout under ``state_dir``::

    ledger/since                    the ledger's first moment (ns), written once, create-exclusive
    ledger/claims-YYYY-MM-DD.jsonl  one JSON record per line (app.storage.ledger.ClaimRecord), appended under flock;
                                    a later line of the same record replaces an earlier one

Retention drops whole files: a file older than the retention (by its date) is deleted once every record whose
latest line it holds has ended; a record still open in it is first appended again to today's file.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from app.storage.ledger import NS_IN_S, ClaimRecord, LedgerStore

LEDGER_DIR = "ledger"
SINCE_FILE = "since"
FILE_PREFIX = "claims-"
FILE_SUFFIX = ".jsonl"


def day_of(ns: int) -> str:
    return datetime.fromtimestamp(ns // NS_IN_S, tz=UTC).strftime("%Y-%m-%d")


class EmbeddedLedgerStore(LedgerStore):
    """Append-only daily files under ``state_dir/ledger`` (``clock``: ns since the epoch, names the day's file)."""

    name = "embedded"

    def __init__(self, state_dir: Path, clock: Callable[[], int]) -> None:
        self.folder = Path(state_dir) / LEDGER_DIR
        self.clock = clock
        self._offsets: dict[Path, int] = {}

    async def start(self) -> None:
        await asyncio.to_thread(self.folder.mkdir, parents=True, exist_ok=True)

    def _file(self, ns: int) -> Path:
        return self.folder / f"{FILE_PREFIX}{day_of(ns)}{FILE_SUFFIX}"

    def _files(self) -> list[Path]:
        return sorted(self.folder.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"))

    async def write(self, record: ClaimRecord) -> None:
        await asyncio.to_thread(self._append, [record])

    def _append(self, records: list[ClaimRecord]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = b"".join(r.to_json() + b"\n" for r in records)
        fd = os.open(self._file(self.clock()), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.write(fd, data) != len(data):
                raise OSError("short write to the claim ledger")
            os.fsync(fd)
        finally:
            os.close(fd)

    async def read(self, full: bool) -> list[ClaimRecord]:
        return await asyncio.to_thread(self._read, full)

    def _read(self, full: bool) -> list[ClaimRecord]:
        if full:
            self._offsets.clear()
        out: list[ClaimRecord] = []
        files = self._files()
        for path in list(self._offsets):
            if path not in files:
                del self._offsets[path]
        for path in files:
            start = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1  # a line being appended now is read next time
            for line in data[:end].splitlines():
                try:
                    out.append(ClaimRecord.from_json(line))
                except ValueError:
                    continue  # a damaged line names nobody; the rest of the file still does
            self._offsets[path] = start + end
        return out

    async def compact(self, before_ns: int, records: list[ClaimRecord]) -> int:
        return await asyncio.to_thread(self._compact, before_ns)

    def _compact(self, before_ns: int) -> int:
        cutoff = f"{FILE_PREFIX}{day_of(before_ns)}{FILE_SUFFIX}"
        old = [p for p in self._files() if p.name < cutoff]
        if not old:
            return 0
        latest: dict[str, tuple[Path, ClaimRecord]] = {}
        for path in self._files():
            try:
                lines = path.read_bytes().splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                try:
                    record = ClaimRecord.from_json(line)
                except ValueError:
                    continue
                latest[record.record] = (path, record)
        carried = [r for p, r in latest.values() if p in old and r.open]
        if carried:
            self._append(carried)
        dropped = sum(1 for p, r in latest.values() if p in old and not r.open)
        for path in old:
            path.unlink(missing_ok=True)
            self._offsets.pop(path, None)
        return dropped

    async def since_ns(self, now_ns: int) -> int:
        return await asyncio.to_thread(self._since, now_ns)

    def _since(self, now_ns: int) -> int:
        path = self.folder / SINCE_FILE
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            try:
                os.write(fd, str(now_ns).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        try:
            return int(path.read_text().strip())
        except ValueError as exc:  # written half by a crash: the first moment is unknown, so is "reach"
            raise OSError(f"claim ledger file {path} is damaged ({exc}); delete it") from exc

    async def owner_alive(self, record: ClaimRecord) -> tuple[bool | None, int | None]:
        """On this machine: whether the owner's process still runs (its file locks die with it)."""
        pid = record.owner.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            return None, None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False, None
        except PermissionError:
            return True, None
        return True, None
