"""Count the CPU instructions a scheme's own code costs per answer, with callgrind, in one process, and print them.

bench_instructions.py counts a whole server; its per-request figures move by about 10% between runs on this shared
machine (the background work it subtracts is rated while the server idles), which hides a change of a few thousand
instructions in one scheme's code. This counts only ``generate`` + :class:`app.issuing.issuer.Issued` +
:func:`app.api.issuing.issue_body` (the work a hot issue answer does above the shared serving path) for each case,
in one Python process under ``valgrind --tool=callgrind``: after warm-up calls the counters are zeroed
(``callgrind_control -z``), ``--calls`` calls run and are dumped (``-d``), then the same for twice as many; the
difference over ``--calls`` is the figure, free of the constant cost of the zero and dump requests. Figures move
by about 500 between runs.

Cases: ``single:<scheme>`` (one ID, the canonical form), ``batch:<scheme>`` (``count=1000``, a tenth of the
calls) and ``chunk:<scheme>`` (a stream's chunk of 65,536 IDs encoded in the canonical form, a hundredth of the
calls: the encoder alone, ``encode_lines``, as a stream runs it per chunk, from one batch generated beforehand,
so a generator that spins on the clock does not move the figure) and ``stream:<scheme>`` (a stream's chunk of
65,536 IDs as the stream gets it: every batch the generator returned for it, waits for the clock between them,
generated beforehand in :data:`STREAM_CHUNKS` chunks taken in turn, then every batch encoded, as
:mod:`app.api.streams` does per chunk; a hundredth of the calls). ``--tree DIR`` counts another checkout's code
(``git archive <rev> | tar -x -C DIR``) with this interpreter: run it for both and compare.

Usage: python bench/bench_scheme_code.py [--cases single:wiji,single:siq,batch:uuidv7] [--calls 1000] [--tree DIR]
Needs: valgrind. Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CASES = (
    "single:wiji,single:muid,single:eight-byte,single:hlc-ulid,single:siq,single:uuidv7,single:ulid,single:typeid,"
    "single:ksuid,single:snowflake,batch:wiji,batch:uuidv7,batch:siq,batch:ksuid,batch:hlc-ulid"
)
BATCH_COUNT = 1000
CHUNK_COUNT = 65_536
WARM_CALLS = 300
STREAM_CHUNKS = 8
"""Chunks generated beforehand for a ``stream:`` case (its calls take them in turn)."""


def generator_of(name: str) -> tuple[object, object]:
    """``(scheme, generator)`` for ``name``, on the real clock, as a node would hold it (one identity each)."""
    if name == "wiji":
        from app.schemes.wiji import SCHEME, WijiGenerator

        return SCHEME, WijiGenerator()
    if name == "muid":
        from app.schemes.muid import NEW_MEDALLION_MIN, SCHEME, MuidGenerator

        return SCHEME, MuidGenerator(NEW_MEDALLION_MIN + 5)
    if name == "eight-byte":
        from app.schemes.eight_byte.generator import EightByteGenerator
        from app.schemes.eight_byte.scheme import SCHEME

        return SCHEME, EightByteGenerator(list(range(64)), 3)
    if name == "hlc-ulid":
        from app.schemes.hlc_ulid import HlcUlidGenerator
        from app.schemes.hlc_ulid.scheme import SCHEME

        return SCHEME, HlcUlidGenerator(7)
    if name == "siq":
        from app.schemes.siq.generator import SiqGenerator
        from app.schemes.siq.scheme import SCHEME

        return SCHEME, SiqGenerator(7, "example.com")
    if name == "uuidv7":
        from app.schemes.uuidv7 import SCHEME, Uuidv7Generator

        return SCHEME, Uuidv7Generator()
    if name == "ulid":
        from app.schemes.ulid import SCHEME, UlidGenerator

        return SCHEME, UlidGenerator()
    if name == "typeid":
        from app.schemes.typeid import SCHEME, TypeIdGenerator
        from app.schemes.uuidv7 import Uuidv7Generator

        return SCHEME, TypeIdGenerator(Uuidv7Generator())
    if name == "ksuid":
        from app.schemes.ksuid.generator import KsuidGenerator
        from app.schemes.ksuid.scheme import SCHEME

        return SCHEME, KsuidGenerator()
    if name == "snowflake":
        from app.schemes.snowflake.codec import NAMED_LAYOUTS
        from app.schemes.snowflake.generator import SnowflakeGenerator
        from app.schemes.snowflake.scheme import SCHEME

        return SCHEME, SnowflakeGenerator(NAMED_LAYOUTS["twitter"], [5])
    raise SystemExit(f"unknown scheme {name!r}")


def answer(case: str) -> Callable[[], object]:
    """One call of ``case``: generate, wrap, frame the body."""
    from app.api.issuing import issue_body
    from app.issuing.issuer import Issued

    kind, _, name = case.partition(":")
    if kind not in ("single", "batch", "chunk", "stream"):
        raise SystemExit(f"a case is single:, batch:, chunk: or stream:<scheme>, got {case!r}")
    scheme, generator = generator_of(name)
    fmt = scheme.resolve_format(None)  # type: ignore[attr-defined]
    if kind == "stream":
        return stream_chunks(generator, fmt)
    if kind == "chunk":
        batch = generator.generate(CHUNK_COUNT)  # type: ignore[attr-defined]
        return lambda: lines_of(batch, fmt)
    count = 1 if kind == "single" else BATCH_COUNT
    return lambda: issue_body(name, fmt, Issued(scheme, [generator.generate(count)]))  # type: ignore[arg-type, attr-defined]


def lines_of(batch: Any, fmt: str) -> object:
    """A batch's text as a stream takes it: ``encode_lines`` (``encode`` in a tree without it)."""
    return getattr(batch, "encode_lines", batch.encode)(fmt)


