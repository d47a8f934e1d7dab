"""Decimal text of runs of integers: the column-wise encoder against str(), at every boundary it cuts at."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.sequences.text import BLOCK, SCALAR_RUN_MAX, encode_run, encode_runs, encode_stepped
from app.storage.sequences import MAX_VALUE


def reference(first: int, last: int) -> bytes:
    return ",".join(str(i) for i in range(first, last + 1)).encode()


@pytest.mark.parametrize(
    ("first", "count"),
    [
        (0, 1),
        (1, 1),
        (0, SCALAR_RUN_MAX + 1),
        (1, 100_000),
        (9, 3),
        (95, 200),
        (BLOCK - 70, 200),
        (BLOCK - 1, 2),
        (10**15, 100_000),
        (10**15 - 50_000, 100_000),
        (123_456_789, 250_001),
        (MAX_VALUE - 100_000, 100_001),
        (MAX_VALUE, 1),
    ],
)
def test_runs_match_str(first: int, count: int) -> None:
    assert encode_run(first, first + count - 1) == reference(first, first + count - 1)


@given(st.integers(0, MAX_VALUE), st.integers(1, 3000))
def test_any_run_matches_str(first: int, count: int) -> None:
    last = min(first + count - 1, MAX_VALUE)
    assert encode_run(first, last) == reference(first, last)


def test_several_runs_are_joined_in_order() -> None:
    assert encode_runs([(5, 3, 1), (100, 2, 1)]) == b"5,6,7,100,101"
    assert encode_runs([(5, 3, 10), (100, 2, 1)]) == b"5,15,25,100,101"


@pytest.mark.parametrize(
    ("first", "count", "step"),
    [(0, 1, 2), (1, 100, 7), (5, 1000, 3), (95, 5000, 11), (10**15, 3000, 2**31), (MAX_VALUE - 2**31 * 99, 100, 2**31)],
)
def test_stepped_runs_match_str(first: int, count: int, step: int) -> None:
    assert encode_stepped(first, count, step) == ",".join(str(first + i * step) for i in range(count)).encode()


@given(st.integers(0, MAX_VALUE), st.integers(1, 2000), st.integers(2, 2**31))
def test_any_stepped_run_matches_str(first: int, count: int, step: int) -> None:
    count = min(count, (MAX_VALUE - first) // step + 1)
    assert encode_stepped(first, count, step) == ",".join(str(first + i * step) for i in range(count)).encode()
