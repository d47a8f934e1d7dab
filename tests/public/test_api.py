"""format=public and /v1/public through the real ASGI app (the hot path included), and across a real restart."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import signal
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from app.api.public import REVEAL_PER_TURN
from app.decoding import decode_value
from app.errors import ConfigError
from app.main import create_app
from app.public.forms import Public
from app.public.keys import KeyRing
from app.schemes.base import Scheme
from tests.helpers import LoopTurns, lifespan, make_settings, running_app
from tests.public.support import SECRET_1, SECRET_2, key_file
from tests.support.server import running_server

PUBLIC_SCHEMES = ["snowflake", "eight-byte", "uuidv7", "ulid", "typeid"]


def test_issue_and_reveal_every_scheme(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))
    with running_app(tmp_path / "state", public_id_keys_file=keys) as c:
        for scheme in PUBLIC_SCHEMES:
            params = {"count": "5", "format": "public"} | ({"type": "order"} if scheme == "typeid" else {})
            r = c.get(f"/v1/ids/{scheme}", params=params)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["format"] == "public" and len(body["ids"]) == 5
            post = c.post(
                f"/v1/ids/{scheme}",
                json={"format": "public", "count": 3} | ({"type": "order"} if scheme == "typeid" else {}),
            )
            assert post.status_code == 200, post.text
            stream = c.get(f"/v1/ids/{scheme}/stream", params=params | {"count": "4"})
            assert stream.status_code == 200 and len(stream.text.split()) == 4
            texts = body["ids"] + post.json()["ids"] + stream.text.split()
            revealed = c.post("/v1/public", json={"texts": texts}).json()["items"]
            for text, item in zip(texts, revealed, strict=True):
                assert item["scheme"] == scheme and item["key_id"] == 1, (text, item)
                assert item["decoded"]["id"] == item["id"]
                assert item["decoded"]["timestamp"] is not None
            one = c.get(f"/v1/public/{texts[0]}").json()
            assert one["id"] == revealed[0]["id"]
            if scheme == "typeid":
                assert all(t.startswith("order_") for t in texts)
                assert revealed[0]["id"].startswith("order_")
        # a real ID issued plainly reveals as nothing; a garbled public text is a 404
        plain = c.get("/v1/ids/uuidv7").json()["ids"][0]
        assert c.get(f"/v1/public/{plain}").status_code == 404
        r = c.get("/v1/public/" + "0" * 18)
        assert r.status_code == 404 and "no key" in r.json()["detail"]
        items = c.post("/v1/public", json={"texts": ["nope", plain]}).json()["items"]
        assert all("error" in item for item in items)


def test_public_ids_match_the_published_token_pattern(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))
    with running_app(tmp_path / "state", public_id_keys_file=keys) as c:
        catalogue = {s["name"]: s for s in c.get("/v1/schemes").json()["schemes"]}
        assert sorted(n for n, s in catalogue.items() if "public" in s["token_patterns"]) == sorted(PUBLIC_SCHEMES)
        for scheme in PUBLIC_SCHEMES:
            entry = catalogue[scheme]
            pattern = re.compile(entry["token_patterns"]["public"])
            assert "public" not in entry["rising"] and "public" not in entry["rising_per_identity"]
            for options in ({}, {"type": "order"}) if scheme == "typeid" else ({},):
                r = c.get(f"/v1/ids/{scheme}/stream", params={"count": "2000", "format": "public", **options})
                assert r.status_code == 200, r.text
                texts = r.text.split()
                assert [t for t in texts if not pattern.fullmatch(t)] == []
                assert max(map(len, texts)) <= entry["max_lengths"]["public"]
            for wrong in ("", "null", "<html>", c.get(f"/v1/ids/{scheme}").json()["ids"][0]):
                assert not pattern.fullmatch(wrong), (scheme, wrong)
        assert c.post("/v1/sequences", json={"name": "shown"}).status_code == 201
        texts = c.get("/v1/sequences/shown/next", params={"count": "500", "format": "public"}).json()["ids"]
        pattern = re.compile(catalogue["snowflake"]["token_patterns"]["public"])  # the 64-bit form's
        assert all(pattern.fullmatch(t) for t in texts)


def test_sequences_next_public_and_range_refused(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))
    with running_app(tmp_path / "state", public_id_keys_file=keys) as c:
        assert c.post("/v1/sequences", json={"name": "orders"}).status_code == 201
        for method in ("GET", "POST"):
            r = c.request(method, "/v1/sequences/orders/next", params={"count": "3", "format": "public"})
            assert r.status_code == 200, r.text
            ids = r.json()["ids"]
            assert len(ids) == 3 and all(isinstance(t, str) and len(t) == 18 for t in ids)
            items = c.post("/v1/public", json={"texts": ids}).json()["items"]
            numbers = [int(i["id"]) for i in items]
            assert numbers == sorted(numbers) and all(i["scheme"] == "sequence" for i in items)
        r = c.post("/v1/sequences/orders/range", params={"count": "10", "format": "public"})
        assert r.status_code == 422 and "not available on range" in r.json()["detail"]


def test_without_a_key_file_public_is_a_422_naming_the_setting(tmp_path: Path) -> None:
    with running_app(tmp_path / "state") as c:
        for r in (
            c.get("/v1/ids/uuidv7", params={"format": "public"}),
            c.post("/v1/ids/ulid", json={"format": "public"}),
            c.get("/v1/ids/snowflake/stream", params={"format": "public"}),
            c.post("/v1/public", json={"texts": ["x"]}),
            c.get("/v1/public/abc"),
        ):
            assert r.status_code == 422, r.text
            assert "IDMINT_PUBLIC_ID_KEYS_FILE" in r.json()["detail"]
        assert c.post("/v1/sequences", json={"name": "s"}).status_code == 201
        r = c.get("/v1/sequences/s/next", params={"format": "public"})
        assert r.status_code == 422 and "IDMINT_PUBLIC_ID_KEYS_FILE" in r.json()["detail"]


def test_schemes_without_a_public_form_are_a_422(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))
    with running_app(tmp_path / "state", public_id_keys_file=keys) as c:
        for scheme in ("ksuid", "wiji", "muid"):
            r = c.get(f"/v1/ids/{scheme}", params={"format": "public"})
            assert r.status_code == 422 and "format=public is not available" in r.json()["detail"]


def test_a_malformed_key_file_stops_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[key]]\nid = 1\nsecret = "' + SECRET_1 + '"\n\n[[key]]\nid = 0\nsecret = "' + SECRET_2 + '"\n')
    with pytest.raises(ConfigError, match="line 5") as caught:
        create_app(make_settings(tmp_path / "state", public_id_keys_file=bad))
    assert SECRET_1 not in str(caught.value) and SECRET_2 not in str(caught.value)


def test_decode_scope_guards_reveal(tmp_path: Path) -> None:
    token = "reader-key-1"
    digest = hashlib.sha256(token.encode()).hexdigest()
    api_keys = tmp_path / "api.toml"
    api_keys.write_text(
        f'[[key]]\nname = "issuer"\nsha256 = "{hashlib.sha256(b"issuer-key").hexdigest()}"\nscopes = ["issue"]\n\n'
        f'[[key]]\nname = "reader"\nsha256 = "{digest}"\nscopes = ["decode"]\n'
    )
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))
    with running_app(tmp_path / "state", public_id_keys_file=keys, api_keys_file=api_keys) as c:
        r = c.get("/v1/ids/ulid", params={"format": "public"}, headers={"Authorization": "Bearer issuer-key"})
        text = r.json()["ids"][0]
        assert c.get(f"/v1/public/{text}").status_code == 401
        assert c.get(f"/v1/public/{text}", headers={"Authorization": "Bearer issuer-key"}).status_code == 403
        assert c.get(f"/v1/public/{text}", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        r = c.post("/v1/public", json={"texts": [text]}, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json()["items"][0]["scheme"] == "ulid"


def test_a_batch_of_10000_and_no_more(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))
    with running_app(tmp_path / "state", public_id_keys_file=keys) as c:
        texts = c.get("/v1/ids/eight-byte/stream", params={"count": "10000", "format": "public"}).text.split()
        r = c.post("/v1/public", json={"texts": texts})
        assert r.status_code == 200 and len(r.json()["items"]) == 10_000
        assert all(i["scheme"] == "eight-byte" for i in r.json()["items"])
        r = c.post("/v1/public", json={"texts": texts + ["x"]})
        assert r.status_code == 422 and "10000" in r.json()["detail"]


@pytest.mark.anyio
async def test_a_large_batch_is_revealed_with_the_event_loop_turning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10,000 texts take about 100 ms of key trials, decode objects and JSON. In the encode pool's thread that held
    # the GIL against the event loop (single IDs asked meanwhile waited up to 27 ms); revealed on the loop in one
    # piece it would hold every other request for all of it. Each slice of REVEAL_PER_TURN texts must see other
    # work run before it, and the answer must be the same items in the same order as one reveal of every text,
    # under the keys in force when the batch began, even when the key file is reloaded (SIGHUP) between slices.
    turns = LoopTurns()
    seen: list[tuple[int, int]] = []
    reveal = Public.reveal
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))

    def counted(
        public: Public, texts: Sequence[str], ring: KeyRing | None = None
    ) -> list[tuple[Scheme | None, int, int] | str]:
        seen.append((turns.count, len(texts)))
        found = reveal(public, texts, ring)
        if len(seen) == 1:  # the key file now holds key 2 alone, reloaded between the first slice and the next
            key_file(keys, (2, SECRET_2))
            assert public.keys is not None and public.keys.reload()
        return found

    app = create_app(make_settings(tmp_path / "state", public_id_keys_file=keys))
    async with lifespan(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://idmint") as client:
            texts: list[str] = []
            for scheme in ("snowflake", "uuidv7"):
                while len(texts) < (5_000 if scheme == "snowflake" else 10_000):
                    r = await client.get(f"/v1/ids/{scheme}", params={"count": 1000, "format": "public"})
                    texts += r.json()["ids"]
            texts[123] = "not a public ID"
            public: Public = app.app.state.public  # the FastAPI app behind the connection front
            alone = [public.answer(found, decode_value) for found in public.reveal(texts)]
            monkeypatch.setattr(Public, "reveal", counted)
            async with turns:
                r = await client.post("/v1/public", json={"texts": texts}, timeout=120)
            monkeypatch.undo()
            after = (await client.post("/v1/public", json={"texts": texts[:3]})).json()["items"]
    assert r.status_code == 200, r.text
    assert r.json() == {"items": alone}
    assert all(item["key_id"] == 1 for n, item in enumerate(alone) if n != 123)
    assert all("error" in item for item in after)  # key 1 is gone for the next request
    assert sum(count for _, count in seen) == len(texts) and max(count for _, count in seen) <= REVEAL_PER_TURN
    assert len({turn for turn, _ in seen}) == len(seen) == len(texts) // REVEAL_PER_TURN, seen[:5]


@pytest.mark.integration
def test_rotation_across_a_restart_and_sighup(tmp_path: Path) -> None:
    """Key 1's texts still reveal after key 2 is added (restart, then SIGHUP); new ones carry key 2; secrets
    appear in no log, error, /readyz or /metrics."""
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))
    env = {"IDMINT_PUBLIC_ID_KEYS_FILE": str(keys), "IDMINT_STATE_DIR": str(tmp_path / "state")}
    with running_server(tmp_path, env) as server:
        old = server.get_json("/v1/ids/snowflake", count=3, format="public")["ids"]
        old += server.get_json("/v1/ids/uuidv7", count=3, format="public")["ids"]
    key_file(keys, (1, SECRET_1), (2, SECRET_2))
    with running_server(tmp_path, env) as server:
        new = server.get_json("/v1/ids/snowflake", count=3, format="public")["ids"]
        new += server.get_json("/v1/ids/uuidv7", count=3, format="public")["ids"]
        items = server.post_json("/v1/public", {"texts": old + new})["items"]
        assert [i["key_id"] for i in items] == [1] * 6 + [2] * 6
        # SIGHUP: key 3 added while running; key 1 dropped: its texts no longer open
        key_file(keys, (2, SECRET_2), (3, "3c" * 32))
        os.kill(server.pid, signal.SIGHUP)
        deadline_texts = None
        for _ in range(200):
            deadline_texts = server.get_json("/v1/ids/eight-byte", format="public")["ids"]
            if deadline_texts[0][-1] == "3":
                break
            httpx.get(server.url + "/healthz")
        assert deadline_texts is not None and deadline_texts[0][-1] == "3"
        items = server.post_json("/v1/public", {"texts": old + new})["items"]
        assert all("error" in i for i in items[:6]) and [i["key_id"] for i in items[6:]] == [2] * 6
        # a broken file on SIGHUP keeps the keys in force
        keys.write_text("[[key]]\nid = 1\n")
        os.kill(server.pid, signal.SIGHUP)
        server.wait("/healthz")
        seen = ""
        for _ in range(200):
            seen = server.log()
            if "not reloaded" in seen:
                break
            httpx.get(server.url + "/healthz")
        assert "not reloaded" in seen
        assert server.post_json("/v1/public", {"texts": new})["items"][0]["key_id"] == 2
        everything = server.log() + httpx.get(server.url + "/readyz").text + server.metrics_text()
        everything += httpx.get(server.url + "/v1/public/zzz").text
        for secret in (SECRET_1, SECRET_2, "3c" * 32):
            assert secret not in everything
    logging.getLogger(__name__).info("rotation checked")
