"""Numpy text helpers shared by every scheme's column-wise batch encoder (ASCII rows, one ID per line).

A batch is encoded as a C-contiguous ``(count, width)`` uint8 array whose rows are one ID's text plus a newline:
filled from a template row (:func:`text_rows`), then the varying columns are written through strided views
(:func:`char_view`, :func:`write_runs`) from lookup tables (:func:`hex4_table`, :func:`hex_pairs`, and
:func:`app.schemes._crockford.column_table` for Crockford base32). Arrays come from per-thread scratch buffers
(:func:`scratch`, :func:`lead_rows`): a fresh multi-megabyte array per batch costs more in page faults than the
encoding. Every table is built once, lazily, and read-only. :func:`json_strings` frames such rows as the members of
a JSON array of strings, for the issue routes' bodies.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

NEWLINE = 10
"""ASCII ``\\n``, ending every row."""

TABLE_INDEX_BITS = 16
TABLE_ROWS = 1 << TABLE_INDEX_BITS
"""Lookup tables are indexed by 16-bit values."""
TABLE_ENTRY_CHARS = 4
"""Characters per ``<u4`` table entry (one 4-byte write per row)."""

HEX_LOWER = b"0123456789abcdef"
HEX_UPPER = b"0123456789ABCDEF"
_HEX_DIGIT_BITS = 4


# --- scratch buffers, rows, views -------------------------------------------------------------------------


class _Scratch(threading.local):
    """Per-thread reusable arrays: a fresh multi-megabyte array per batch costs more in page faults than encoding."""

    def __init__(self) -> None:
        self.arrays: dict[str, npt.NDArray[np.generic]] = {}


_scratch = _Scratch()


SCRATCH_KEPT_BYTES_MAX = 1 << 24
"""Larger scratch arrays (batches of more than ~600,000 IDs) are allocated per call, not kept."""


def scratch(key: str, size: int, dtype: npt.DTypeLike) -> npt.NDArray[np.generic]:
    """A 1-D array of ``size`` elements of ``dtype``, reused by this thread for every call with the same ``key``.

    Contents are undefined. The array is valid until the next call with ``key`` on this thread: callers copy out
    (``tobytes()``) before returning. Arrays over :data:`SCRATCH_KEPT_BYTES_MAX` are fresh and not kept.
    """
    dtype = np.dtype(dtype)
    if size * dtype.itemsize > SCRATCH_KEPT_BYTES_MAX:
        return np.empty(size, dtype=dtype)
    array = _scratch.arrays.get(key)
    if array is None or array.dtype != dtype or array.size < size:
        array = np.empty(max(size, TABLE_ROWS), dtype=dtype)
        _scratch.arrays[key] = array
    return array[:size]


BROADCAST_ROWS_MAX = 2048
"""Parts of at most this many rows are filled by one copy of the row repeated as ``bytes`` (``row * count``, which
CPython builds by memcpy doubling: 1,000 rows of 37 bytes in a quarter of the time of a numpy broadcast copy, whose
inner loop is one byte); larger ones by memcpy doubling in the array itself (no transient copy of a
multi-megabyte part)."""


def text_rows(parts: Sequence[tuple[bytes, int]], key: str = "rows") -> npt.NDArray[np.uint8]:
    """An ``(sum(count), width)`` uint8 array whose rows are ``row`` repeated ``count`` times, part after part.

    Every ``row`` has the same ``width`` (text plus newline). Built in the per-thread scratch buffer ``key`` (see
    :func:`scratch`: valid until the next call with that key on this thread): a large part by memcpy doubling, so
    filling costs about one pass over the memory, a small one by one copy of ``row * count``.
    """
    width = len(parts[0][0])
    total = sum(count for _, count in parts)
    flat = cast("npt.NDArray[np.uint8]", scratch(key, total * width, np.uint8))
    start = 0
    for row, count in parts:
        if len(row) != width:
            raise ValueError(f"every row must be {width} bytes long, got {len(row)}")
        if count == 0:
            continue
        _fill_part(flat, start, row, count)
        start += count * width
    return flat.reshape(total, width)


def _fill_part(flat: npt.NDArray[np.uint8], start: int, row: bytes, count: int) -> None:
    """Write ``row`` ``count`` times into ``flat`` from byte ``start`` on (see :func:`text_rows`)."""
    width = len(row)
    end = start + count * width
    if count <= BROADCAST_ROWS_MAX:  # one memcpy of the repeated row: fewer calls than doubling
        flat[start:end] = np.frombuffer(row * count, dtype=np.uint8)
        return
    flat[start : start + width] = np.frombuffer(row, dtype=np.uint8)
    filled = width
    while start + filled < end:
        step = min(filled, end - start - filled)
        flat[start + filled : start + filled + step] = flat[start : start + step]
        filled += step


def fresh_rows(parts: Sequence[tuple[bytes, int]]) -> tuple[bytearray, npt.NDArray[np.uint8]]:
    """A fresh ``bytearray`` holding ``row`` repeated ``count`` times, part after part, and an ``(sum(count),
    width)`` uint8 array over it (writes through the array land in the bytearray, which the caller may keep).

    Every ``row`` has the same ``width``; ValueError otherwise. The largest part's row fills the whole buffer
    (``bytearray(row) * total``: memcpy doubling into memory the allocator reuses, about one pass), the other parts
    then overwrite their rows. Beside :func:`text_rows` plus ``tobytes`` this saves a copy of most bytes.
    """
    width = len(parts[0][0])
    if any(len(row) != width for row, _ in parts):
        raise ValueError(f"every row must be {width} bytes long, got {[len(row) for row, _ in parts]}")
    total = sum(count for _, count in parts)
    largest = max(range(len(parts)), key=lambda i: parts[i][1])
    buffer = bytearray(parts[largest][0]) * total
    flat = np.frombuffer(buffer, dtype=np.uint8)
    start = 0
    for i, (row, count) in enumerate(parts):
        if count and i != largest:
            _fill_part(flat, start, row, count)
        start += count * width
    return buffer, flat.reshape(total, width)


def char_view(rows: npt.NDArray[np.uint8], column: int, dtype: npt.DTypeLike = "<u4") -> npt.NDArray[np.generic]:
    """A writable 1-D view of ``rows`` (C-contiguous ``(n, width)`` uint8) reading ``dtype`` at byte ``column``.

    Writing a ``<u4`` array into it lays 4 characters down in every row at once, at columns ``column..column+3``.
    """
    item = np.dtype(dtype).itemsize
    if column + item > rows.shape[1]:
        raise ValueError(f"a {item}-byte write at column {column} overruns a {rows.shape[1]}-byte row")
    return np.ndarray((rows.shape[0],), dtype=dtype, buffer=rows, offset=column, strides=(rows.strides[0],))


def write_runs(
    rows: npt.NDArray[np.uint8], column: int, runs: Sequence[tuple[npt.NDArray[np.generic], int, int]]
) -> None:
    """For each ``(table, first, count)`` in turn, write ``table[first : first + count]`` into the next ``count``
    rows of ``rows`` at byte ``column`` (one ``table.dtype`` write per row, see :func:`char_view`).

    The runs of a batch are its consecutive sequence/counter values, one run per tick.
    """
    start = 0
    for table, first, count in runs:
        char_view(rows, column, table.dtype)[start : start + count] = table[first : first + count]
        start += count


class _LeadRows(threading.local):
    def __init__(self) -> None:
        self.arrays: dict[tuple[str, int, bytes], npt.NDArray[np.uint8]] = {}


_lead_rows = _LeadRows()

LEAD_ROWS_KEPT = 1 << 16
"""Largest batch whose rows come from the reused per-thread array of :func:`lead_rows`; larger ones are fresh."""


def lead_rows(key: str, count: int, width: int, lead: bytes = b"") -> npt.NDArray[np.uint8]:
    """A ``(count, width)`` uint8 array whose rows start with ``lead`` (a form's constant leading text, such as
    ``did:siq:``, written once per thread); the rest is undefined. Valid until the next call with the same
    ``key``, ``width`` and ``lead`` on this thread (callers copy out); batches over :data:`LEAD_ROWS_KEPT` rows get a
    fresh array."""
    slot = (key, width, lead)
    array = _lead_rows.arrays.get(slot) if count <= LEAD_ROWS_KEPT else None
    if array is None:
        array = np.empty((max(count, LEAD_ROWS_KEPT), width), dtype=np.uint8)
        if lead:
            array[:, : len(lead)] = np.frombuffer(lead, dtype=np.uint8)
        if count <= LEAD_ROWS_KEPT:
            _lead_rows.arrays[slot] = array
    return array[:count]


# --- JSON array members -------------------------------------------------------------------------------------


QUOTE = 34
"""ASCII ``"``."""
COMMA = 44
"""ASCII ``,``."""
JSON_QUOTED_EXTRA = 2
"""Bytes a row grows by as a JSON array member: ``ID\n`` becomes ``"ID",``."""
JSON_MEMBER_EXTRA = 3
"""Bytes a JSON array member and its comma add to an ID: ``ID`` becomes ``"ID",``."""


