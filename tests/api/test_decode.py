"""/v1/decode: decoding and scheme detection through the real ASGI app."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.api.decode import INLINE_BODY_BYTES, ITEMS_PER_TURN
from app.ledger.view import LedgerView
from app.main import create_app
from app.settings import Settings
from tests.helpers import CLAIMING, HEX_DIGITS, SCHEMES, LoopTurns, lifespan, running_app

FIELDS = {
    "muid": {"timestamp_us", "medallion", "offset"},
    "eight-byte": {"timestamp_ms", "sequence", "generator_id", "cluster_id", "mode"},
    "hlc-ulid": {"timestamp_ms", "counter", "publisher_id", "random"},
    "siq": {"seconds", "fraction", "shard", "domain_hash", "serial", "qualifier"},
    "wiji": {"timestamp_us", "sequence", "version", "random"},
    "uuidv7": {"timestamp_ms", "rand_a", "rand_b"},
    "ulid": {"timestamp_ms", "random"},
    "typeid": {"prefix", "uuid", "version", "timestamp_ms"},
    "ksuid": {"timestamp_s", "payload"},
    "snowflake": {"layout", "timestamp_ms", "worker_id", "sequence"},
}
RFC3339 = {
    3: re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"),
    6: re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"),
}
PRECISION = {
    "muid": 6,
    "eight-byte": 3,
    "hlc-ulid": 3,
    "siq": 6,
    "wiji": 6,
    "uuidv7": 3,
    "ulid": 3,
    "typeid": 3,
    "ksuid": 3,
    "snowflake": 3,
}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("state")) as c:
        yield c


@pytest.mark.parametrize("scheme", SCHEMES)
def test_decode_object_shape(client: TestClient, scheme: str) -> None:
    text = client.get(f"/v1/ids/{scheme}").json()["ids"][0]
    d = client.get(f"/v1/decode/{scheme}/{text}").json()
    assert set(d) == {"scheme", "id", "hex", "timestamp", "fields", "region", "issued_by", "ledger", "plausibility"}
    if scheme in CLAIMING:  # the claim ledger names this node as the issuer
        assert d["ledger"]["status"] == "confirmed", d["ledger"]
        assert d["issued_by"]["owner"]["pid"] == os.getpid() and d["plausibility"]["rank"] == 0
    else:
        assert d["issued_by"] is None and d["ledger"] is None
    assert set(d["fields"]) == FIELDS[scheme]
    assert re.fullmatch(r"[0-9a-f]+", d["hex"]) and len(d["hex"]) == HEX_DIGITS[scheme]
    assert RFC3339[PRECISION[scheme]].match(d["timestamp"]), d["timestamp"]


def test_spec_vectors_decode(client: TestClient) -> None:
    d = client.get("/v1/decode/muid/5d5eac793e61f-1bfc71b112d-0000000b").json()
    assert d["id"] == "5D5EAC793E61F-1BFC71B112D-0000000B"
    assert d["hex"] == "5d5eac793e61f1bfc71b112d0000000b"
    assert d["fields"] == {"timestamp_us": 0x5D5EAC793E61F, "medallion": 1923190821165, "offset": 11}
    d = client.get("/v1/decode/hlc-ulid/017FC21C5E7A-0000-000A-AAA111111111").json()
    assert d["id"] == "01FZ11RQKT000002NAM48H248H"
    assert d["timestamp"].startswith("2022-03-25")
    d = client.get("/v1/decode/eight-byte/cb54ecf2840a0015").json()
    assert d["fields"] == {
        "timestamp_ms": 143062936275,
        "sequence": 10,
        "generator_id": 1,
        "cluster_id": 5,
        "mode": "spread",
    }
    d = client.get("/v1/decode/siq/did:siq:gm24tg4ago5efqaaaab4gzymuoaaa").json()
    assert d["timestamp"].startswith("2025-01-01T00:00:00")
    assert d["fields"]["shard"] == 7 and d["fields"]["qualifier"] == "user"
    d = client.get("/v1/decode/wiji/000S94VR000002M6NWVVR14D2G").json()
    assert d["fields"]["sequence"] == 42 and d["hex"] == "0006524de00000002a1abcdef0123450"


def test_detection_lists_every_candidate(client: TestClient) -> None:
    # 26 Crockford characters can be a Wiji ID, an HLC-ULID and a ULID.
    text = client.get("/v1/ids/wiji").json()["ids"][0]
    names = [c["scheme"] for c in client.get(f"/v1/decode/{text}").json()["candidates"]]
    # Every reading is listed; the plausible one (wiji, made now) before the readings dated ~2192.
    assert names[0] == "wiji" and set(names) == {"wiji", "hlc-ulid", "ulid"}
    text = client.get("/v1/ids/hlc-ulid").json()["ids"][0]
    names = [c["scheme"] for c in client.get(f"/v1/decode/{text}").json()["candidates"]]
    assert names[0] in ("hlc-ulid", "ulid") and {"hlc-ulid", "ulid"} <= set(names)


def test_a_ulid_also_reads_as_an_hlc_ulid(client: TestClient) -> None:
    text = client.get("/v1/ids/ulid").json()["ids"][0]
    candidates = client.get(f"/v1/decode/{text}").json()["candidates"]
    names = [c["scheme"] for c in candidates]
    assert {"ulid", "hlc-ulid"} <= set(names)
    by_name = {c["scheme"]: c for c in candidates}
    assert by_name["ulid"]["fields"]["timestamp_ms"] == by_name["hlc-ulid"]["fields"]["timestamp_ms"]


def test_a_bare_decimal_lists_every_reading_that_parses(client: TestClient) -> None:
    snowflake = client.get("/v1/ids/snowflake").json()["ids"][0]
    names = [c["scheme"] for c in client.get(f"/v1/decode/{snowflake}").json()["candidates"]]
    assert {"eight-byte", "siq", "snowflake"} <= set(names), names
    # The snowflake reading is in the node's layout (twitter by default).
    by_name = {c["scheme"]: c for c in client.get(f"/v1/decode/{snowflake}").json()["candidates"]}
    assert by_name["snowflake"]["fields"]["layout"] == "twitter"


def test_snowflake_decodes_with_another_layout(client: TestClient) -> None:
    # Discord's documented example: 2016-04-30T11:18:25.796Z, worker 1, process 0, increment 7.
    d = client.get("/v1/decode/snowflake/175928847299117063", params={"layout": "discord"}).json()
    assert d["fields"]["layout"] == "discord" and d["fields"]["timestamp_ms"] == 1462015105796
    assert d["fields"]["sequence"] == 7
    r = client.get("/v1/decode/snowflake/175928847299117063", params={"layout": "martian"})
    assert r.status_code == 422 and "layout" in r.json()["detail"]


def test_surrounding_whitespace_is_ignored(client: TestClient) -> None:
    assert client.get("/v1/decode/eight-byte/%20cb54ecf2840a0015%20").status_code == 200


@pytest.mark.parametrize(
    ("path", "status", "fragment"),
    [
        ("/v1/decode/wiji/0000000000000000000000000", 422, "26"),
        ("/v1/decode/eight-byte/cb54ecf2840a001z", 422, ""),
        ("/v1/decode/siq/did:siq:gm24tg4ago5efqaaaab4gzymuoaab", 422, "checksum"),
        ("/v1/decode/not-a-scheme/123", 404, "unknown scheme"),
        ("/v1/decode/hello%20world", 422, "not an ID of any scheme"),
        ("/v1/decode/" + "1" * 200, 422, "at most 128 characters"),
    ],
)
def test_invalid_ids_are_422_naming_the_rule(client: TestClient, path: str, status: int, fragment: str) -> None:
    r = client.get(path)
    assert r.status_code == status, r.text
    assert fragment.lower() in r.json()["detail"].lower()


def test_free_text_picks_ids_out_of_a_log_line(client: TestClient) -> None:
    wiji = client.get("/v1/ids/wiji").json()["ids"][0]
    eight = client.get("/v1/ids/eight-byte").json()["ids"][0]
    text = f"2026-11-21 ERROR order={wiji} failed, retry id {eight}\n\nnot-an-id\n"
    items = client.post("/v1/decode", json={"text": text}).json()["items"]
    inputs = [i["input"] for i in items]
    assert wiji in inputs and eight in inputs
    bad = [i for i in items if i["input"] == "not-an-id"]
    assert bad and bad[0]["error"]
    assert "2026-11-21" not in inputs and "ERROR" not in inputs and "failed" not in inputs


def test_free_text_keeps_a_broken_id_in_a_log_line_as_an_error(client: TestClient) -> None:
    # A Muid cut short by a copy (offset has 5 digits: the document's stale 14/13/5 example format).
    text = "12:00:01 WARN bad id 5D5EAC793E61F-0000000000000-00000 seen twice"
    items = client.post("/v1/decode", json={"text": text}).json()["items"]
    assert [i["input"] for i in items] == ["5D5EAC793E61F-0000000000000-00000"]
    assert items[0]["candidates"] == [] and "muid" in items[0]["error"]


@pytest.mark.parametrize(
    ("text", "inputs"),
    [
        # whole words only: no 40-character KSUID out of a SHA-256, no TypeID with its last character dropped
        ("sha e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 end", []),
        ("id user_01h455vb4pex5vsknk084sn02qx seen", []),
        ("id Auser_01h455vb4pex5vsknk084sn02q seen", ["Auser_01h455vb4pex5vsknk084sn02q"]),  # shown with its error
        ("id é01ARZ3NDEKTSV4RRFFQ69G5FAV seen", []),  # a letter of another script is part of the word
        # a signed number is not an ID
        ("delta -175928847299117063 and +175928847299117063", []),
        # an ID glued to a word by a hyphen is still found
        (
            "order-01ARZ3NDEKTSV4RRFFQ69G5FAV req-017f22e2-79b0-7cc3-98c4-dc0c0c07398f n=175928847299117063",
            ["01ARZ3NDEKTSV4RRFFQ69G5FAV", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f", "175928847299117063"],
        ),
    ],
)
def test_free_text_takes_whole_words_only(client: TestClient, text: str, inputs: list[str]) -> None:
    items = client.post("/v1/decode", json={"text": text}).json()["items"]
    assert [i["input"] for i in items] == inputs, items
    for item in items:
        if item["input"].startswith("Auser_"):
            assert item["candidates"] == [] and "lowercase" in item["error"], item


def test_a_pasted_typeid_with_a_27_character_suffix_is_an_error_not_a_shorter_typeid(client: TestClient) -> None:
    items = client.post("/v1/decode", json={"text": "user_01h455vb4pex5vsknk084sn02qx"}).json()["items"]
    assert [i["input"] for i in items] == ["user_01h455vb4pex5vsknk084sn02qx"]
    assert items[0]["candidates"] == [] and "26" in items[0]["error"], items


def test_detection_reads_with_decode_options_and_refuses_others(client: TestClient) -> None:
    twitter = client.get("/v1/decode/175928847299117063").json()["candidates"]
    discord = client.get("/v1/decode/175928847299117063", params={"layout": "discord"}).json()["candidates"]
    reading = {c["scheme"]: c for c in discord}["snowflake"]
    assert reading["fields"]["layout"] == "discord" and reading["timestamp"].startswith("2016-04-30T11:18:25.796")
    # the other readings do not change
    assert [c for c in discord if c["scheme"] != "snowflake"] == [c for c in twitter if c["scheme"] != "snowflake"]
    for params, rule in (({"bogus": "1"}, "unknown decode option bogus"), ({"layout": "Discord"}, "layout")):
        r = client.get("/v1/decode/175928847299117063", params=params)
        assert r.status_code == 422 and rule in r.json()["detail"], r.text
    r = client.post("/v1/decode", params={"layout": "discord"}, json={"text": "175928847299117063"})
    assert r.status_code == 422 and "takes no query parameters, got layout" in r.json()["detail"]


def test_a_long_line_is_scanned_in_segments_with_the_same_tokens(client: TestClient) -> None:
    """A 300 KB log line (segments of SEGMENT_CHARS, cut at whitespace) gives the tokens an unsegmented scan of it
    gives: every ID of the line, in order, none split at a cut."""
    from app.decoding import SEGMENT_CHARS, _line_spans, _token_res
    from app.schemes import schemes

    ids = [client.get(f"/v1/ids/{scheme}").json()["ids"][0] for scheme in ("ulid", "uuidv7", "muid", "typeid")]
    words = ["2026-11-21", "ERROR", "a-b-c", "order", *ids, "x" * 40]
    line = " ".join(words[i * 7 % len(words)] for i in range(30_000))
    assert len(line) > 50 * SEGMENT_CHARS
    finders, _ = _token_res(tuple(schemes().values()))
    whole = sorted({(m.start(), m.end()) for r in finders for m in r.finditer(line)}, key=lambda p: (p[0], -p[1]))
    assert list(_line_spans(line, finders)) == whole


def test_free_text_stops_after_its_distinct_candidate_words(client: TestClient) -> None:
    """Distinct ID-like words that are no IDs are tried at most CANDIDATES_PER_ITEM x 5,000 times; then the answer
    says it stopped (truncated), rather than parsing a megabyte of them for seconds. A repeated word is tried once."""
    from app.decoding import CANDIDATES_PER_ITEM

    some_id = client.get("/v1/ids/ulid").json()["ids"][0]
    cap = CANDIDATES_PER_ITEM * 5000
    junk = " ".join(f"w{i}-x" for i in range(cap))
    body = client.post("/v1/decode", json={"text": junk + " " + some_id}).json()
    assert body["items"] == [] and body["truncated"] is True
    body = client.post("/v1/decode", json={"text": "a-b-c " * (2 * cap) + some_id}).json()
    assert [item["input"] for item in body["items"]] == [some_id] and body["truncated"] is False


def test_a_log_full_of_repeated_non_id_words_is_read_to_the_end(client: TestClient) -> None:
    """4,900 log lines, each with one UUID among words that look like IDs but repeat (a date, worker-3,
    content-type...; 25,000 such words in all): every UUID is found and nothing is truncated."""
    ids = client.get("/v1/ids/uuidv7?count=4900").json()["ids"]
    text = "".join(
        f"2026-11-21 12:00:{i % 60:02d} worker-3 x-request-id={u} content-type=application/json user-agent=curl-8\n"
        for i, u in enumerate(ids)
    )
    body = client.post("/v1/decode", json={"text": text}).json()
    assert [item["input"] for item in body["items"]] == ids and body["truncated"] is False


@pytest.mark.anyio
async def test_a_long_free_text_answer_is_annotated_with_the_event_loop_turning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A text decoded in the worker process comes back as 2,000 items: the event loop reads them back, has the claim
    # ledger annotate each and writes the answer. Done in one piece, that held every other client's request for
    # 300 ms and more (5,000 items); each annotation must see other work run between slices of ITEMS_PER_TURN.
    turns = LoopTurns()
    seen: list[int] = []
    annotate = LedgerView.annotate

    def counted(view: LedgerView, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen.append(turns.count)
        return annotate(view, candidates)

    monkeypatch.setattr(LedgerView, "annotate", counted)
    app = create_app(Settings(state_dir=tmp_path))
    async with lifespan(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://idmint") as client:
            ids = (await client.get("/v1/ids/snowflake", params={"count": 2000})).json()["ids"]
            text = "\n".join(f"order {id} failed" for id in ids)
            assert len(text.encode()) > INLINE_BODY_BYTES  # decoded in the worker process
            async with turns:
                r = await client.post("/v1/decode", json={"text": text}, timeout=120)
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [item["input"] for item in items] == ids
    assert all(
        item["candidates"][0]["ledger"]["status"] == "confirmed"
        for item in items
        if item["candidates"][0]["scheme"] == "snowflake"
    )
    assert len(seen) == len(ids)
    assert len(set(seen)) >= len(ids) // ITEMS_PER_TURN, (len(set(seen)), len(ids))
