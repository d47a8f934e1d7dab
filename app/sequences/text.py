"""Decimal text of contiguous runs of integers, column-wise (numpy), for ``next`` responses.

A run ``first..last`` is cut at multiples of ``BLOCK`` (10**BLOCK_DIGITS); inside one block every integer shares
its high digits (one constant prefix, written once per block) and only the low ``BLOCK_DIGITS`` digits vary, so
the cost per integer is ``BLOCK_DIGITS`` vectorised divisions whatever the integer's length. Integers below
``BLOCK`` are cut where their length changes; short runs take the scalar path (``str``).

Runs with an increment (``step`` > 1) are written column-wise from ``np.arange`` (their integers share no block).

Shapes: ``encode_runs([(first, count, step), ...]) -> b"first,first+step,...,..."`` (comma separated, no brackets;
:data:`app.storage.sequences.Run`); integers must be in 0..2**63-1 (a sequence's domain).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

BLOCK_DIGITS = 5
BLOCK = 10**BLOCK_DIGITS
SCALAR_RUN_MAX = 64
"""Runs up to this many integers are formatted with ``str`` (numpy's fixed cost is higher)."""
COMMA = ord(",")
ZERO = ord("0")
MAX_DIGITS = len(str(2**63 - 1))
"""The digits of the largest integer (19): 10**19 is past int64."""


def _scalar(first: int, last: int) -> bytes:
    return ",".join(map(str, range(first, last + 1))).encode("ascii")


def _short(first: int, last: int) -> bytes:
    """first..last, all with the same number of digits, below BLOCK (no prefix)."""
    width = len(str(first)) + 1
    n = last - first + 1
    out = np.empty((n, width), dtype=np.uint8)
    out[:, width - 1] = COMMA
    low = np.arange(first, last + 1, dtype=np.int32)
    for col in range(width - 2, -1, -1):
        quotient = low // 10
        out[:, col] = low - quotient * 10 + ZERO
        low = quotient
    return out.tobytes()[:-1]


def _block(first: int, last: int) -> bytes:
    """first..last inside one BLOCK-aligned block, first >= BLOCK (so the prefix has no leading zeros)."""
    prefix = str(first // BLOCK).encode("ascii")
    width = len(prefix) + BLOCK_DIGITS + 1
    n = last - first + 1
    out = np.empty((n, width), dtype=np.uint8)
    out[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    out[:, width - 1] = COMMA
    low = np.arange(first % BLOCK, first % BLOCK + n, dtype=np.int32)
    for col in range(width - 2, len(prefix) - 1, -1):
        quotient = low // 10
        out[:, col] = low - quotient * 10 + ZERO
        low = quotient
    return out.tobytes()[:-1]


def encode_run(first: int, last: int) -> bytes:
    """``first,...,last`` as ASCII decimal, comma separated. Requires 0 <= first <= last."""
    if last - first < SCALAR_RUN_MAX:
        return _scalar(first, last)
    parts: list[bytes] = []
    while first <= last and first < BLOCK:
        end = min(last, 10 ** len(str(first)) - 1)
        parts.append(_short(first, end) if end - first >= SCALAR_RUN_MAX else _scalar(first, end))
        first = end + 1
    while first <= last:
        end = min(last, (first // BLOCK + 1) * BLOCK - 1)
        parts.append(_block(first, end) if end - first >= SCALAR_RUN_MAX else _scalar(first, end))
        first = end + 1
    return b",".join(parts)


def encode_stepped(first: int, count: int, step: int) -> bytes:
    """``first, first+step, ...`` (``count`` integers, ``step`` >= 2) as ASCII decimal, comma separated."""
    if count <= SCALAR_RUN_MAX:
        return ",".join(map(str, range(first, first + count * step, step))).encode("ascii")
    values = np.arange(count, dtype=np.int64) * step + first  # the last is at most 2**63-1: no overflow
    parts = []
    at = 0
    while at < count:  # one block per number of digits
        width = len(str(int(values[at])))
        end = count if width >= MAX_DIGITS else int(np.searchsorted(values, 10**width, side="left"))
        block = values[at:end]
        out = np.empty((end - at, width + 1), dtype=np.uint8)
        out[:, width] = COMMA
        for col in range(width - 1, -1, -1):
            quotient = block // 10
            out[:, col] = (block - quotient * 10 + ZERO).astype(np.uint8)
            block = quotient
        parts.append(out.tobytes()[:-1])
        at = end
    return b",".join(parts)


def encode_runs(runs: Iterable[tuple[int, int, int]]) -> bytes:
    """Every run's integers, in order, comma separated."""
    return b",".join(
        encode_run(first, first + count - 1) if step == 1 else encode_stepped(first, count, step)
        for first, count, step in runs
    )