class _QuotedRows(threading.local):
    def __init__(self) -> None:
        self.arrays: dict[int, npt.NDArray[np.uint8]] = {}


_quoted_rows = _QuotedRows()


def json_rows(parts: Sequence[tuple[bytes, int]]) -> npt.NDArray[np.uint8]:
    """An ``(sum(count), width + 3)`` uint8 array whose rows are ``"text",`` (a JSON array member and its comma),
    ``text`` repeated ``count`` times, part after part; every ``text`` has the same ``width`` and holds nothing a
    JSON string escapes. Over a fresh ``bytearray`` (``bytearray(row) * count``: memcpy doubling, one pass over the
    memory), so the caller may keep it. ``rows.reshape(-1).data[:-1]`` is the members without the last comma.
    ValueError for texts of different widths."""
    width = len(parts[0][0])
    if any(len(text) != width for text, _ in parts):
        raise ValueError(f"every text must be {width} bytes long, got {[len(text) for text, _ in parts]}")
    if len(parts) == 1:
        text, count = parts[0]
        buffer = bytearray(b'"' + text + b'",') * count
    else:
        buffer = bytearray(b"".join([(b'"' + text + b'",') * count for text, count in parts]))
    return np.frombuffer(buffer, dtype=np.uint8).reshape(-1, width + JSON_MEMBER_EXTRA)


