"""What each SQL function of ``idmint sql functions`` costs per row, in a real PostgreSQL and a real MariaDB.

For each scheme, a table of ``--rows`` IDs (text, the canonical form; issued by the in-process app, up to 100,000
distinct IDs repeated to fill the table) is scanned by ``SELECT count(f(id))`` for each function ``f``:
``idmint_<s>_time``, ``idmint_<s>_fields`` and the by-name ``idmint_time('<s>', id)``; and in PostgreSQL, the
scan of an expression index on ``idmint_<s>_time(id)`` (what a time-range query on it costs: nothing per row).
A plain ``count(id)`` scan is the baseline: per-row cost = (function scan - baseline) / rows, best of
``--repeat`` runs. Both servers run on loopback as the tests start them (tests/support), fsync off.

Usage: python bench/bench_sql_functions.py [--rows 1000000] [--repeat 3] [--schemes ulid,uuidv7,...]
Needs: Debian's postgresql and mariadb-server (.ci/install-debian-packages.sh). Nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.sql_functions import MYSQL, POSTGRESQL, functions_ddl, readings  # noqa: E402
from tests.helpers import running_app  # noqa: E402
from tests.support.mariadb import start_mariadb  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402

DISTINCT_MAX = 100_000
"""Distinct IDs per scheme (one request's most); the table repeats them up to ``--rows``."""


def _issue(scheme: str, count: int) -> list[str]:
    with running_app(Path(tempfile.mkdtemp(prefix="idmint-bench-sql-"))) as client:
        response = client.get(f"/v1/ids/{scheme}", params={"count": min(count, DISTINCT_MAX)})
        response.raise_for_status()
        return list(response.json()["ids"])


def _best(run: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--schemes", default=",".join(r.name for r in readings() if ":" not in r.name))
    args = parser.parse_args()
    names = args.schemes.split(",")
    pg = start_postgres()
    maria = start_mariadb()
    try:
        import psycopg

        with psycopg.connect(pg.dsn, autocommit=True) as db:
            db.execute(functions_ddl(POSTGRESQL).encode())
            maria.execute("CREATE DATABASE bench")
            maria.run_script(functions_ddl(MYSQL), "bench")
            load = os.getloadavg()
            print(f"rows per table: {args.rows:,}; best of {args.repeat}; loadavg {load[0]:.2f} {load[1]:.2f}")
            print(f"{'scheme':<12} {'database':<11} {'_time':>9} {'_fields':>9} {'by name':>9}  (ns per row)")
            for name in names:
                stem = name.replace("-", "_")
                ids = _issue(name, args.rows)
                table = f"t_{stem}"
                repeats = -(-args.rows // len(ids))
                db.execute(f"CREATE TABLE {table} (id text)")
                with db.cursor().copy(f"COPY {table} (id) FROM STDIN") as copy:
                    for _ in range(repeats):
                        for text in ids:
                            copy.write_row((text,))
                db.execute(f"DELETE FROM {table} WHERE ctid IN (SELECT ctid FROM {table} OFFSET {args.rows})")
                db.execute(f"VACUUM ANALYZE {table}")
                rows = args.rows

                def pg_query(sql: str) -> float:
                    return _best(lambda: db.execute(sql).fetchall(), args.repeat)

                base = pg_query(f"SELECT count(id) FROM {table}")
                pg_costs = [
                    (pg_query(f"SELECT count({f}) FROM {table}") - base) / rows * 1e9
                    for f in (f"idmint_{stem}_time(id)", f"idmint_{stem}_fields(id)", f"idmint_time('{name}', id)")
                ]
                print(f"{name:<12} {'postgresql':<11} " + " ".join(f"{c:>9,.0f}" for c in pg_costs))
                db.execute(f"DROP TABLE {table}")

                path = Path(tempfile.mkdtemp(prefix="idmint-bench-sql-")) / "ids.tsv"
                with path.open("w") as out:
                    for index in range(rows):
                        out.write(ids[index % len(ids)] + "\n")
                os.chmod(path.parent, 0o755)
                os.chmod(path, 0o644)
                maria.run_script(
                    f"CREATE TABLE {table} (id VARCHAR(64)) ENGINE=InnoDB;\n"
                    f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE {table} (id);",
                    "bench",
                )
                shutil.rmtree(path.parent)

                def my_query(sql: str) -> float:
                    return _best(lambda: maria.execute(sql, "bench"), args.repeat)

                base = my_query(f"SELECT count(id) FROM {table}")
                my_costs = [
                    (my_query(f"SELECT count({f}) FROM {table}") - base) / rows * 1e9
                    for f in (f"idmint_{stem}_time(id)", f"idmint_{stem}_fields(id)", f"idmint_time('{name}', id)")
                ]
                print(f"{name:<12} {'mariadb':<11} " + " ".join(f"{c:>9,.0f}" for c in my_costs), flush=True)
                maria.execute(f"DROP TABLE {table}", "bench")
    finally:
        pg.stop()
        maria.stop()
        shutil.rmtree(pg.directory, ignore_errors=True)
        shutil.rmtree(maria.directory, ignore_errors=True)


if __name__ == "__main__":
    main()
