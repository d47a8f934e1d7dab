"""The embedded lease backend: node identities for one machine, from OS file locks under a state directory.

Layout under ``state_dir``::

    <scheme>/<group or "_">/<identity>.lock   flock(LOCK_EX) held for as long as the identity is ours;
                                              its content names the owner (host, pid, version, start time)
    <scheme>/<group or "_">/<identity>.mark   {"high_water_mark": <native units>} -- replaced atomically

An OS file lock is released by the kernel when its process dies, so a crashed process frees its identities at
once; its mark file stays, and the next holder never issues at or below that mark. Locks are ``flock`` locks
(one per open file description), so two claims in one process conflict just as two processes do
(``uvicorn --workers N``, two ``idmint serve``).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.errors import BackendUnavailableError, PoolExhaustedError, RevokeRefusedError
from app.schemes.pool import IdentityPool
from app.storage.draw import draw
from app.storage.embedded import history
from app.storage.embedded.files import create_once, flocked_inodes, locked, replace_file
from app.storage.lease import Claim, Facts, LeaseBackend, Owner, check_record_name, parse_record, record_bytes

log = logging.getLogger("idmint.lease")


class EmbeddedClaim(Claim):
    """An identity held through an open, flock-ed lock file."""

    def __init__(self, scheme: str, identity: int, key: str, fd: int, mark_path: Path, mark: int) -> None:
        self.scheme = scheme
        self.identity = identity
        self.key = key
        self.high_water_mark = mark
        self._fd: int | None = fd
        self.mark_path = mark_path
        self._recorded = mark
        self._writing = threading.Lock()
        """Held while the mark file is written or the lock file closed: a write still running in a worker thread
        (its await cancelled) ends before the release writes the final mark and frees the identity, and none
        starts after."""

    @property
    def lost(self) -> bool:
        return self._fd is None

    async def record_mark(self, mark: int) -> None:
        if self._fd is None:
            raise BackendUnavailableError(f"{self.scheme} identity {self.identity} was released")
        if mark <= self._recorded:
            return
        # fsync takes milliseconds on a real disk: off the event loop (the holder's mark lock keeps writes in order)
        await asyncio.to_thread(self._write_while_held, mark)
        self._recorded = max(self._recorded, mark)

    def _write_while_held(self, mark: int) -> None:
        with self._writing:
            if self._fd is None:  # released while this write waited for its thread: the identity is not ours
                raise BackendUnavailableError(f"{self.scheme} identity {self.identity} was released")
            _write_mark(self.mark_path, mark)

    def release(self, final_mark: int | None) -> None:
        """Write the exact ``final_mark`` (when given and still held) and free the identity, after any mark write in
        flight. Raises BackendUnavailableError when the final mark cannot be written (the identity is freed
        anyway)."""
        with self._writing:
            try:
                if final_mark is not None and self._fd is not None:
                    _write_mark(self.mark_path, final_mark)
            finally:
                self._close()

    def close(self) -> None:
        with self._writing:
            self._close()

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


class MarkUnreadableError(BackendUnavailableError):
    """A high-water mark file exists but does not hold ``{"high_water_mark": <integer >= -1>}`` (-1: released
    before anything was issued)."""


def _read_mark(path: Path) -> int:
    """The mark recorded in ``path`` (-1 when there is none). Strict: the file must be a JSON object whose
    ``high_water_mark`` is an integer >= -1 (not a boolean, a float or a string). Raises MarkUnreadableError naming
    the file otherwise, and BackendUnavailableError when the file cannot be read at all."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return -1
    except OSError as exc:
        raise BackendUnavailableError(f"high-water mark file {path} cannot be read: {exc}") from exc
    try:
        value = json.loads(text)["high_water_mark"]
    except (ValueError, KeyError, TypeError) as exc:
        # A mark we cannot read must not be taken as "no mark": that could repeat IDs.
        raise MarkUnreadableError(f"high-water mark file {path} is unreadable: {exc!r}") from exc
    if type(value) is not int or value < -1:  # bool is an int subclass, and must not pass
        raise MarkUnreadableError(f"high-water mark file {path} must hold an integer >= -1, got {value!r}")
    return value


def _write_mark(path: Path, mark: int) -> None:
    """Replace ``path`` atomically with ``mark`` (fsync'd, under a temporary name of this write's own: a mark write
    in a worker thread and a release's final mark may run at once, and neither may see the other's half-written
    file). Raises BackendUnavailableError naming the file on any OSError (disk full, read-only file system,
    permissions); the old mark then stays as it was."""
    try:
        replace_file(path, json.dumps({"high_water_mark": mark}).encode())
    except OSError as exc:
        raise BackendUnavailableError(f"high-water mark file {path} cannot be written: {exc}") from exc


RECORDS_DIR = "records"
"""``<state_dir>/records/<name>.json``: the fleet records (:meth:`EmbeddedBackend.read_record`)."""
MEMBERS_DIR = "members"
"""``<state_dir>/members/<token>.lock``: one per running process, flock-ed (see :meth:`EmbeddedBackend._join`)."""
MEMBER_TOKEN_LEN = 32
_HEX = frozenset("0123456789abcdef")