def json_strings(lines: bytes, count: int) -> memoryview | None:
    """The ``count`` newline-terminated IDs of ``lines`` as the members of a JSON array of strings, quotes and
    commas included (``"ID1","ID2",...,"IDn"``), or None when the rows are not all of one width (a decimal form).

    IDs hold no newline and nothing a JSON string escapes (ASCII letters, digits, ``-``, ``_``, ``:``): a caller
    may rely on that, as :func:`app.api.issuing.issue_body` does. The rows are copied column-wise, one fixed-size
    element per ID, into a per-thread array whose quotes and commas are written once per row width, instead of a
    ``bytes.replace`` of every newline. The view is valid until the next call with the same row width on this
    thread: callers copy it out (``b"".join``). Arrays over :data:`SCRATCH_KEPT_BYTES_MAX` are fresh and not kept.
    """
    width = lines.find(b"\n") + 1  # the first row's: ID and newline
    if width < 2 or len(lines) != count * width or lines[width - 1 :: width] != b"\n" * count:
        return None  # every count-th byte a newline, and no newline inside an ID: every row is `width` long
    framed = width + JSON_QUOTED_EXTRA
    array = _quoted_rows.arrays.get(width)
    if array is None or array.shape[0] < count:
        rows = max(count, 2 * array.shape[0] if array is not None else 0, BROADCAST_ROWS_MAX)
        array = np.empty((rows, framed), dtype=np.uint8)
        array[:, 0] = QUOTE
        array[:, width] = QUOTE
        array[:, width + 1] = COMMA
        if rows * framed <= SCRATCH_KEPT_BYTES_MAX:
            _quoted_rows.arrays[width] = array
    element = np.dtype((np.void, width - 1))
    source = np.ndarray((count,), dtype=element, buffer=lines, strides=(width,))
    np.ndarray((count,), dtype=element, buffer=array, offset=1, strides=(framed,))[...] = source
    return array[:count].reshape(-1).data[:-1]  # the last row's comma dropped


# --- lookup tables ----------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def hex4_table(upper: bool = False) -> npt.NDArray[np.uint32]:
    """The 4 hex digits (lowercase, or uppercase with ``upper``) of every 16-bit value: shape ``(65536,)``, dtype
    ``<u4``, byte j = digit j (``.view(np.uint8).reshape(-1, 4)`` gives the characters as rows)."""
    digits = np.frombuffer(HEX_UPPER if upper else HEX_LOWER, dtype=np.uint8)
    values = np.arange(TABLE_ROWS, dtype=np.uint32)
    table = np.empty((TABLE_ROWS, TABLE_ENTRY_CHARS), dtype=np.uint8)
    for j in range(TABLE_ENTRY_CHARS):
        table[:, j] = digits[(values >> ((TABLE_ENTRY_CHARS - 1 - j) * _HEX_DIGIT_BITS)) & 0xF]
    table.flags.writeable = False
    return table.view("<u4").reshape(TABLE_ROWS)


@functools.lru_cache(maxsize=2)
def hex_pairs(upper: bool = False) -> npt.NDArray[np.uint16]:
    """The 2 hex digits of every byte: shape ``(256,)``, dtype uint16 whose bytes are the two ASCII digits in
    order, so ``hex_pairs()[bytes_array].view(np.uint8)`` is the hex text of ``bytes_array``."""
    digits = np.frombuffer(HEX_UPPER if upper else HEX_LOWER, dtype=np.uint8)
    pairs = np.empty((256, 2), dtype=np.uint8)
    pairs[:, 0] = digits[np.arange(256) >> _HEX_DIGIT_BITS]
    pairs[:, 1] = digits[np.arange(256) & 0xF]
    pairs.flags.writeable = False
    return pairs.view(np.uint16).reshape(256)
