"""``/v1/schemes``' ``rising`` (each scheme's :attr:`~app.schemes.base.Scheme.rising_formats`): every form declared
rising gives one answer whose IDs strictly rise as strings, a batch and a stream alike (the clients refuse an answer
that does not)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.schemes import schemes
from tests.helpers import running_app

BATCH = 10_000
STREAM = 30_000

DECLARED = [
    (name, form, {option: values[0] for option, values in needs.items()})
    for name, scheme in schemes().items()
    for form, needs in scheme.rising_formats.items()
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("state"), cluster_id=3, siq_domain="example.com") as c:
        yield c


def not_rising_at(ids: list[str]) -> int | None:
    return next((i for i in range(1, len(ids)) if ids[i - 1] >= ids[i]), None)


def test_the_catalogue_publishes_each_schemes_rising_forms(client: TestClient) -> None:
    cat = {s["name"]: s for s in client.get("/v1/schemes").json()["schemes"]}
    for name, scheme in schemes().items():
        assert set(scheme.rising_formats) <= set(scheme.formats), name
        published = cat[name]["rising"]
        assert published == {f: {k: list(v) for k, v in n.items()} for f, n in scheme.rising_formats.items()}
        for needs in published.values():
            for option, values in needs.items():
                assert set(values) <= set(cat[name]["options"][option]["choices"]), (name, option)
    assert cat["eight-byte"]["rising"] == {}  # several generator IDs: see the test below
    assert "did" not in cat["siq"]["rising"] and "decimal" not in cat["snowflake"]["rising"]


@pytest.mark.parametrize(("scheme", "form", "options"), DECLARED, ids=[f"{s}-{f}" for s, f, _ in DECLARED])
def test_a_form_declared_rising_rises_through_a_batch_and_a_stream(
    client: TestClient, scheme: str, form: str, options: dict[str, str]
) -> None:
    batch = client.get(f"/v1/ids/{scheme}", params={"count": BATCH, "format": form, **options})
    assert batch.status_code == 200, batch.text
    ids = batch.json()["ids"]
    assert len(ids) == BATCH and not_rising_at(ids) is None
    stream = client.get(f"/v1/ids/{scheme}/stream", params={"count": STREAM, "format": form, **options})
    assert stream.status_code == 200, stream.text
    lines = stream.text.splitlines()
    assert len(lines) == STREAM and not_rising_at(lines) is None
    assert ids[-1] < lines[0]  # one generator behind both answers here (one node, one worker)


def test_eight_byte_rises_per_generator_id_not_within_an_answer_of_several(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with running_app(tmp_path_factory.mktemp("four"), cluster_id=3, eight_byte_generators=4) as four:
        entry = next(s for s in four.get("/v1/schemes").json()["schemes"] if s["name"] == "eight-byte")
        rule = entry["rising_per_identity"]["hex"]
        assert rule["needs"] == {"mode": ["time_sequential"]}
        mask = sum(((1 << p["bits"]) - 1) << p["shift"] for p in rule["identity"])
        lines = four.get(
            "/v1/ids/eight-byte/stream", params={"count": 2000, "format": "hex", "mode": "time_sequential"}
        )
        values = [int(line, 16) for line in lines.text.splitlines()]
        assert len({v & mask for v in values}) == 4
        assert not_rising_at(lines.text.splitlines()) is not None  # slot 64 of a millisecond: the next generator ID
        for identity in {v & mask for v in values}:
            own = [v for v in values if v & mask == identity]
            assert own == sorted(set(own))
