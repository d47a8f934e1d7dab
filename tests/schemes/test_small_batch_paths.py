"""The plain-int paths of small batches give exactly what the column-wise numpy paths give (a single ID is
answered from the former, a batch of more than SMALL_BATCH from the latter), and each single-ID fast path what the
batch path gives for the same draw: eight-byte, HLC-ULID, SIQ, KSUID, UUIDv7 and snowflake."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from app.schemes.base import SMALL_BATCH, Run
from app.schemes.eight_byte.codec import TIMESTAMP_MS_MAX, Mode
from app.schemes.eight_byte.generator import EightByteBatch
from app.schemes.hlc_ulid import generator as hlc
from app.schemes.ksuid.generator import KsuidBatch
from app.schemes.ksuid.scheme import SCHEME as SCHEME_KSUID
from app.schemes.siq.codec import QUALIFIERS, TICK_MAX
from app.schemes.siq.codec import pack as siq_pack
from app.schemes.siq.generator import SiqBatch
from app.schemes.snowflake.codec import NAMED_LAYOUTS, Layout
from app.schemes.snowflake.generator import SCALAR_COUNT_MAX as SNOWFLAKE_SCALAR_MAX
from app.schemes.snowflake.generator import SnowflakeBatch
from app.schemes.uuidv7 import SCALAR_COUNT_MAX, Uuidv7Batch
from app.schemes.uuidv7 import SCHEME as SCHEME_UUIDV7


@given(st.integers(1, SMALL_BATCH).flatmap(lambda n: st.tuples(st.just(n), st.binary(min_size=7 * n, max_size=7 * n))))
def test_hlc_ulid_random_fields_of_a_small_batch_match_the_column_path(drawn: tuple[int, bytes]) -> None:
    count, raw = drawn
    high, middle, low = hlc.random_chunks(raw, count).tolist()
    assert hlc.random_field(raw, count) == [h << 32 | m << 16 | lo for h, m, lo in zip(high, middle, low)]
    assert hlc.random_field_of_draw(raw, count) == hlc.random_field(raw, count)
    batch = hlc.HlcUlidBatch(5, (Run(1_700_000_000_000, 0, count),), raw)
    column = [v & (2**48 - 1) for v in batch.values()]  # the small path of values(), from the draw
    assert column == [h << 32 | m << 16 | lo for h, m, lo in zip(high, middle, low)]


@given(
    st.integers(0, TIMESTAMP_MS_MAX - 1),
    st.lists(st.integers(0, 2**15 - 1), min_size=1, max_size=4),
    st.integers(0, 255),
    st.integers(1, SMALL_BATCH),
    st.sampled_from(list(Mode)),
)
def test_eight_byte_values_of_a_small_batch_match_the_column_path(
    millisecond: int, low: list[int], first: int, count: int, mode: Mode
) -> None:
    slots = 64 * len(low)
    first %= slots
    runs = [(millisecond, first, min(count, slots - first))]
    if count > runs[0][2]:
        runs.append((millisecond + 1, 0, count - runs[0][2]))
    batch = EightByteBatch(runs, np.array(low, dtype=np.uint64), mode)
    assert batch.values() == batch._build().tolist()


@given(
    st.integers(0, TIMESTAMP_MS_MAX - 1),
    st.lists(st.integers(0, 2**15 - 1), min_size=1, max_size=4),
    st.integers(0, 255),
    st.integers(1, SMALL_BATCH),
    st.sampled_from(list(Mode)),
)
def test_eight_byte_values_from_the_generators_int_list_match_the_column_path(
    millisecond: int, low: list[int], first: int, count: int, mode: Mode
) -> None:
    slots = 64 * len(low)
    first %= slots
    runs = [(millisecond, first, min(count, slots - first))]
    if count > runs[0][2]:
        runs.append((millisecond + 1, 0, count - runs[0][2]))
    batch = EightByteBatch(runs, np.array(low, dtype=np.uint64), mode, low)
    assert batch.count == count
    assert batch.values() == EightByteBatch(runs, np.array(low, dtype=np.uint64), mode)._build().tolist()


@given(st.integers(1, 2**40), st.integers(0, 2**16 - 1), st.binary(min_size=7, max_size=7), st.binary(min_size=7))
def test_hlc_ulid_single_id_is_the_first_of_a_batch_with_the_same_draw(
    millisecond: int, counter: int, raw: bytes, more: bytes
) -> None:
    """A single ID's fast path against the small-batch path of two IDs whose first draw is the single's (the draw
    is three planes of words: w0 of every ID, then w1, then w2, then a plane of bytes)."""
    second = (more + bytes(7))[:7]
    planes = b"".join(raw[i : i + 2] + second[i : i + 2] for i in range(0, 6, 2)) + raw[6:7] + second[6:7]
    single = hlc.HlcUlidBatch(5, (Run(millisecond, counter, 1),), raw).values()
    pair = hlc.HlcUlidBatch(5, (Run(millisecond, counter, 2),), planes).values()
    assert single == pair[:1]


@given(
    st.integers(0, TICK_MAX),
    st.integers(0, 255),
    st.integers(0, 2**32 - 1),
    st.sampled_from(sorted(QUALIFIERS)),
    st.lists(st.tuples(st.integers(0, 2**16 - 1), st.integers(1, 5)), min_size=1, max_size=3),
)
def test_siq_values_carry_every_field(
    tick: int, shard: int, domain_hash: int, qualifier: str, runs: list[tuple[int, int]]
) -> None:
    """values() against the codec's pack of each ID's fields (ticks ascending from ``tick``, as a batch's are)."""
    code, width = QUALIFIERS[qualifier]
    capacity = 1 << (16 - width)
    segments = [
        Run(min(tick + i, TICK_MAX), first % capacity, min(count, capacity - first % capacity))
        for i, (first, count) in enumerate(runs)
    ]
    expected = [
        siq_pack(seg.tick, shard, domain_hash, counter, code)
        for seg in segments
        for counter in range(seg.first, seg.first + seg.count)
    ]
    assert SiqBatch(shard, domain_hash, code, segments).values() == expected
    assert SiqBatch(shard, domain_hash, code, segments, width).values() == expected


@given(st.integers(0, 2**160 - 2), st.sampled_from(["base62", "hex"]))
def test_ksuid_single_id_encodes_as_a_batch_of_two_starts(first: int, fmt: str) -> None:
    single = KsuidBatch(first, 1).encode(fmt)
    assert single == KsuidBatch(first, 2).encode(fmt).splitlines(keepends=True)[0]
    assert single == (SCHEME_KSUID.format(first, fmt) + "\n").encode()


@given(st.integers(1, 2**40), st.integers(0, 2**42 - 2), st.binary(min_size=4, max_size=4), st.binary(max_size=12))
def test_uuidv7_single_id_is_the_first_of_a_batch_with_the_same_tails(
    millisecond: int, counter: int, tail: bytes, more: bytes
) -> None:
    """The single-ID fast path against the small-batch path and the column (numpy) path of the same draw."""
    single = Uuidv7Batch((Run(millisecond, counter, 1),), tail + more)
    pair = Uuidv7Batch((Run(millisecond, counter, 2),), tail + bytes(4))
    wide = Uuidv7Batch((Run(millisecond, counter, SCALAR_COUNT_MAX + 1),), tail + bytes(4 * SCALAR_COUNT_MAX))
    assert single.values() == pair.values()[:1] == wide.values()[:1]
    value = single.values()[0]
    assert single.encode("uuid") == (SCHEME_UUIDV7.format(value, "uuid") + "\n").encode()
    assert single.encode("hex") == wide.encode("hex")[: len(single.encode("hex"))]


@given(
    st.sampled_from(list(NAMED_LAYOUTS.values())),
    st.lists(st.integers(0, 31), min_size=1, max_size=4, unique=True),
    st.integers(0, 2**30),
    st.integers(0, 2**20),
    st.integers(1, SNOWFLAKE_SCALAR_MAX),
)
def test_snowflake_values_of_a_small_batch_match_the_column_path(
    layout: Layout, workers: list[int], unit: int, first: int, count: int
) -> None:
    slots = len(workers) << layout.sequence_bits
    first %= slots
    runs = [(unit, first, min(count, slots - first))]
    if count > runs[0][2]:
        runs.append((unit + 1, 0, count - runs[0][2]))
    batch = SnowflakeBatch(layout, sorted(workers), runs)
    assert batch.count == count
    assert batch._scalar_values() == batch._build().tolist()
