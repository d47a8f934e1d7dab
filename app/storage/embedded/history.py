"""What the embedded store (a state directory) is now, for :class:`~app.storage.history.HistoryGuard`, and the
witness kept outside it.

* identity: the state directory's inode. A directory copied back whole (``rm -r state && cp -a backup state``, a
  volume restored from a snapshot as a new directory) has another one.
* witness: ``<parent>/.<name>.idmint-history`` beside the state directory (``{"generation": n, "state_dir": path}``),
  raised with the fleet's history record every round. Files copied back *into* the same directory (``rsync``,
  ``cp -a backup/. state/``, keeping its inode) bring an older record back, and the witness, which the copy did
  not touch, holds a higher generation.

What this cannot see: a state directory restored together with its witness (both copied back, a whole-disk
snapshot of the parent), or restored where the witness cannot be kept (a parent directory the process may not
write, or one that does not outlive the container: the witness is then missing, which decides nothing), and a
copy restored whose inode happens to equal the directory it replaces. A copy taken less than one check interval
(``IDMINT_HISTORY_CHECK_INTERVAL``) before the last round of a process that then crashed carries that
round's generation, and is not told apart either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from app.errors import BackendUnavailableError
from app.storage.embedded.files import replace_file
from app.storage.lease import Facts

WITNESS_SUFFIX = ".idmint-history"


def witness_path(state_dir: Path) -> Path:
    """``<parent>/.<name>.idmint-history`` of ``state_dir`` (made absolute first)."""
    state_dir = state_dir.absolute()
    return state_dir.parent / f".{state_dir.name}{WITNESS_SUFFIX}"


def read_facts(state_dir: Path) -> Facts:
    """The state directory's inode. Raises BackendUnavailableError when it cannot be read."""
    try:
        inode = os.stat(state_dir).st_ino
    except OSError as exc:
        raise BackendUnavailableError(f"state directory {state_dir} cannot be read: {exc}") from exc
    return Facts({"directory_inode": inode})


def read_witness(state_dir: Path) -> int:
    """The generation in the witness (0: none, or unreadable). Raises nothing."""
    try:
        value = json.loads(witness_path(state_dir).read_bytes())
        generation = value.get("generation") if isinstance(value, dict) else None
    except (OSError, ValueError):
        return 0
    return generation if type(generation) is int and generation > 0 else 0


def write_witness(state_dir: Path, generation: int) -> None:
    """Replace the witness with ``generation`` (only ever raised). Raises BackendUnavailableError when it cannot
    be written."""
    path = witness_path(state_dir)
    if read_witness(state_dir) >= generation:
        return
    data = json.dumps({"generation": generation, "state_dir": str(state_dir.absolute())}).encode()
    try:
        replace_file(path, data)
    except OSError as exc:
        raise BackendUnavailableError(f"history witness {path} cannot be written: {exc}") from exc
