"""Micro-benchmark of the ksuid and snowflake batch encoders beside wiji's, in one run, and print the figures.

Every case encodes (or generates and encodes) one batch of --size IDs (65,536 by default). Rounds interleave the
cases (wiji, ksuid..., snowflake..., wiji, ...) so a noisy neighbour hits them alike; per case the best round's
IDs/s is printed with its ratio to wiji's base32 encoder measured in the same run.

Cases:
  wiji base32 / hex                    the reference: WijiBatch.encode (one batch, one microsecond's sequences)
  ksuid base62 / hex                   KsuidBatch.encode: runs sharing a 24-character head + 62**3 tail table
  ksuid base62, any values (limbs)     ksuid_batch.base62_rows on random 160-bit values: long division by 62**5
  snowflake twitter x16 decimal / hex  SnowflakeBatch.encode, 16 worker IDs: 65,536 IDs in one millisecond
  snowflake twitter x1 decimal         one worker ID: 16 milliseconds' worth (lookback) in one batch
  snowflake sonyflake x256 decimal     256 machine IDs: 65,536 IDs in one 10 ms unit, sequence above worker
  snowflake decimal, any values        snowflake_batch.decimal_text on random 63-bit values (no head sharing)
  ... + generate                       the generator's generate() and the encode together (fake clock)

Usage: python bench/bench_codecs_b.py [--size 65536] [--rounds 7] [--seconds 0.3]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable

import numpy as np

from app.schemes import ksuid, snowflake, wiji
from app.schemes.ksuid import generator as ksuid_batch
from app.schemes.snowflake import generator as snowflake_batch

NOW_NS = 1_763_888_400_000_000_000  # 2025-11-23T09:00:00Z


class SteppingClock:
    """A fake clock that moves on by ``step_ns`` per reading (a new unit for every generate call)."""

    def __init__(self, step_ns: int) -> None:
        self.ns = NOW_NS
        self.step_ns = step_ns

    def __call__(self) -> int:
        self.ns += self.step_ns
        return self.ns


def cases(size: int) -> dict[str, Callable[[], object]]:
    rng = random.Random(1)
    wiji_batch = wiji.WijiGenerator(clock=lambda: NOW_NS).generate(size)
    ksuid_batch_ = ksuid.KsuidGenerator(clock=lambda: NOW_NS).generate(size)
    ksuid_limbs = ksuid_batch.limbs([rng.getrandbits(160) for _ in range(size)])
    twitter16 = snowflake_batch.SnowflakeGenerator(snowflake.TWITTER, range(16), clock=lambda: NOW_NS).generate(size)
    twitter1 = snowflake_batch.SnowflakeGenerator(
        snowflake.TWITTER, [1], clock=lambda: NOW_NS, lookback_units=size // 4096
    ).generate(size)
    sony256 = snowflake_batch.SnowflakeGenerator(snowflake.SONYFLAKE, range(256), clock=lambda: NOW_NS).generate(size)
    any63 = np.array([rng.getrandbits(63) for _ in range(size)], dtype=np.uint64)
    # A frozen clock gives twitter a little less than `size` (each unit starts at a random one of its first 100
    # slots): the encoders are timed on whatever the generator issued.

    ksuid_generator = ksuid.KsuidGenerator(clock=SteppingClock(1_000_000_000))
    twitter_generator = snowflake_batch.SnowflakeGenerator(snowflake.TWITTER, range(16), clock=SteppingClock(1_000_000))
    return {
        "wiji base32": lambda: wiji_batch.encode("base32"),
        "wiji hex": lambda: wiji_batch.encode("hex"),
        "ksuid base62": lambda: ksuid_batch_.encode("base62"),
        "ksuid hex": lambda: ksuid_batch_.encode("hex"),
        "ksuid base62, any values (limbs)": lambda: ksuid_batch.base62_rows(ksuid_limbs).tobytes(),
        "ksuid base62 + generate": lambda: ksuid_generator.generate(size).encode("base62"),
        "snowflake twitter x16 decimal": lambda: twitter16.encode("decimal"),
        "snowflake twitter x16 hex": lambda: twitter16.encode("hex"),
        "snowflake twitter x1 decimal": lambda: twitter1.encode("decimal"),
        "snowflake sonyflake x256 decimal": lambda: sony256.encode("decimal"),
        "snowflake decimal, any values": lambda: snowflake_batch.decimal_text(any63),
        "snowflake twitter x16 decimal + generate": lambda: twitter_generator.generate(size).encode("decimal"),
    }


def rate(function: Callable[[], object], size: int, seconds: float) -> float:
    """IDs/s of ``function`` (one batch of ``size`` per call), timed over about ``seconds``."""
    calls, start = 0, time.perf_counter()
    while True:
        function()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * size / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=65_536, help="IDs per batch (default 65536)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds; the best is kept (default 7)")
    parser.add_argument("--seconds", type=float, default=0.3, help="seconds per case and round (default 0.3)")
    args = parser.parse_args()

    table = cases(args.size)
    for function in table.values():  # warm up: tables, scratch buffers
        function()
    best = dict.fromkeys(table, 0.0)
    for _ in range(args.rounds):
        for name, function in table.items():
            best[name] = max(best[name], rate(function, args.size, args.seconds))
    reference = best["wiji base32"]
    print(
        f"batch size {args.size:,}, best of {args.rounds} interleaved rounds of {args.seconds:g} s, "
        f"{os.cpu_count()} CPUs (shared), load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'case':44} {'IDs/s':>15} {'x wiji base32':>14}")
    for name, ids_per_second in best.items():
        print(f"{name:44} {ids_per_second:15,.0f} {ids_per_second / reference:14.2f}")


if __name__ == "__main__":
    main()
