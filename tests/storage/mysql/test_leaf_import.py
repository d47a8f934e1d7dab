"""``idmint storage import-leaf``: Leaf's ``leaf_alloc`` (a Leaf-shaped table on a real MariaDB) becomes idmint
sequences that start above every number Leaf handed out; a dry run by default, a summary printed, names idmint
cannot take left out and named, existing sequences left alone, the password never shown."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.mariadb import APP_PASSWORD, MariadbServer, MysqlDatabase
from tests.support.server import clean_environment, run_idmint

pytestmark = pytest.mark.integration  # a real MariaDB

LEAF_DDL = """
CREATE TABLE leaf_alloc (
    biz_tag      VARCHAR(128) NOT NULL DEFAULT '',
    max_id       BIGINT NOT NULL DEFAULT 1,
    step         INT NOT NULL,
    description  VARCHAR(256) DEFAULT NULL,
    update_time  TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (biz_tag)
) ENGINE=InnoDB;
INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES
    ('orders', 3000, 1000, 'order numbers'),
    ('leaf-segment-test', 1, 2000000, 'a step above idmint''s cache bound'),
    ('Payments.V2', 77, 100, 'a tag that is not an idmint name');
"""


def idmint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_idmint(args, env=env, timeout=120)


def test_leaf_tags_become_sequences_above_their_max_id(
    tmp_path: Path, mariadb_server: MariadbServer, mariadb_db: str, mysql_database: MysqlDatabase
) -> None:
    mariadb_server.run_script(LEAF_DDL, mariadb_db)
    leaf_url = mariadb_server.url(mariadb_db)
    env = {**clean_environment(), **mysql_database.env(), "IDMINT_STATE_DIR": str(tmp_path / "state")}

    dry = idmint(env, "storage", "import-leaf", "--from", leaf_url)
    assert dry.returncode == 0, dry.stderr
    assert "3 tag(s): 2 to create, 0 existing, 1 left out" in dry.stdout
    assert "orders: create, start 3001 (Leaf max_id 3000), cache 1000" in dry.stdout
    assert "leaf-segment-test: create, start 2 (Leaf max_id 1), cache 1000000" in dry.stdout
    assert "Payments.V2: skip: not an idmint sequence name" in dry.stdout
    assert "nothing changed" in dry.stdout
    shown = idmint(env, "sequence", "show")
    assert "orders" not in shown.stdout

    done = idmint(env, "storage", "import-leaf", "--from", leaf_url, "--apply")
    assert done.returncode == 0, done.stderr
    assert "imported: 2 sequence(s) created" in done.stdout
    taken = idmint(env, "sequence", "range", "orders", "--count", "3")
    assert taken.returncode == 0, taken.stderr
    assert json.loads(taken.stdout)["first"] == 3001  # above every number Leaf handed out

    again = idmint(env, "storage", "import-leaf", "--from", leaf_url, "--apply")
    assert "0 to create, 2 existing, 1 left out" in again.stdout and "imported: 0 sequence(s) created" in again.stdout
    for text in (dry.stdout, dry.stderr, done.stdout, done.stderr):
        assert APP_PASSWORD not in text


def test_a_wrong_password_names_the_refusal_not_the_password(mariadb_server: MariadbServer, mariadb_db: str) -> None:
    url = mariadb_server.url(mariadb_db, password="wrong-" + APP_PASSWORD)
    out = idmint(clean_environment(), "storage", "import-leaf", "--from", url)
    assert out.returncode != 0
    assert "rejected our credentials" in out.stderr and APP_PASSWORD not in out.stderr
