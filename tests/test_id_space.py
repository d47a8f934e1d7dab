"""The end of each ID space: /v1/schemes' id_space_end, idmint_id_space_end_timestamp_seconds, and
``idmint layout check``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from app.cli import main
from app.main import create_app
from app.schemes import schemes
from tests.helpers import make_settings

ENDS = {
    "muid": "2112-09-17",  # 52-bit µs
    "eight-byte": "2109-05-15",  # 42-bit ms
    "wiji": "2540-11-07",
    "ksuid": "2150-06-19",  # 32-bit s from 2014-05-13
    "hlc-ulid": None,  # 48-bit ms: past the year 9999
    "uuidv7": None,
    "ulid": None,
    "typeid": None,
    "siq": None,
}


@pytest.mark.parametrize(
    ("layout", "end"), [("twitter", "2080-07-10"), ("instagram", "2046-06-27"), ("js53", "2094-09-07")]
)
def test_schemes_and_the_gauge_say_when_each_id_space_ends(tmp_path: Path, layout: str, end: str) -> None:
    with TestClient(create_app(make_settings(tmp_path, snowflake_layout=layout))) as client:
        catalogue = {s["name"]: s for s in client.get("/v1/schemes").json()["schemes"]}
        metrics = client.get("/metrics").text
    expected = {**ENDS, "snowflake": end}
    assert set(expected) == set(schemes())
    for name, day in expected.items():
        shown = catalogue[name]["id_space_end"]
        assert (shown[:10] if shown else None) == day, name
        sample = next(
            line
            for line in metrics.splitlines()
            if line.startswith(f'idmint_id_space_end_timestamp_seconds{{scheme="{name}"}}')
        )
        value = float(sample.rsplit(" ", 1)[1])
        if day is None:
            assert value >= 253_402_300_800, name  # /v1/schemes says null past 9999; the gauge keeps the figure
        else:
            assert datetime.fromisoformat(shown.replace("Z", "+00:00")).timestamp() == pytest.approx(value), name


def test_layout_check_says_whether_a_layout_holds() -> None:
    runner = CliRunner()
    short = runner.invoke(
        main, ["layout", "check", "instagram", "--rate", "100000", "--replicas", "3", "--years", "30"]
    )
    assert short.exit_code == 1, short.output
    assert "NO  time: the layout ends 2046-06-27" in short.output and "instagram: does not hold" in short.output
    fits = runner.invoke(
        main,
        [
            "layout",
            "check",
            "js53",
            "--rate",
            "300000",
            "--replicas",
            "3",
            "--workers",
            "2",
            "--regions",
            "2",
            "--years",
            "40",
        ],  # fmt: skip
    )
    assert fits.exit_code == 0, fits.output
    assert "12 of 32" in fits.output and "below 2**53 (exact in a double)" in fits.output
    crowded = runner.invoke(main, ["layout", "check", "js53", "--rate", "10", "--replicas", "40"])
    assert (
        crowded.exit_code == 1
        and "NO  worker IDs: 40 replicas x 1 worker IDs x 1 region(s) = 40 of 32" in crowded.output
    )
    slow = runner.invoke(main, ["layout", "check", "sonyflake", "--rate", "1000000", "--replicas", "2"])
    assert slow.exit_code == 1 and "NO  capacity: 51,200 IDs/s per region" in slow.output
    bad = runner.invoke(main, ["layout", "check", "custom:0:1:41/11/12", "--rate", "1"])
    assert bad.exit_code == 2 and "T+W+S must be at most 63" in bad.output
