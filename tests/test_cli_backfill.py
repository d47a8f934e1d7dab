"""``idmint backfill SCHEME --times-file F``, run as a real subprocess on the embedded backend: one ID a line, in the
order of the file, each at its time; a second run continues above the first in the same milliseconds; refusals name
the rule and exit 1."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from app.schemes import get_scheme
from tests.support.server import REPO, run_idmint

pytestmark = pytest.mark.integration  # the idmint command as a real subprocess

TIMES = ["2021-03-04T05:06:07.890Z", "2021-03-04T05:06:07.890Z", "2019-12-31T23:00:00+01:00"]
EXPECTED_MS = [1_614_834_367_890, 1_614_834_367_890, 1_577_829_600_000]


def backfill(tmp_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("IDMINT_")},
        "IDMINT_STATE_DIR": str(tmp_path / "state"),
        "IDMINT_BACKFILL_IDENTITIES": "2",
    }
    return run_idmint(["backfill", *args], env=env, timeout=120, input=stdin, cwd=REPO)


@pytest.mark.parametrize("scheme", ["snowflake", "ulid"])
def test_one_id_a_line_in_order_and_a_second_run_continues_above(tmp_path: Path, scheme: str) -> None:
    times = tmp_path / "times.txt"
    times.write_text("\n".join(TIMES) + "\n\n")
    runs = [backfill(tmp_path, scheme, "--times-file", str(times)) for _ in range(2)]
    codec = get_scheme(scheme)
    seen: list[str] = []
    for run in runs:
        assert run.returncode == 0, run.stderr
        ids = run.stdout.split()
        assert [(codec.timestamp_ns(codec.parse(text)) or 0) // 1_000_000 for text in ids] == EXPECTED_MS
        seen += ids
    assert len(set(seen)) == 6


def test_stdin_options_and_refusals(tmp_path: Path) -> None:
    run = backfill(tmp_path, "typeid", "--type", "user", "--times-file", "-", stdin=TIMES[0] + "\n")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("user_")
    run = backfill(tmp_path, "ulid", "--times-file", "-", stdin="2021-03-04T05:06:07\n")
    assert run.returncode == 1
    assert "times[0] must be an RFC 3339 date-time with Z or an explicit offset" in run.stderr
    run = backfill(tmp_path, "muid", "--times-file", "-", stdin=TIMES[0] + "\n")
    assert run.returncode == 1 and "muid does not issue IDs at past times" in run.stderr