def stream_chunks(generator: Any, fmt: str) -> Callable[[], object]:
    """One call of a ``stream:`` case: the next of :data:`STREAM_CHUNKS` chunks generated beforehand (every batch
    the generator returned, sleeping for the clock between them), every batch encoded as a stream does."""

    chunks = []
    for _ in range(STREAM_CHUNKS):
        batches, remaining = [], CHUNK_COUNT
        while remaining:
            batch = generator.generate(remaining)
            if batch.count:
                batches.append(batch)
                remaining -= batch.count
            else:
                time.sleep(max(generator.wait_ns(), 0) / 1e9)
        chunks.append(batches)
    turn = itertools.cycle(chunks)

    def one() -> object:
        return [lines_of(batch, fmt) for batch in next(turn)]

    return one


def count_inside(cases: list[str], calls: int, out_file: str) -> dict[str, float]:
    """Run under callgrind: each case's instructions per call (see the module docstring)."""
    pid = str(os.getpid())

    def control(flag: str) -> None:
        subprocess.run(["callgrind_control", flag, pid], check=True, capture_output=True)

    def dumped() -> int:
        control("-d")
        dumps = sorted(Path(out_file).parent.glob(Path(out_file).name + ".*"), key=lambda p: int(p.suffix[1:]))
        match = re.search(r"^(?:summary|totals):\s+(\d+)", dumps[-1].read_text(errors="replace"), re.MULTILINE)
        assert match is not None, dumps[-1]
        return int(match.group(1))

    figures: dict[str, float] = {}
    for case in cases:
        run = answer(case)
        n = (
            calls
            if case.startswith("single")
            else max(1, calls // (100 if case.startswith(("chunk", "stream")) else 10))
        )
        for _ in range(min(WARM_CALLS, n)):
            run()
        control("-z")
        for _ in range(n):
            run()
        once = dumped()
        control("-z")
        for _ in range(2 * n):
            run()
        figures[case] = (dumped() - once) / n
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated single:<scheme> / batch:<scheme>")
    ap.add_argument("--calls", type=int, default=1000, help="calls counted per single case (a tenth for batches)")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose app/ is counted (default: this)")
    ap.add_argument("--inside", help=argparse.SUPPRESS)  # set when re-run under valgrind: the dump file
    args = ap.parse_args()
    cases = args.cases.split(",")
    if args.inside:
        sys.path.insert(0, str(args.tree.resolve()))
        print(json.dumps(count_inside(cases, args.calls, args.inside)))
        return
    for tool in ("valgrind", "callgrind_control"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="idmint-scheme-code-") as tmp:
        out_file = str(Path(tmp) / "callgrind.out")
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out_file}",
            sys.executable,
            __file__,
            *("--cases", args.cases, "--calls", str(args.calls), "--tree", str(args.tree), "--inside", out_file),
        ]
        done = subprocess.run(
            command, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}
        )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"instructions per call, generate + Issued + issue_body, callgrind, {args.tree}:")
    wiji = figures.get("single:wiji")
    for case, figure in figures.items():
        ratio = f"   wiji / it {wiji / figure:.2f}" if wiji and case.startswith("single") else ""
        print(f"    {case:22s} {figure:12,.0f}{ratio}")


if __name__ == "__main__":
    main()
