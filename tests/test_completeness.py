"""Every registered scheme is served everywhere: walks ``schemes()``, so a new scheme module is covered by adding
it to the registry (and failing here until everything it must declare is declared).

Each scheme is issued (GET on the fast path and through FastAPI, POST with a query and with a JSON body),
streamed, decoded (by name, by detection, in free text), described in /v1/schemes, captioned (every field of its
example's decode has a caption), metered (``idmint_ids_issued_total`` moves by the count) and leased (a scheme
with an identity plan holds a claim on the embedded backend, and its etcd keys follow from the plan).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.schemes import schemes
from app.settings import Settings
from app.storage.etcd.keys import claim_key, mark_key
from tests.helpers import routed_client, running_app

SCHEMES = tuple(schemes())
NS = "unique-id-generator/"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("state")) as c:
        yield c


@pytest.fixture(scope="module")
def routed(client: TestClient) -> TestClient:
    """The FastAPI app behind the fast path (same node, its lifespan already running): GET through FastAPI."""
    return routed_client(client)


def issued_total(client: TestClient, scheme: str) -> float:
    text = client.get("/metrics").text
    match = re.search(rf'^idmint_ids_issued_total{{scheme="{re.escape(scheme)}"}} ([0-9.e+]+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def check_ids(client: TestClient, scheme: str, ids: list[str], count: int) -> None:
    assert len(ids) == count and len(set(ids)) == count
    for text in ids:
        one = client.get(f"/v1/decode/{scheme}/{text}")
        assert one.status_code == 200, one.text
        assert one.json()["id"] == text


@pytest.mark.parametrize("scheme", SCHEMES)
def test_issued_on_every_path_and_metered(client: TestClient, routed: TestClient, scheme: str) -> None:
    before = issued_total(client, scheme)
    fast = client.get(f"/v1/ids/{scheme}", params={"count": 3})
    via_fastapi = routed.get(f"/v1/ids/{scheme}", params={"count": 3})
    post_query = client.post(f"/v1/ids/{scheme}", params={"count": 3})
    post_body = client.post(f"/v1/ids/{scheme}", json={"count": 3})
    for r in (fast, via_fastapi, post_query, post_body):
        assert r.status_code == 200, r.text
        assert r.json()["scheme"] == scheme
        check_ids(client, scheme, r.json()["ids"], 3)
    assert set(fast.json()) == set(via_fastapi.json()) == set(post_query.json()) == set(post_body.json())
    assert issued_total(client, scheme) - before == 12


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_option_and_format_is_accepted_on_both_paths(client: TestClient, routed: TestClient, scheme: str) -> None:
    entry = {s["name"]: s for s in client.get("/v1/schemes").json()["schemes"]}[scheme]
    for fmt in entry["formats"]:
        for c in (client, routed):
            r = c.get(f"/v1/ids/{scheme}", params={"format": fmt, "count": 2})
            assert r.status_code == 200 and r.json()["format"] == fmt, r.text
    for name, option in entry.get("options", {}).items():
        for choice in option.get("choices", []):
            for r in (
                client.get(f"/v1/ids/{scheme}", params={name: choice}),
                routed.get(f"/v1/ids/{scheme}", params={name: choice}),
                client.post(f"/v1/ids/{scheme}", json={name: choice}),
            ):
                assert r.status_code == 200, (name, choice, r.text)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_streamed(client: TestClient, scheme: str) -> None:
    before = issued_total(client, scheme)
    with client.stream("GET", f"/v1/ids/{scheme}/stream", params={"count": 1000}) as r:
        assert r.status_code == 200
        lines = b"".join(r.iter_bytes()).decode().splitlines()
    assert len(lines) == len(set(lines)) == 1000
    parse = schemes()[scheme].parse
    values = [parse(line) for line in lines]
    assert len(set(values)) == 1000
    assert issued_total(client, scheme) - before == 1000
    r = client.post(f"/v1/ids/{scheme}/stream", json={"count": 10})
    assert r.status_code == 200 and len(r.text.splitlines()) == 10


@pytest.mark.parametrize("scheme", SCHEMES)
def test_decoded_by_name_by_detection_and_in_free_text(client: TestClient, scheme: str) -> None:
    text = client.get(f"/v1/ids/{scheme}").json()["ids"][0]
    assert client.get(f"/v1/decode/{scheme}/{text}").json()["scheme"] == scheme
    detected = client.get(f"/v1/decode/{text}").json()["candidates"]
    assert scheme in [c["scheme"] for c in detected]
    body = client.post("/v1/decode", json={"text": f"2025-01-01 INFO request {text} done\nnothing here"}).json()
    [item] = body["items"]
    assert item["input"] == text and item["error"] is None
    [reading] = [c for c in item["candidates"] if c["scheme"] == scheme]
    assert reading["id"] == text and isinstance(reading["summary"], str) and reading["summary"]
    assert set(reading["words"]) <= set(reading["fields"])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_described_and_captioned(client: TestClient, scheme: str) -> None:
    entry = {s["name"]: s for s in client.get("/v1/schemes").json()["schemes"]}[scheme]
    declared = schemes()[scheme]
    assert entry["title"] == declared.title and entry["example"] == declared.example
    assert entry["formats"] and entry["layout"] and "node" in entry
    assert set(entry.get("options", {})) == {o.name for o in declared.options}
    decoded = client.get(f"/v1/decode/{scheme}/{declared.example}")
    assert decoded.status_code == 200, decoded.text
    missing = set(decoded.json()["fields"]) - set(entry["captions"])
    assert not missing, f"{scheme}: fields without a caption: {missing}"
    assert all(caption.strip() for caption in entry["captions"].values())
    if declared.token_pattern:
        assert re.fullmatch(declared.token_pattern, declared.example)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_leased(client: TestClient, scheme: str) -> None:
    node = client.app.app.state.node  # type: ignore[attr-defined]
    declared = schemes()[scheme]
    issuer = node.issuers[scheme]
    plan = declared.identity_pool(node.settings)
    if declared.shares_generator_with is not None:
        assert issuer.holder.claims is node.issuers[declared.shares_generator_with].holder.claims
        return
    if plan is None:
        assert issuer.holder.pool is None and not issuer.holder.claims
        return
    assert len(issuer.holder.claims) == plan.claims
    assert issuer.holder.pool == plan
    for claim in issuer.holder.claims:
        assert claim.valid() and plan.minimum <= claim.identity <= plan.maximum
        segment = plan.key_format.format(claim.identity)
        assert claim_key(NS, issuer.holder.pool, claim.identity) == NS + plan.key_prefix + segment
        assert mark_key(NS, issuer.holder.pool, claim.identity) == NS + plan.mark_prefix + segment
        assert plan.mark_prefix.startswith(f"idmint/marks/{scheme}/")


def test_settings_join_every_scheme_model() -> None:
    for scheme in schemes().values():
        if scheme.settings_model is not None:
            assert issubclass(Settings, scheme.settings_model)
            for name, field in scheme.settings_model.model_fields.items():
                assert name in Settings.model_fields and field.description, name


def test_readme_mentions_every_scheme() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for name in SCHEMES:
        assert f"`{name}`" in readme


TOKEN_OPTIONS = {"siq": [{"type": "group"}], "typeid": [{"type": "user_account"}]}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_format_has_a_token_pattern_that_its_issued_ids_match(client: TestClient, scheme: str) -> None:
    entry = next(s for s in client.get("/v1/schemes").json()["schemes"] if s["name"] == scheme)
    patterns = entry["token_patterns"]
    public = {"public"} if "public" in entry else set()  # a scheme with a public form (tests/public: its IDs)
    assert set(patterns) == set(entry["formats"]) | public, patterns
    option_sets: list[dict[str, str]] = [{}, *TOKEN_OPTIONS.get(scheme, [])]
    for name, option in entry.get("options", {}).items():
        option_sets.extend({name: value} for value in option.get("choices", []))
    for fmt, pattern in patterns.items():
        for options in option_sets:
            r = client.get(f"/v1/ids/{scheme}/stream", params={"count": 2000, "format": fmt, **options})
            if r.status_code == 422:  # an option this format does not take
                continue
            assert r.status_code == 200, r.text
            bad = [line for line in r.text.splitlines() if not re.fullmatch(pattern, line)]
            assert not bad, (fmt, options, bad[:3])
        for wrong in ("", "null", "<html>", "0x1", " " + entry["example"]):
            assert not re.fullmatch(pattern, wrong), (fmt, wrong)


def _declared_integer(text: str, form: dict[str, Any]) -> int:
    """An ID's integer as ``rising_per_identity`` says to read it (what every client does)."""
    digits = form["digits"]
    value = 0
    for char in text.translate({ord(c): None for c in form["strip"]}):
        value = value * len(digits) + digits.index(char)
    return value


