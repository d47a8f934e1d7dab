"""File-system primitives with no idmint knowledge: a file written once (first writer wins, durably), a file
replaced atomically, a directory fsync, whether a file is flock-ed, and the kernel's table of flock-ed files. Used
by the embedded lease backend."""

from __future__ import annotations

import fcntl
import os
import uuid
from pathlib import Path


def create_once(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` unless it exists: written and fsynced under a temporary name, then linked into
    place (two processes racing agree on the first one linked) and the directory fsynced. Raises OSError."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if another process wrote it first: then theirs stays
            fsync_dir(path.parent)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def locked(path: Path) -> bool:
    """Whether some process holds an flock on ``path`` (a non-blocking shared lock is refused). False when absent."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def flocked_inodes() -> set[tuple[int, int, int]]:
    """(device major, minor, inode) of every file an flock is held on (``/proc/locks``). Raises OSError."""
    found = set()
    with open("/proc/locks") as table:
        for line in table:
            parts = line.split()
            if len(parts) >= 6 and parts[1] == "FLOCK":
                try:
                    major, minor, inode = parts[5].split(":")
                    found.add((int(major, 16), int(minor, 16), int(inode)))
                except ValueError:
                    continue
    return found


def replace_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: written and fsynced under a temporary name, renamed over it, the
    directory fsynced. Raises OSError (the old content then stays)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(f"short write to {tmp}")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
