"""Generate the blocking Python client from the asyncio one (httpcore's ``unasync`` approach): the client's code is
written once, in ``idmint_client/_async_client.py``, and ``idmint_client/_client.py`` is that file with each
substitution below made (whole words only), then tidied by ruff (:func:`generate`).

::

    python clients/python/scripts/unasync.py           # rewrite _client.py
    python clients/python/scripts/unasync.py --check   # exit 1, showing the difference, when _client.py is not
                                                       # what it would be rewritten to (the test command runs this)

What the two clients do differently (the lock of a buffer, background refills) lives in
``idmint_client/_concurrency.py``, written by hand for both: each ``AsyncX`` there becomes ``X`` here.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "idmint_client"
FILES = {PACKAGE / "_async_client.py": PACKAGE / "_client.py"}
"""Each source and the file generated from it."""

SUBSTITUTIONS = [
    ("async def ", "def "),
    ("async with ", "with "),
    ("async for ", "for "),
    ("await ", ""),
    ("AsyncClient", "Client"),
    ("AsyncBaseTransport", "BaseTransport"),
    ("AsyncIterator", "Iterator"),
    ("AsyncCondition", "Condition"),
    ("AsyncRefills", "Refills"),
    ("async_deadline_transport", "deadline_transport"),
    ("__aenter__", "__enter__"),
    ("__aexit__", "__exit__"),
    ("aclose", "close"),
    ("aiter_bytes", "iter_bytes"),
]
"""(async, sync) pairs, made in this order; each matches whole words only (``aclose`` in ``_aclose_all`` is left)."""

HEADER = "# Generated from {source} by clients/python/scripts/unasync.py: edit that file, then run the script.\n"

TIDY = [["check", "--select", "I,UP028", "--fix", "--unsafe-fixes", "--exit-zero", "--quiet"], ["format", "--quiet"]]
"""The ruff commands the generated text goes through, in turn."""

PATTERNS = [
    (re.compile(r"(?<!\w)" + re.escape(old) + (r"(?!\w)" if old[-1].isidentifier() else "")), new)
    for old, new in SUBSTITUTIONS
]


def unasync(text: str) -> str:
    """``text`` (an async source) with every substitution made, not yet formatted."""
    for pattern, new in PATTERNS:
        text = pattern.sub(new, text)
    return text


def generate(source: Path, target: Path) -> str:
    """The text ``target`` should hold: ``source`` unasynced, under the generated-file header, then through ruff:
    imports sorted (renamed ones move), ``for x in it: yield x`` made ``yield from it`` (UP028), formatted (a call
    without ``await`` may fit on one line)."""
    text = HEADER.format(source=source.name) + unasync(source.read_text())
    for ruff in TIDY:
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *ruff, "--stdin-filename", str(target), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
        )
        text = done.stdout
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when a generated file differs; change nothing")
    args = parser.parse_args(argv)
    stale = 0
    for source, target in FILES.items():
        wanted = generate(source, target)
        current = target.read_text() if target.exists() else ""
        if current == wanted:
            continue
        if args.check:
            stale += 1
            diff = difflib.unified_diff(
                current.splitlines(keepends=True), wanted.splitlines(keepends=True), str(target), "generated"
            )
            sys.stdout.writelines(diff)
            print(f"{target} is not what {source.name} generates: run python clients/python/scripts/unasync.py")
        else:
            target.write_text(wanted)
            print(f"wrote {target}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