@pytest.mark.parametrize("scheme", SCHEMES)
def test_rising_per_identity_reads_the_packed_value_and_each_identity_rises(client: TestClient, scheme: str) -> None:
    entry = next(s for s in client.get("/v1/schemes").json()["schemes"] if s["name"] == scheme)
    declared = entry["rising_per_identity"]
    if not declared:
        assert scheme in ("wiji", "uuidv7", "ulid", "typeid", "ksuid"), scheme
        return
    layout = {f["name"] for f in entry["layout"]}
    for form, rule in declared.items():
        assert form in entry["formats"] and {p["field"] for p in rule["identity"]} <= layout
        mask = sum(((1 << p["bits"]) - 1) << p["shift"] for p in rule["identity"])
        options = {k: v[0] for k, v in rule["needs"].items()}
        types = [{"type": t} for t in ("user", "content", "thread")] if scheme == "siq" else [{}]
        highest: dict[int, int] = {}
        for _ in range(2):
            for extra in types:
                r = client.get(f"/v1/ids/{scheme}/stream", params={"count": 300, "format": form, **options, **extra})
                assert r.status_code == 200, r.text
                for number, line in enumerate(r.text.splitlines()):
                    value = _declared_integer(line, rule)
                    if number < 3:
                        canonical = client.get(f"/v1/decode/{scheme}/{line}").json()["hex"]
                        assert value == int(canonical, 16), (form, line)
                    key = value & mask
                    assert value > highest.get(key, -1), (form, line)
                    highest[key] = value
