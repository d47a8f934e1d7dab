"""app/api/issuing.py: an issue body's bytes are the compact JSON of its members (``json.dumps`` of the list of
IDs), whichever framing built them: ``bytes.replace`` below JSON_ROWS_MIN IDs or a decimal form whose rows differ
in width, the column-wise :func:`~app.schemes._text.json_strings` from JSON_ROWS_MIN up, or a batch's own
:meth:`~app.schemes.base.Batch.json_members` (UUIDv7, TypeID, ULID, KSUID, Wiji)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.api.issuing import JSON_ROWS_MIN, issue_body
from app.issuing.issuer import no_charge
from app.schemes import schemes
from tests.helpers import SCHEMES, new_node, started

pytestmark = pytest.mark.anyio

COUNTS = (1, 2, JSON_ROWS_MIN - 1, JSON_ROWS_MIN, JSON_ROWS_MIN + 1, 1000)


def compact(members: dict[str, object]) -> bytes:
    return json.dumps(members, separators=(",", ":")).encode()


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_issue_body_is_the_json_of_the_ids_in_every_form(tmp_path: Path, scheme: str) -> None:
    async with started(new_node(tmp_path)) as node:
        for fmt in schemes()[scheme].formats:
            for count in COUNTS:
                issued = await node.issuer(scheme).issue(count, {}, charge=no_charge)
                ids = issued.encode(fmt).decode().splitlines()
                assert len(ids) == count
                expected = compact({"scheme": scheme, "format": fmt, "ids": ids, **issued.extra(fmt)})
                assert issue_body(scheme, fmt, issued) == expected, (fmt, count)


def test_json_strings_frames_rows_of_one_width_and_refuses_others() -> None:
    from app.schemes._text import json_strings

    rows = [f"{n:05x}" for n in range(5000)]
    for count in (1, 2, 3000, 5000, 40):  # grows the kept array, then reuses it for fewer rows
        lines = "".join(f"{row}\n" for row in rows[:count]).encode()
        framed = json_strings(lines, count)
        assert framed is not None and bytes(framed) == json.dumps(rows[:count], separators=(",", ":"))[1:-1].encode()
    assert json_strings(b"1\n22\n", 2) is None  # a decimal form: rows differ in width
    assert json_strings(b"12\n3\n4\n", 2) is None  # not count rows
    assert json_strings(b"", 0) is None


def test_json_rows_repeats_each_text_as_a_json_member() -> None:
    from app.schemes._text import json_rows

    rows = json_rows([(b"abc", 2), (b"def", 3)])
    assert rows.shape == (5, 6)
    assert (
        bytes(rows.reshape(-1).data[:-1]) == json.dumps(["abc"] * 2 + ["def"] * 3, separators=(",", ":"))[1:-1].encode()
    )
    rows[0, 1] = ord("x")  # a fresh, writable array
    assert bytes(rows[0]) == b'"xbc",'
    with pytest.raises(ValueError, match="every text must be 3 bytes long"):
        json_rows([(b"abc", 1), (b"de", 1)])
