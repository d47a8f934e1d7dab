"""Decimal text of runs of integers: the column-wise encoder against str(), at every boundary it cuts at."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.sequences.text import BLOCK, SCALAR_RUN_MAX, encode_run, encode_runs
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
    assert encode_runs([(5, 7), (100, 101)]) == b"5,6,7,100,101"
