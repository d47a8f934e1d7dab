"""The suite's cache on this machine, kept between runs and clones: ``$IDMINT_TEST_CACHE`` or
``$XDG_CACHE_HOME/idmint-tests`` (default ``~/.cache/idmint-tests``), one folder per user of it (the podman base
image, mypy's incremental cache). Only what is checked before use goes there: a stale entry costs time, never a
wrong result."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(name: str) -> Path:
    """The cache folder ``name`` (not created here)."""
    root = os.environ.get("IDMINT_TEST_CACHE")
    if root:
        return Path(root) / name
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "idmint-tests" / name