FLEET_FILE = "fleet.json"
"""The state directory's fleet ID: ``{"fleet_id": "<uuid>", "created_at": "<RFC 3339>"}``."""


def _read_fleet_id(path: Path) -> str:
    """The fleet ID in ``path``; FileNotFoundError when absent, ValueError/KeyError/TypeError when it holds none."""
    return str(uuid.UUID(str(json.loads(path.read_bytes())["fleet_id"])))


def _now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class EmbeddedBackend(LeaseBackend):
    """File-lock leases under ``state_dir``; one machine. Claims never expire; marks are written every 0.5 s."""

    name = "embedded"
    mark_interval = 0.5
    mark_horizon = 1.0

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self._claims: list[EmbeddedClaim] = []
        self.refused: dict[Path, str] = {}
        self._member: tuple[str, int] | None = None
        """Mark files found unreadable (path -> reason): their identities are never claimed by this process."""

    async def start(self) -> None:
        fresh = not self.state_dir.is_dir() or not any(self.state_dir.iterdir())
        self._ensure_dir()
        if fresh:
            log.warning(
                "state directory %s is empty: starting without high-water marks, so IDs this machine issued "
                "earlier (under another state directory, or before it was wiped) cannot be protected from "
                "repetition; keep this directory on persistent storage",
                self.state_dir,
            )
        if self._member is None:
            self._join()

    def _ensure_dir(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendUnavailableError(f"state directory {self.state_dir} cannot be created: {exc}") from exc

    async def claim(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> Claim:
        return self.claim_sync(pool, owner, exclude)

    def claim_sync(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> Claim:
        self._ensure_dir()
        folder = self.state_dir / pool.scheme / (pool.group or "_")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendUnavailableError(f"state directory {folder} cannot be created: {exc}") from exc
        # Reuse identities this machine already used (their marks are known) before drawing new ones.
        known = sorted(int(p.stem) for p in folder.glob("*.mark") if p.stem.isdigit())
        for identity in draw(pool, prefer=known, exclude=exclude):
            claim = self._try_lock(pool, folder, identity, owner)
            if claim is not None:
                self._claims.append(claim)
                return claim
        what = "the statically assigned" if pool.static is not None else "every"
        bad = [reason for path, reason in self.refused.items() if path.parent == folder]
        if bad:
            raise BackendUnavailableError(
                f"{pool.scheme}: no {pool.kind} can be claimed; refused for an unreadable mark: " + "; ".join(bad),
                retry_after=5,
            )
        raise PoolExhaustedError(
            f"{pool.scheme}: {what} {pool.kind} is held by another process on this machine "
            f"(state directory {self.state_dir})",
            retry_after=5,
        )

    def _try_lock(self, pool: IdentityPool, folder: Path, identity: int, owner: Owner) -> EmbeddedClaim | None:
        """The claim on ``identity``, or None when another process holds it or its mark file is unreadable (that
        identity is refused: logged with the file named, and named again if the whole pool turns out refused).
        Raises BackendUnavailableError when the lock file cannot be opened or written."""
        lock_path = folder / f"{identity}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BackendUnavailableError(f"lock file {lock_path} cannot be opened: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            mark = _read_mark(folder / f"{identity}.mark")
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"holder": owner.as_dict(), "identity": identity}).encode(), 0)
        except MarkUnreadableError as exc:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            log.error("%s: refused %s %d: %s", pool.scheme, pool.kind, identity, exc.reason)
            self.refused[lock_path.with_suffix(".mark")] = exc.reason
            return None
        except OSError as exc:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise BackendUnavailableError(f"lock file {lock_path} cannot be written: {exc}") from exc
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        self.refused.pop(lock_path.with_suffix(".mark"), None)
        key = str(lock_path.relative_to(self.state_dir))
        log.debug("claimed %s %s %d (mark %d)", pool.scheme, pool.kind, identity, mark)
        return EmbeddedClaim(pool.scheme, identity, key, fd, folder / f"{identity}.mark", mark)

    async def fleet_id(self) -> str:
        """The ID in ``<state_dir>/fleet.json``, written once (create-exclusive: two processes starting on one
        state directory agree on the first one written; written and fsynced before it is linked into place).
        Raises BackendUnavailableError naming the file when it cannot be read or written, or holds no fleet ID."""
        return await asyncio.to_thread(self._fleet_id_sync)

    def _fleet_id_sync(self) -> str:
        self._ensure_dir()
        path = self.state_dir / FLEET_FILE
        try:
            try:
                return _read_fleet_id(path)
            except FileNotFoundError:
                pass
            data = json.dumps({"fleet_id": str(uuid.uuid4()), "created_at": _now_rfc3339()}).encode()
            create_once(path, data)  # another process's, written first, is the fleet's
            return _read_fleet_id(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BackendUnavailableError(
                f"fleet ID file {path} cannot be read or written, or holds no fleet ID ({exc!r}); if it is damaged, "
                "delete it: the next start writes a new one (this state directory then counts as a new fleet)"
            ) from exc

    async def history_facts(self) -> Facts:
        return await asyncio.to_thread(history.read_facts, self.state_dir)

    async def read_witness(self) -> int:
        return await asyncio.to_thread(history.read_witness, self.state_dir)

    async def write_witness(self, generation: int) -> None:
        await asyncio.to_thread(history.write_witness, self.state_dir, generation)

    async def read_record(self, name: str) -> dict[str, Any] | None:
        """``<state_dir>/records/<name>.json``; None when absent."""
        return await asyncio.to_thread(self._read_record, check_record_name(name))

    def _read_record(self, name: str) -> dict[str, Any] | None:
        path = self.state_dir / RECORDS_DIR / f"{name}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BackendUnavailableError(f"fleet record file {path} cannot be read: {exc}") from exc
        return parse_record(data, str(path))

    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        """Compare and replace ``<state_dir>/records/<name>.json`` under an flock of ``records/.lock`` (every
        process on this state directory takes it), written atomically (fsync, rename)."""
        return await asyncio.to_thread(self._swap_record, check_record_name(name), expected, value)

    def _swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        folder = self.state_dir / RECORDS_DIR
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BackendUnavailableError(f"fleet records under {folder} cannot be written: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if self._read_record(name) != expected:
                return False
            replace_file(folder / f"{name}.json", record_bytes(value))
            return True
        except OSError as exc:
            raise BackendUnavailableError(f"fleet record {folder / name}.json cannot be written: {exc}") from exc
        finally:
            os.close(fd)

    def member_token(self) -> str | None:
        return self._member[0] if self._member is not None else None

    def _join(self) -> None:
        """Hold ``members/<uuid>.lock`` for as long as this backend is open: :meth:`has_member` of any process on
        this state directory (and of none on a copy of it) then sees this process."""
        folder = self.state_dir / MEMBERS_DIR
        token = uuid.uuid4().hex
        try:
            folder.mkdir(exist_ok=True)
            fd = os.open(folder / f"{token}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            log.warning("cannot write a member lock under %s: %s (peer fleets cannot confirm this node)", folder, exc)
            return
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._member = (token, fd)
        for stale in folder.glob("*.lock"):  # members that have exited: their locks are free
            if stale.stem != token and not locked(stale):
                stale.unlink(missing_ok=True)

    async def has_member(self, token: str) -> bool | None:
        """Whether a process holds ``members/<token>.lock`` in this state directory."""
        if len(token) != MEMBER_TOKEN_LEN or not set(token) <= _HEX:
            return False
        return await asyncio.to_thread(locked, self.state_dir / MEMBERS_DIR / f"{token}.lock")

    async def count_held(self, pool: IdentityPool) -> int | None:
        """Lock files of the region's slice that some process holds, read from the kernel's lock table
        (``/proc/locks``): nothing is locked to count, so claims never collide with a count. None where there is
        no such table."""
        return await asyncio.to_thread(self._count_held_sync, pool)

    def _count_held_sync(self, pool: IdentityPool) -> int | None:
        folder = self.state_dir / pool.scheme / (pool.group or "_")
        first, last = pool.slice
        try:
            held_inodes = flocked_inodes()
            held = 0
            for path in folder.glob("*.lock"):
                if path.stem.isdigit() and first <= int(path.stem) <= last:
                    st = path.stat()
                    held += (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) in held_inodes
        except OSError:
            return None
        return held

    async def revoke(self, pool: IdentityPool, identity: int, by: dict[str, Any]) -> dict[str, Any]:
        """Refused: a claim here is an OS file lock held by a process on this machine, freed when it exits."""
        raise RevokeRefusedError(
            "the embedded backend's claims are OS file locks held by a process on this machine: stop that process "
            "(GET /v1/admin/claims names its pid); its lock is freed the moment it exits"
        )

    async def release(self, claim: Claim, final_mark: int | None) -> None:
        self.release_sync(claim, final_mark)

    def release_sync(self, claim: Claim, final_mark: int | None) -> None:
        assert isinstance(claim, EmbeddedClaim)
        try:
            # The final mark is exact (the highest timestamp really issued), so it may lower the reservation
            # recorded ahead of the clock: a clean restart then need not wait for it.
            claim.release(final_mark)
        finally:
            if claim in self._claims:
                self._claims.remove(claim)

    async def close(self) -> None:
        for claim in list(self._claims):
            self.release_sync(claim, None)
        if self._member is not None:
            token, fd = self._member
            self._member = None
            (self.state_dir / MEMBERS_DIR / f"{token}.lock").unlink(missing_ok=True)
            os.close(fd)

    def status(self) -> dict[str, Any]:
        return {"backend": self.name, "state_dir": str(self.state_dir)}
