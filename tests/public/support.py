"""Key files for the public-ID tests."""

from __future__ import annotations

from pathlib import Path

SECRET_1 = "11" * 32
SECRET_2 = "2f" * 32
OTHER_SECRET = "a5" * 32


def key_file(path: Path, *keys: tuple[int, str]) -> Path:
    """A key file at ``path`` of ``(id, secret)`` keys."""
    path.write_text("".join(f'[[key]]\nid = {key_id}\nsecret = "{secret}"\n\n' for key_id, secret in keys))
    return path
