"""Micro-benchmark of the column-wise batch encoders, side by side in one run, and print the figures.

For each scheme and text form: a chunk of ``--batch`` IDs (default 65,536) is issued once, then encoding it is timed
(``encode``), and so is issuing a fresh chunk and encoding it (``issue+encode``, what a stream does per chunk). A
scheme whose per-tick sequence runs out (SIQ: 2,048 IDs per 1/65,536 s) is called again until the chunk is full, so
its issue+encode includes the clock it waits for. Schemes run interleaved for ``--rounds`` rounds (the machine is
shared and noisy); the median of each is printed with its ratio to wiji's canonical base32 encoder measured in the
same run.

Usage: python bench/bench_codecs.py [--batch 65536] [--rounds 7] [--repeat 20] [--rng ssl.RAND_bytes|os.urandom].
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import os
import ssl
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.schemes.base import Batch, Generator, RandomSource
from app.schemes.hlc_ulid import HlcUlidGenerator
from app.schemes.ksuid import KsuidGenerator
from app.schemes.muid import MuidGenerator
from app.schemes.siq import SiqGenerator
from app.schemes.typeid import TypeIdGenerator
from app.schemes.ulid import UlidGenerator
from app.schemes.uuidv7 import Uuidv7Generator
from app.schemes.wiji import WijiGenerator

Case = tuple[str, str, Callable[[RandomSource], Generator], dict[str, str]]
CASES: list[Case] = [
    ("wiji", "base32", lambda rng: WijiGenerator(rng=rng), {}),
    ("wiji", "uuid", lambda rng: WijiGenerator(rng=rng), {}),
    ("hlc-ulid", "ulid", lambda rng: HlcUlidGenerator(7, rng=rng), {}),
    ("hlc-ulid", "hex", lambda rng: HlcUlidGenerator(7, rng=rng), {}),
    ("uuidv7", "uuid", lambda rng: Uuidv7Generator(rng=rng), {}),
    ("uuidv7", "hex", lambda rng: Uuidv7Generator(rng=rng), {}),
    ("ulid", "ulid", lambda rng: UlidGenerator(rng=rng), {}),
    ("ulid", "uuid", lambda rng: UlidGenerator(rng=rng), {}),
    ("ulid", "hex", lambda rng: UlidGenerator(rng=rng), {}),
    ("typeid", "typeid", lambda rng: TypeIdGenerator(Uuidv7Generator(rng=rng)), {}),
    ("typeid", "typeid", lambda rng: TypeIdGenerator(Uuidv7Generator(rng=rng)), {"prefix": "user"}),
    ("typeid", "uuid", lambda rng: TypeIdGenerator(Uuidv7Generator(rng=rng)), {}),
    ("muid", "canonical", lambda rng: MuidGenerator(0x10000000007), {}),
    ("siq", "did", lambda rng: SiqGenerator(7, "example.com"), {}),
    ("siq", "hex", lambda rng: SiqGenerator(7, "example.com"), {}),
    ("ksuid", "base62", lambda rng: KsuidGenerator(random=rng), {}),
]
RANDOM_SOURCES: dict[str, RandomSource] = {"os.urandom": os.urandom, "ssl.RAND_bytes": ssl.RAND_bytes}
"""The CSPRNG the generators draw from (issue+encode): the kernel's (a syscall) or OpenSSL's DRBG (user space)."""
REFERENCE = 0
"""Ratios are to wiji's canonical (base32) encoder."""


def issue_chunk(gen: Generator, count: int, opts: dict[str, str]) -> list[Batch]:
    """The batches of ``count`` IDs (calling again while the generator comes back short)."""
    batches = []
    while count:
        batches.append(gen.generate(count, **opts))
        count -= batches[-1].count
    return batches


def issue_encode(gen: Generator, count: int, fmt: str, opts: dict[str, str]) -> None:
    """Issue ``count`` IDs (calling again while the generator comes back short) and encode each batch."""
    while count:
        batch = gen.generate(count, **opts)
        batch.encode(fmt)
        count -= batch.count


def ids_per_second(run: Callable[[], object], count: int, repeat: int) -> float:
    run()  # warm: tables, scratch buffers
    start = time.perf_counter()
    for _ in range(repeat):
        run()
    return count * repeat / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--rng",
        choices=sorted(RANDOM_SOURCES),
        default="ssl.RAND_bytes",
        help="random source (default: the served generators', Scheme.new_generator's default)",
    )
    args = parser.parse_args()

    generators = [make(RANDOM_SOURCES[args.rng]) for _, _, make, _ in CASES]
    chunks = [issue_chunk(gen, args.batch, opts) for gen, (_, _, _, opts) in zip(generators, CASES)]
    encode: list[list[float]] = [[] for _ in CASES]
    issue: list[list[float]] = [[] for _ in CASES]
    for _ in range(args.rounds):
        for i, ((_, fmt, _, opts), gen, chunk) in enumerate(zip(CASES, generators, chunks)):
            encode[i].append(ids_per_second(lambda: [batch.encode(fmt) for batch in chunk], args.batch, args.repeat))
            issue[i].append(ids_per_second(lambda: issue_encode(gen, args.batch, fmt, opts), args.batch, args.repeat))

    enc = [statistics.median(v) for v in encode]
    iss = [statistics.median(v) for v in issue]
    print(
        f"batch {args.batch:,} IDs, median of {args.rounds} rounds x {args.repeat} batches, random source "
        f"{args.rng}; ratio to wiji base32"
    )
    print(f"{'scheme':<10}{'form':<14}{'encode IDs/s':>16}{'ratio':>8}{'issue+encode IDs/s':>22}{'ratio':>8}")
    for (scheme, fmt, _, opts), e, s in zip(CASES, enc, iss):
        label = fmt + (f" ({opts['prefix']}_)" if opts.get("prefix") else "")
        print(f"{scheme:<10}{label:<14}{e:>16,.0f}{e / enc[REFERENCE]:>8.2f}{s:>22,.0f}{s / iss[REFERENCE]:>8.2f}")


if __name__ == "__main__":
    main()
