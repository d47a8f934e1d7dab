"""The MySQL URL and the server's refusals, without a server: the URL parsed once and shown without its password
(a URL that is not one is refused without quoting it), and each refusal named as what it is."""

from __future__ import annotations

import pymysql
import pytest

from app.errors import BackendUnavailableError, ConfigError
from app.storage.mysql.client import describe, map_error


def test_the_url_is_shown_without_its_password() -> None:
    args, shown = describe("mysql://app%40eu:p%3Ass@db.example:3307/ids")
    assert shown == "mysql://app@eu@db.example:3307/ids"
    assert args == {"host": "db.example", "port": 3307, "user": "app@eu", "password": "p:ss", "db": "ids"}
    assert describe("mariadb://u:x@db/ids")[1] == "mysql://u@db:3306/ids"


@pytest.mark.parametrize(
    "url",
    ["postgresql://u:secret@db/ids", "mysql://u:secret@db", "mysql://u:secret@db/ids;drop", "mysql://u:secret@:3306/x"],
)
def test_a_url_that_is_not_one_is_refused_without_quoting_it(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        describe(url)
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (
            pymysql.err.OperationalError(1045, "Access denied for user 'u' (using password: YES)"),
            "rejected our credentials",
        ),
        (pymysql.err.OperationalError(2003, "Can't connect to MySQL server"), "unreachable or refused"),
        (pymysql.err.OperationalError(1049, "Unknown database 'ids'"), "has no such database"),
        (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), "innodb_lock_wait_timeout"),
        (
            pymysql.err.OperationalError(1969, "Query execution was interrupted (max_statement_time exceeded)"),
            "in time",
        ),
        (pymysql.err.OperationalError(1290, "The MariaDB server is running with the --read-only option"), "read-only"),
        (pymysql.err.OperationalError(1040, "Too many connections"), "no connection slot free"),
    ],
)
def test_each_refusal_is_named_and_the_password_scrubbed(error: Exception, words: str) -> None:
    error.args = (error.args[0], f"{error.args[1]} s3cret")
    mapped = map_error(error, "reading", "mysql://u@db:3306/ids", "s3cret")
    assert isinstance(mapped, BackendUnavailableError)
    assert words in str(mapped) and "s3cret" not in str(mapped) and "while reading" in str(mapped)
