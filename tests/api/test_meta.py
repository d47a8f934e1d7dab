"""/v1/schemes, /healthz, /readyz, OpenAPI docs, and the completeness check over every registered scheme."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.schemes import schemes
from tests.helpers import SCHEMES, running_app

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SETTINGS_DOC = REPO / "docs" / "settings.md"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("state"), cluster_id=3, siq_domain="example.com") as c:
        yield c


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200
    assert all(s["ready"] for s in r.json()["schemes"].values())


def test_schemes_catalogue_names_layout_forms_limits_and_identity(client: TestClient) -> None:
    body = client.get("/v1/schemes").json()
    cat = {s["name"]: s for s in body["schemes"]}
    assert list(cat) == list(SCHEMES)
    for _name, entry in cat.items():
        assert entry["layout"] and entry["formats"] and entry["limits"]["max_count"] == 100_000
    assert cat["eight-byte"]["node"]["cluster_id"] == 3
    assert len(cat["eight-byte"]["node"]["identities"]) == 1
    assert cat["siq"]["node"]["domain_hash"] == 2261653831
    assert cat["muid"]["node"]["identities"][0] >= 0x10000000000
    assert "random_part" in cat["wiji"]["node"]
    assert body["backend"]["backend"] == "embedded"


def test_openapi_documents_the_issue_route(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert "/v1/ids/{scheme}" in spec["paths"] and "/v1/decode/{scheme}/{id}" in spec["paths"]
    docs = client.get("/docs")
    assert docs.status_code == 200
    # Served from the package, never a CDN: the page must work on a machine without internet.
    assert "cdn." not in docs.text and "swagger-ui-bundle.js" in docs.text


def test_every_registered_scheme_is_served_documented_and_round_trips(client: TestClient) -> None:
    readme = README.read_text() if README.exists() else ""
    cat = {s["name"]: s for s in client.get("/v1/schemes").json()["schemes"]}
    for name, scheme in schemes().items():
        assert name in cat, f"{name} missing from /v1/schemes"
        assert f"`{name}`" in readme, f"{name} missing from README.md"
        for fmt in scheme.formats:
            # The TypeID spec reads only prefix_suffix; its `uuid` output form reads back as a UUIDv7.
            reader = schemes()["uuidv7"] if (name, fmt) == ("typeid", "uuid") else scheme
            ids = client.get(f"/v1/ids/{name}", params={"format": fmt, "count": 3}).json()["ids"]
            for text in ids:
                value = reader.parse(text)
                assert scheme.format(value, fmt) == text


def test_every_setting_is_in_the_settings_table() -> None:
    from app.settings import Settings

    table = SETTINGS_DOC.read_text()
    missing = [name for name in Settings.model_fields if f"`IDMINT_{name.upper()}`" not in table]
    assert not missing, f"settings missing from docs/settings.md: {missing}"


@pytest.mark.parametrize(
    ("unit_ns", "named"),
    [(1e9, "s"), (1e6, "ms"), (1e3, "us"), (1e7, "10 ms"), (1e9 / 65536, "1/65536 s"), (1, "ns")],
)
def test_timestamp_precision_names_the_time_unit(unit_ns: float, named: str) -> None:
    from app.api.meta import timestamp_precision

    assert timestamp_precision(unit_ns) == named


def test_the_catalogue_gives_each_scheme_its_own_unit_and_lays_out_its_time_field(client: TestClient) -> None:
    cat = {s["name"]: s for s in client.get("/v1/schemes").json()["schemes"]}
    precision = {name: entry["timestamp_precision"] for name, entry in cat.items()}
    assert precision["ksuid"] == "s" and precision["siq"] == "1/65536 s" and precision["muid"] == "us"
    for name, entry in cat.items():
        example = client.get(f"/v1/decode/{name}/{entry['example']}").json()
        times = {field for field in example["fields"] if field.startswith("timestamp")}
        # the decode page finds a field's bits by its name: the time field is named alike in both
        assert times <= {f["name"] for f in entry["layout"]} and times <= set(entry["captions"]), name
