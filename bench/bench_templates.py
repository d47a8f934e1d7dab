"""What a template costs a ``next`` answer: rendering texts against writing plain decimal integers, in-process.

For one integer and for ``count=1000``, times the body part ``next`` writes: the plain integers as
:func:`app.sequences.text.encode_runs` writes them (``1,2,3``), against the rendered texts as JSON strings
(:meth:`app.sequences.template.Bound.encode`, after finding the period and the bound template as ``next`` would:
:meth:`~app.sequences.period.PeriodRule.period_at` and :meth:`~app.sequences.template.Template.bind`, both
remembered), for ``INV-{yyyy}{mm}{dd}-{seq:06}`` without a check digit and with each algorithm. The kinds are
timed in turn, round after round (alternated), and the medians of the rounds are printed with their ratio to plain.

``--sweep`` also times runs of 1..64 integers rendered one by one against column-wise, to place
``SCALAR_RUN_MAX`` (the length up to which runs are rendered one by one).

Usage: python bench/bench_templates.py [--rounds 15] [--sweep]. Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.sequences.period import PeriodRule  # noqa: E402
from app.sequences.template import Template  # noqa: E402
from app.sequences.text import encode_runs  # noqa: E402

SOURCE = "INV-{yyyy}{mm}{dd}-{seq:06}"
FIRST = 123_457
NOW_NS = 1_795_780_800 * 10**9  # 2026-11-27T12:00Z


def per_call_us(fn: Callable[[], object], seconds: float = 0.05) -> float:
    """Microseconds per call of ``fn``, over as many calls as fill ``seconds`` (after one warm-up call)."""
    fn()
    calls, start = 0, time.perf_counter()
    batch = 1
    while True:
        for _ in range(batch):
            fn()
        calls += batch
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / calls * 1e6
        batch *= 2


def kinds(count: int) -> dict[str, Callable[[], object]]:
    rule = PeriodRule("daily", "Europe/Paris")
    out: dict[str, Callable[[], object]] = {"plain": lambda: encode_runs([(FIRST, FIRST + count - 1)])}
    for check in (None, "luhn", "damm", "mod97"):
        source = SOURCE + ("{check}" if check else "")
        template = Template.compile(source, "daily", check)

        def render(template: Template = template) -> bytes:
            return template.bind(rule.period_at(NOW_NS).first_day).encode(FIRST, count)

        out[f"template{'+' + check if check else ''}"] = render
    return out


def bench(rounds: int) -> None:
    for count in (1, 1000):
        table = kinds(count)
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(rounds):
            for name, fn in table.items():
                times[name].append(per_call_us(fn))
        plain = statistics.median(times["plain"])
        print(f"count={count}: median of {rounds} alternating rounds, us per answer (and per integer)")
        for name, values in times.items():
            median = statistics.median(values)
            print(
                f"  {name:16s} {median:9.2f} us  ({median / count * 1000:8.1f} ns/integer)  x{median / plain:5.1f} "
                f"of plain"
            )


def sweep() -> None:
    template = Template.compile(SOURCE + "{check}", "daily", "luhn")
    rule = PeriodRule("daily", "Europe/Paris")
    bound = template.bind(rule.period_at(NOW_NS).first_day)
    print("run length: one by one vs column-wise, us (luhn)")
    for count in (4, 8, 12, 16, 24, 32, 48, 64):
        scalar = per_call_us(lambda: bound.encode_each(FIRST, count, 1))
        block = per_call_us(lambda: bound.encode_columns(FIRST, count, 1, 6))
        print(f"  {count:3d}  {scalar:7.2f}  {block:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sweep", action="store_true")
    args = parser.parse_args()
    bench(args.rounds)
    if args.sweep:
        sweep()


if __name__ == "__main__":
    main()
