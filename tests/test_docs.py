"""README.md and docs/ as a reader meets them (docs/development.md, "Examples in the docs").

* Every shell and Python example runs as printed against real servers (tests/support/server.py's harness, and a
  real etcd where an example names one), and prints what the docs show (``integration``: one test per file).
* Every block that cannot run here says why and names the file that validates it instead; every relative link
  and anchor resolves; no code cites the scheme notes that used to live outside the repository (fast lane).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.docs import (
    Block,
    Command,
    DocsRun,
    NotRun,
    _tolerant_json,
    anchors,
    commands,
    doc_files,
    issues_ids,
    json_shape_problems,
    line_problems,
    read_blocks,
    relative_links,
    runnable_files,
)
from tests.support.etcd import EtcdServer
from tests.support.server import REPO

README_MAX_LINES = 350
"""The README is a front page: what idmint is, set-up, first IDs, which scheme, the API, links."""


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.integration
@pytest.mark.parametrize("path", list(runnable_files()), ids=_name)
def test_examples_run_as_printed(path: Path, tmp_path: Path, etcd_factory: Callable[..., EtcdServer]) -> None:
    run = DocsRun(tmp_path, lambda: etcd_factory().endpoint)
    try:
        for block in read_blocks(path):
            if block.runs:
                run.run(block)
    finally:
        run.close()


def test_every_block_runs_or_says_why_and_what_validates_it() -> None:
    problems = []
    for path in doc_files():
        for block in read_blocks(path):
            if block.not_run is not None:
                if not block.not_run.reason or not block.not_run.existing_paths():
                    problems.append(f"{block.where}: the not-run marker must give a reason and name an existing file")
            elif block.needs_marker:
                problems.append(
                    f"{block.where}: a `{block.language}` block cannot run here: put "
                    "`<!-- not run: REASON; validated by FILE -->` on the line before it"
                )
            elif block.runs and block.language != "python":
                for command in commands(block):
                    expected = command.expected_json
                    if expected is not None:
                        try:
                            _tolerant_json(expected)
                        except ValueError as exc:
                            problems.append(f"{block.where}: the JSON after line {command.line} does not parse: {exc}")
    assert not problems, "\n".join(problems)


def test_a_curl_shown_failing_on_an_http_error_fails_for_the_reader_too() -> None:
    """The docs test's curl fails on an HTTP error status (``--fail-with-body``); a reader's plain curl exits 0. A
    command shown to exit 22 (curl's code for an HTTP error) passes ``-f``, ``--fail`` or ``--fail-with-body``
    itself, so that the reader's run and the test's agree."""
    problems = []
    for path in doc_files():
        for block in read_blocks(path):
            if block.runs and block.language != "python":
                for command in commands(block):
                    if command.status == 22 and not re.search(
                        r"\bcurl\b.*\s(-[a-zA-Z]*f[a-zA-Z]*|--fail|--fail-with-body)\b", command.text
                    ):
                        problems.append(
                            f"{_name(path)}:{command.line}: `# exits 22` needs curl's -f (or --fail-with-body)"
                        )
    assert not problems, "\n".join(problems)


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = []
    for path in doc_files():
        for target in relative_links(path):
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"{_name(path)}: {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{_name(path)}: {target}: no heading with that anchor in {_name(linked)}")
    assert not problems, "\n".join(problems)


def test_the_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


def test_the_code_cites_the_specifications_in_the_repository() -> None:
    old = ("SPEC" + "_NOTES", "STANDARD" + "_SCHEMES")  # the notes that lived beside the repository
    citing = [
        f"{_name(source)}:{n}"
        for folder in ("app", "tests", "bench", "clients")
        for source in (REPO / folder).rglob("*.py")
        for n, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1)
        if any(word in line for word in old)
    ]
    assert not citing, f"cite docs/schemes/ instead: {citing}"


# --- the convention's reading rules, on small samples -----------------------------------------------------------


def _block(text: str, language: str = "sh") -> Block:
    return Block(REPO / "README.md", 10, language, text, None)


def test_commands_carry_their_expected_output_and_status() -> None:
    found = commands(
        _block(
            "# prose before any command\n"
            'curl \'localhost:8000/v1/ids/wiji?count=3\'   # {"scheme":"wiji","ids":[...]}\n'
            "idmint layout check instagram \\\n"
            "    --years 30   # exits 1: the layout ends too early\n"
            "# NO  time: ...\n"
            "# ...\n"
            "\n"
            "cat > keys.toml <<EOF\n"
            "# not a comment: the heredoc's text\n"
            "EOF\n"
            "echo '# not a comment'  # a comment\n"
        )
    )
    assert [c.line for c in found] == [12, 13, 18, 21]
    assert found[0].expected_json == '{"scheme":"wiji","ids":[...]}' and found[0].status == 0
    assert found[1].status == 1 and found[1].output == ["NO  time: ...", "..."] and found[1].expected_json is None
    assert found[2].text.endswith("# not a comment: the heredoc's text\nEOF") and found[2].output == []
    assert found[3].text == "echo '# not a comment'" and found[3].comment == "a comment"


@pytest.mark.parametrize(
    ("expected", "actual", "fresh", "ok"),
    [
        ('{"scheme":"wiji","ids":["A",...]}', '{"scheme":"wiji","ids":["X","Y","Z"]}', True, True),
        ('{"scheme":"wiji","ids":["A",...]}', '{"scheme":"wiji","ids":[]}', True, False),
        ('{"scheme":"wiji","ids":["A"]}', '{"scheme":"ulid","ids":["X"]}', True, False),  # a short word is compared
        ('{"scheme":"wiji","ids":["A"]}', '{"scheme":"wiji","ids":["X"]}', False, False),  # not issued: exact
        ('{"timestamp":"1974-07-14T02:22:16.275Z"}', '{"timestamp":"1974-07-14T19:42:16.275Z"}', False, False),
        ('{"timestamp":"1974-07-14T19:42:16.275Z"}', '{"timestamp":"1974-07-14T19:42:16.275Z"}', False, True),
        ('{"words":"issued by ... since ... UTC"}', '{"words":"issued by vm pid 7 since 12:01 UTC"}', False, True),
        ('{"words":"issued by ... since ... UTC"}', '{"words":"no claim of this identity"}', False, False),
        ('{"fleet_id":"..."}', '{"fleet_id":"3f2a"}', False, True),
        ('{"fleet_id":"..."}', '{"fleet_id":3}', False, False),  # ... in a string stands for a string
        ('{"name":"orders","first":...,"count":3}', '{"name":"orders","first":7,"count":3}', False, True),
        ('{"name":"orders","count":3}', '{"name":"orders","count":4}', False, False),  # numbers are compared
        ('{"name":"orders"}', '{"name":"orders","next":1}', False, False),  # a key the docs leave out
        ('{"name":"orders",...}', '{"name":"orders","next":1}', False, True),
        ('{"a":{...},...}', '{"a":{"b":1},"c":2}', False, True),
        ('{"name":"orders"}', '{"name": "orders"}', False, False),  # compact in the docs, spaced in the output
        ('{"name": "orders"}', '{"name": "orders"}', False, True),
    ],
)
def test_json_shapes(expected: str, actual: str, fresh: bool, ok: bool) -> None:
    assert (json_shape_problems(expected, actual, fresh) == []) is ok


@pytest.mark.parametrize(
    ("text", "status", "fresh"),
    [
        ("curl 'localhost:8000/v1/ids/wiji?count=3'", 0, True),
        ("idmint mint wiji -n 3", 0, True),
        ("curl -f 'localhost:8000/v1/ids/wiji?count=0'", 22, False),  # an error names a rule: exact
        ("curl 'localhost:8000/v1/decode/eight-byte/cb54ecf2840a0015'", 0, False),
        ("idmint decode 01FZ11RQKT000002NAM48H248H", 0, False),
    ],
)
def test_only_the_sample_ids_of_an_issuing_command_are_compared_by_type(text: str, status: int, fresh: bool) -> None:
    assert issues_ids(Command(1, text, status)) is fresh


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (
            ["NO  time: the layout ends ..., ... needed", "...", "instagram: does not hold"],
            "NO time: the layout "
            "ends 2046-06-27, 19.6 years from now; 30 needed\nok  a\nok  b\ninstagram: does not hold\n",
            True,
        ),
        (
            ['"status": "confirmed",', '"words": "issued by ..."'],
            '"status": "confirmed",\n"reason": null,\n"words": "issued by pod x"\n',
            False,
        ),  # a line the docs leave out
        (["id >= 1 AND id < 2"], "id >= 1 AND id < 3\n", False),
    ],
)
def test_output_lines(expected: list[str], actual: str, ok: bool) -> None:
    assert (line_problems(expected, actual) == []) is ok


def test_not_run_markers_name_what_validates_them() -> None:
    assert NotRun("needs Docker", "tests/ops/test_podman.py and .ci/run").existing_paths() == [
        "tests/ops/test_podman.py",
        ".ci/run",
    ]
    assert NotRun("needs Docker", "a person reading it").existing_paths() == []
