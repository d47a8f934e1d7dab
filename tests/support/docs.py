"""Docs that run: the code blocks of README.md and docs/ read, classified and run against real servers.

The convention (docs/development.md, "Examples in the docs") in short:

* A fenced block's language says what it is. ``sh`` (``bash``, ``shell``) and ``python`` blocks are examples and
  are run; ``text``, ``toml``, ``json``, ``yaml``, ``sql``, ``promql`` and unlabelled blocks are data shown to the
  reader, never run. Any other language (``ts``, ``go``, ``dockerfile``...) must carry a not-run marker.
* A block that cannot run here carries, on the line before its fence, ``<!-- not run: REASON; validated by WHAT
  -->``: WHAT names at least one file of the repository (a test, a CI script) that checks it instead.
* In a shell block, each command runs in one bash per file, in order (``set -o pipefail``; ``curl`` runs with
  ``--fail-with-body`` unless it passes ``-f`` itself). It must exit 0 unless its trailing comment starts ``# exits
  N``. A trailing comment that starts with ``{`` or ``[`` is the JSON the command prints, and comment lines right
  below a command are what it prints (compared as JSON when they parse as JSON, else line by line); ``...``
  stands for what varies (a value, part of a string, the rest of a list or object, the rest of a line, or any
  number of lines when it is alone on one). Other comments are prose. What is shown is compared exactly
  (:func:`json_shape_problems` says the one exception: the sample IDs of a command that issues them).
* Servers: ``idmint serve``, ``.venv/bin/idmint serve`` and ``bash scripts/serve.sh`` lines (with leading
  ``VAR=value`` settings, ``--port``, ``--workers``, and ``& echo $! > FILE`` for a PID file) are started through
  :class:`tests.support.server.Server` and left running, as in another terminal. ``localhost:8000`` and
  ``127.0.0.1:8000`` reach the last one started on port 8000, or a default server started on first use;
  ``localhost:N`` the one started with ``--port N``; ``idmint-1:8000``, ``idmint-2:8000``... replicas sharing the
  default server's state directory (one fleet); ``etcd.internal:2379`` a real etcd started on first use. The
  shell's ``IDMINT_STATE_DIR`` is the default server's, so the command line shares its storage.

:func:`read_blocks` reads a file's blocks, :func:`commands` splits a shell block, :func:`json_shape_problems` and
:func:`line_problems` compare output with what the docs show, :class:`DocsRun` runs one file's blocks, and
:func:`relative_links` / :func:`anchors` serve the link check.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.server import REPO, Server, clean_environment

DOC_FILES_GLOBS = ("README.md", "CHANGELOG.md", "docs/**/*.md")
"""The files whose blocks and links the docs test reads (new files under docs/ are picked up as they appear)."""

SHELL_LANGUAGES = frozenset({"sh", "bash", "shell"})
PYTHON_LANGUAGES = frozenset({"python", "py"})
DATA_LANGUAGES = frozenset({"", "text", "toml", "json", "yaml", "yml", "sql", "promql", "ini", "csv", "console"})
"""Shown to the reader, never run, no marker needed."""

NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.+?);\s*validated by\s+(?P<what>.+?)\s*-->", re.S)
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>[A-Za-z_][A-Za-z0-9_]*)\1")
EXITS = re.compile(r"^exits (?P<status>\d+)(?::\s*(?P<rest>.*))?$")
ELLIPSIS = "..."

PYTHON_DONE = b"\x00docs-example-done"
PYTHON_SESSION = r"""
import sys, traceback
namespace = {"__name__": "__main__"}
stdin = sys.stdin.buffer
while True:
    size = stdin.readline()
    if not size:
        break
    source = stdin.read(int(size)).decode()
    try:
        exec(compile(source, "<docs example>", "exec"), namespace)
        outcome = b"ok"
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        outcome = b"error"
    sys.stdout.flush()
    sys.stdout.buffer.write(b"\x00docs-example-done " + outcome + b"\n")
    sys.stdout.buffer.flush()
"""
"""The file's Python session: reads blocks (a length line, then the source), runs each in one namespace, and ends
each with a :data:`PYTHON_DONE` line saying ``ok`` or ``error`` (after the traceback)."""
COMMAND_GUARD_S = 600.0
"""Only a command that never ends reaches this (its output is then quoted); the wait is on the command's end."""
DEFAULT_PORT = 8000


# --- reading ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NotRun:
    """A block's not-run marker: why it cannot run here, and what validates it instead."""

    reason: str
    validated_by: str

    def existing_paths(self) -> list[str]:
        """The repository files ``validated_by`` names (words with a ``/`` or a file suffix that exist)."""
        words = re.findall(r"[\w./-]+", self.validated_by)
        return [w.rstrip(".") for w in words if ("/" in w or "." in w.strip(".")) and (REPO / w.rstrip(".")).exists()]


@dataclass(frozen=True)
class Block:
    """A fenced code block: the file, the line of its opening fence (1-based), its language and text."""

    path: Path
    line: int
    language: str
    text: str
    not_run: NotRun | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.not_run is None and self.language in SHELL_LANGUAGES | PYTHON_LANGUAGES

    @property
    def needs_marker(self) -> bool:
        return self.language not in SHELL_LANGUAGES | PYTHON_LANGUAGES | DATA_LANGUAGES


def doc_files() -> list[Path]:
    found: set[Path] = set()
    for pattern in DOC_FILES_GLOBS:
        found.update(p for p in REPO.glob(pattern) if p.is_file())
    return sorted(found)


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, with the not-run marker on the line(s) before it, if any."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        language = (opening["info"].split() or [""])[0].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        blocks.append(Block(path, i + 1, language, "\n".join(body) + "\n", _marker_before(lines, i)))
        i = j + 1
    return blocks


def _marker_before(lines: list[str], fence_index: int) -> NotRun | None:
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    if k < 0 or not lines[k].rstrip().endswith("-->"):
        return None
    start = k
    while start >= 0 and "<!--" not in lines[start]:
        start -= 1
    found = NOT_RUN.search("\n".join(lines[max(start, 0) : k + 1]))
    if found is None:
        return None
    return NotRun(" ".join(found["reason"].split()), " ".join(found["what"].split()))


# --- shell blocks -----------------------------------------------------------------------------------------------


@dataclass
class Command:
    """One command of a shell block: its text as bash reads it (continuation lines and heredoc included, trailing
    comment cut), the line it starts on, its expected exit status, and the output the docs show for it."""

    line: int
    text: str
    status: int = 0
    comment: str = ""
    output: list[str] = field(default_factory=list)

    @property
    def expected_json(self) -> str | None:
        if self.comment.startswith(("{", "[")):
            return self.comment
        joined = "\n".join(self.output).strip()
        if not joined.startswith(("{", "[")):
            return None
        try:
            _tolerant_json(joined)
        except ValueError:
            return None  # lines that only start like JSON (a Python list's repr): compared as lines
        return joined


def trailing_comment(line: str) -> tuple[str, str]:
    """``(code, comment)``: bash's comment (a ``#`` starting a word, outside quotes) cut off ``line``."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c == "\\":
            i += 2
            continue
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1 :].strip()
        i += 1
    return line.rstrip(), ""


def commands(block: Block) -> list[Command]:
    """The commands of a shell block, each with the output lines the docs show right below it."""
    lines = block.text.splitlines()
    out: list[Command] = []
    last: Command | None = None
    i = 0
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if not stripped:
            last = None
            i += 1
            continue
        if stripped.startswith("#"):
            if last is not None:
                last.output.append(stripped[2:] if stripped.startswith("# ") else stripped[1:])
            i += 1
            continue
        start = i
        physical = [raw]
        while physical[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            physical.append(lines[i])
        code, comment = trailing_comment(physical[-1])
        text = "\n".join([*physical[:-1], code])
        heredoc = HEREDOC.search(text)
        if heredoc is not None:
            word = heredoc["word"]
            while i + 1 < len(lines):
                i += 1
                text += "\n" + lines[i]
                if lines[i].strip() == word:
                    break
        command = Command(block.line + 1 + start, text, comment=comment)
        exits = EXITS.match(comment)
        if exits is not None:
            command.status = int(exits["status"])
            command.comment = (exits["rest"] or "").strip()
        out.append(command)
        last = command
        i += 1
    return out


# --- comparing output with the docs ----------------------------------------------------------------------------

_ANY = "\x00any"
_MORE = "\x00more"
_SHORT_WORD = re.compile(r"^[a-z0-9_-]{1,12}$")
ISSUES = re.compile(r"/v1/ids/|\bidmint\s+mint\b")
"""A command that issues fresh IDs (``/v1/ids/...``, ``idmint mint``): the IDs the docs show are samples."""


def issues_ids(command: Command) -> bool:
    """Whether ``command``'s output carries freshly issued IDs (and their times): it issues, and succeeds."""
    return command.status == 0 and ISSUES.search(command.text) is not None


def _tolerant_json(text: str) -> Any:
    """The docs' JSON with ``...`` elisions, as Python values holding the markers above."""
    text = re.sub(r",\s*\.\.\.\s*\]", f', "{_MORE}"]', text)
    text = re.sub(r"\[\s*\.\.\.\s*\]", f'["{_MORE}"]', text)
    text = re.sub(r",\s*\.\.\.\s*\}", f', "{_MORE}": 0}}', text)
    text = re.sub(r"\{\s*\.\.\.\s*\}", f'{{"{_MORE}": 0}}', text)
    text = re.sub(r":\s*\.\.\.", f': "{_ANY}"', text)
    return json.loads(text.replace("\x00", "\\u0000"))


def json_shape_problems(expected_text: str, actual_text: str, fresh: bool = False) -> list[str]:
    """How ``actual_text`` (a command's output) differs from the JSON the docs show: the same keys, list lengths
    (unless ``...``), types, and values exactly: numbers, booleans, null and strings, where ``...`` inside a string
    stands for any text (``"issued by ..."``, ``"..."``). ``fresh`` (the output of a command that issues IDs,
    :func:`issues_ids`): strings other than short words (``"wiji"``, ``"base32"``) are the docs' sample IDs and
    times, compared by type only. Compact JSON in the docs (no space after ``:`` and ``,``) must be compact in the
    output too."""
    try:
        expected = _tolerant_json(expected_text)
    except json.JSONDecodeError as exc:
        return [f"the docs' JSON does not parse ({exc}): {expected_text}"]
    try:
        actual = json.loads(actual_text)
    except json.JSONDecodeError:
        return [f"the output is not JSON: {actual_text[:500]!r}"]
    problems: list[str] = []
    _compare(expected, actual, "$", problems, fresh)
    if _is_compact(expected_text) and not _is_compact(actual_text.strip()):
        problems.append("the docs show compact JSON; the output is spaced")
    return problems


def _compare(expected: Any, actual: Any, where: str, problems: list[str], fresh: bool) -> None:
    if expected == _ANY:
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            problems.append(f"{where}: expected an object, got {actual!r}")
            return
        keys = [k for k in expected if k != _MORE]
        missing = [k for k in keys if k not in actual]
        extra = [] if _MORE in expected else [k for k in actual if k not in expected]
        if missing or extra:
            problems.append(f"{where}: keys missing {missing}, not shown in the docs {extra}")
        for k in keys:
            if k in actual:
                _compare(expected[k], actual[k], f"{where}.{k}", problems, fresh)
    elif isinstance(expected, list):
        if not isinstance(actual, list):
            problems.append(f"{where}: expected a list, got {actual!r}")
            return
        more = bool(expected) and expected[-1] == _MORE
        items = expected[:-1] if more else expected
        if (len(actual) < len(items)) if more else (len(actual) != len(items)):
            problems.append(f"{where}: {len(actual)} items, the docs show {len(items)}{' or more' if more else ''}")
        for n, (e, a) in enumerate(zip(items, actual)):
            _compare(e, a, f"{where}[{n}]", problems, fresh)
    elif isinstance(expected, str):
        if not isinstance(actual, str):
            problems.append(f"{where}: expected a string, got {actual!r}")
        elif (not fresh or _SHORT_WORD.match(expected)) and not _string_matches(expected, actual):
            problems.append(f"{where}: {actual!r}, the docs show {expected!r}")
    elif isinstance(expected, bool) or expected is None or isinstance(expected, int | float):
        if actual != expected or type(actual) is not type(expected):
            problems.append(f"{where}: {actual!r}, the docs show {expected!r}")


def _string_matches(expected: str, actual: str) -> bool:
    """``actual`` is ``expected``, where each ``...`` in ``expected`` stands for any text."""
    if ELLIPSIS not in expected:
        return actual == expected
    pattern = ".*".join(re.escape(part) for part in expected.split(ELLIPSIS))
    return re.fullmatch(pattern, actual, re.S) is not None


def _is_compact(text: str) -> bool:
    in_string = escaped = False
    previous = ""
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in " \n" and previous in ":,":
            return False
        previous = c if not in_string else previous
    return True


def line_problems(expected: list[str], actual_text: str) -> list[str]:
    """How the output's lines differ from the lines the docs show: one to one, whitespace runs as one space,
    ``...`` within a line for any text, a line of ``...`` alone for any number of lines."""
    actual = [" ".join(line.split()) for line in actual_text.splitlines()]
    patterns: list[re.Pattern[str] | None] = []
    for line in expected:
        line = " ".join(line.split())
        if line == ELLIPSIS:
            patterns.append(None)
        else:
            patterns.append(re.compile(".*?".join(re.escape(part.strip()) for part in line.split(ELLIPSIS)) + "$"))
    if _lines_match(patterns, actual):
        return []
    return ["the output's lines are not the ones the docs show:\n" + "\n".join(actual[:40])]


def _lines_match(patterns: list[re.Pattern[str] | None], actual: list[str]) -> bool:
    if not patterns:
        return not actual
    head, rest = patterns[0], patterns[1:]
    if head is None:
        return any(_lines_match(rest, actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and head.match(actual[0]) is not None and _lines_match(rest, actual[1:])


# --- links ------------------------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _outside_fences(path: Path) -> list[str]:
    kept, fence = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        opening = FENCE.match(line)
        if opening is not None and (not fence or opening["fence"].startswith(fence)):
            fence = "" if fence else opening["fence"]
            continue
        if not fence:
            kept.append(line)
    return kept


def prose(path: Path) -> str:
    """``path``'s text without fenced blocks and inline code (links there are not links)."""
    return "\n".join(re.sub(r"`[^`]*`", "", line) for line in _outside_fences(path))


def relative_links(path: Path) -> list[str]:
    return [m["target"] for m in LINK.finditer(prose(path)) if not re.match(r"^[a-z][a-z0-9+.-]*:", m["target"], re.I)]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of ``path``'s headings (lowercase, punctuation dropped, spaces to ``-``, repeats ``-1``)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _outside_fences(path):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading[1].lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


# --- running ----------------------------------------------------------------------------------------------------

SERVE = re.compile(
    r"^(?P<assign>(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)"
    r"(?:(?:\.venv/bin/)?idmint\s+serve|bash\s+scripts/serve\.sh)(?P<args>(?:\s+[^&\s]+)*)"
    r"(?P<bg>\s*&(?:\s*echo\s+\$!\s*>\s*(?P<pidfile>\S+))?)?\s*$"
)
HOST = re.compile(r"\b(?P<host>localhost|127\.0\.0\.1|idmint-(?P<replica>\d+)|etcd\.internal):(?P<port>\d{2,5})\b")
CURL_SHIM = """#!/bin/sh
# the docs test: an HTTP error status fails the example (a command shown to, "# exits 22", passes -f itself)
for arg in "$@"; do
    case "$arg" in
        --fail|--fail-with-body) exec /usr/bin/curl "$@" ;;
        --*) ;;
        -*f*) exec /usr/bin/curl "$@" ;;
    esac
done
exec /usr/bin/curl --fail-with-body "$@"
"""


class DocsRunError(AssertionError):
    pass


class DocsRun:
    """One markdown file's examples run in order, as a reader following it would: one bash for its shell blocks,
    one Python session for its Python blocks, the servers its lines start (or a default one), all stopped by
    :meth:`close`. ``etcd``: called once when an example names ``etcd.internal:2379``; returns an endpoint."""

    def __init__(self, workdir: Path, etcd: Callable[[], str]) -> None:
        self.workdir = workdir
        self.cwd = workdir / "reader"
        self.cwd.mkdir(parents=True)
        for entry in REPO.iterdir():  # the reader's checkout: relative paths (.venv, scripts, deploy) work
            if entry.name not in (".git", "test-artifacts"):
                (self.cwd / entry.name).symlink_to(entry)
        shims = workdir / "shims"
        shims.mkdir()
        (shims / "curl").write_text(CURL_SHIM)
        (shims / "curl").chmod(0o755)
        self.state_dir = workdir / "state"
        self.env = clean_environment()
        self.env.update(
            PATH=f"{shims}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}",
            IDMINT_STATE_DIR=str(self.state_dir),
            PYTHONUNBUFFERED="1",
        )
        self._etcd_factory = etcd
        self._etcd: str | None = None
        self.servers: list[Server] = []
        self.ports: dict[int, Server] = {}
        self.replicas: dict[int, Server] = {}
        self._count = 0
        self.python: subprocess.Popen[bytes] | None = None
        """The file's one Python session (started by its first Python block)."""
        self.bash = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            bufsize=0,  # unbuffered: select() on the pipe sees every marker line
        )
        self._send("set -o pipefail\n")

    # -- servers and hosts ---------------------------------------------------------------------------------------

    def _start(self, env: dict[str, str], args: list[str], workers: int = 1) -> Server:
        server = Server(self.workdir / "servers", env, *args, workers=workers)
        self.servers.append(server)
        server.wait_ready()
        return server

    def default_server(self) -> Server:
        if DEFAULT_PORT not in self.ports:
            self.ports[DEFAULT_PORT] = self._start({"IDMINT_STATE_DIR": str(self.state_dir)}, [])
        return self.ports[DEFAULT_PORT]

    def _replica(self, n: int) -> Server:
        if n == 1:
            return self.default_server()
        if n not in self.replicas:
            self.default_server()
            self.replicas[n] = self._start({"IDMINT_STATE_DIR": str(self.state_dir)}, [])
        return self.replicas[n]

    def rewrite(self, text: str, where: str) -> str:
        """``text`` with the docs' hosts replaced by the real servers' (started as needed)."""

        def real(m: re.Match[str]) -> str:
            port = int(m["port"])
            if m["host"] == "etcd.internal":
                if self._etcd is None:
                    self._etcd = self._etcd_factory()
                return self._etcd.split("://", 1)[1]
            if m["replica"] is not None:
                return self._replica(int(m["replica"])).target
            if port == DEFAULT_PORT:
                return self.default_server().target
            if port not in self.ports:
                raise DocsRunError(f"{where}: nothing serves port {port}: start it with `idmint serve --port {port}`")
            return self.ports[port].target

        return HOST.sub(real, text)

    def _serve(self, command: Command, m: re.Match[str], where: str) -> None:
        self._count += 1
        env_file = self.workdir / f"env-{self._count}"
        status = self._bash(f"{m['assign']} env -0 > {shlex.quote(str(env_file))}")
        if status != 0:
            raise DocsRunError(f"{where}: could not read the environment of {command.text!r}")
        env = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        settings = {}
        for key, value in env.items():
            if key.startswith("IDMINT_"):
                candidate = self.cwd / value
                absolute = value and "://" not in value and not value.startswith("/") and candidate.exists()
                settings[key] = str(candidate.resolve()) if absolute else value
        args = shlex.split(m["args"] or "")
        port, workers, rest = DEFAULT_PORT, 1, []
        k = 0
        while k < len(args):
            word = args[k]
            name, _, inline = word.partition("=")
            if name in ("--port", "--host", "--workers"):
                value = inline or (args[k + 1] if k + 1 < len(args) else "")
                k += 1 if inline else 2
                if name == "--port":
                    port = int(value)
                elif name == "--workers":
                    workers = int(value)
                continue
            rest.append(word)
            k += 1
        settings.pop("IDMINT_PORT", None)
        settings.pop("IDMINT_HOST", None)
        server = self._start(settings, rest, workers=workers)
        self.ports[port] = server
        if m["pidfile"]:
            (self.cwd / m["pidfile"]).write_text(f"{server.pid}\n")

    # -- running blocks ------------------------------------------------------------------------------------------

    def _send(self, text: str) -> None:
        assert self.bash.stdin is not None
        self.bash.stdin.write(text.encode())
        self.bash.stdin.flush()

    def _bash(self, text: str, out: Path | None = None, err: Path | None = None) -> int:
        """Run ``text`` in the file's bash (its state carries on); its exit status."""
        self._count += 1
        marker = f"@@docs-test-{self._count}"
        out = out or self.workdir / "discard.out"
        err = err or self.workdir / "discard.err"
        self._send(f"{{ {text}\n}} > {shlex.quote(str(out))} 2> {shlex.quote(str(err))} < /dev/null\n")
        self._send(f"printf '%s %s\\n' {marker} $?\n")
        assert self.bash.stdout is not None
        fd = self.bash.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], COMMAND_GUARD_S)
            if not ready:
                raise DocsRunError(f"no end after {COMMAND_GUARD_S:g} s: {text}\n{_tail(out)}\n{_tail(err)}")
            line = self.bash.stdout.readline().decode(errors="replace")
            if not line:
                raise DocsRunError(f"bash exited running: {text}\n{_tail(err)}")
            if line.startswith(marker):
                return int(line.split()[1])

    def run_shell(self, block: Block) -> None:
        for command in commands(block):
            where = f"{block.path.relative_to(REPO)}:{command.line}"
            text = self.rewrite(command.text, where)
            serve = SERVE.match(text) if "\n" not in text else None
            if serve is not None:
                self._serve(command, serve, where)
                continue
            out, err = self.workdir / f"out-{self._count + 1}", self.workdir / f"err-{self._count + 1}"
            status = self._bash(text, out, err)
            stdout = out.read_text(errors="replace")
            problems = []
            if status != command.status:
                problems.append(f"exit status {status}, the docs expect {command.status}")
            expected_json = command.expected_json
            if expected_json is not None:
                problems += json_shape_problems(expected_json, stdout.strip(), issues_ids(command))
            elif command.output:
                problems += line_problems(command.output, stdout)
            if problems:
                raise DocsRunError(
                    f"{where}: {command.text}\n(run as: {text})\n" + "\n".join(problems) + f"\nstdout:\n{stdout[:3000]}"
                    f"\nstderr:\n{_tail(err)}" + self._server_logs()
                )

    def run_python(self, block: Block) -> None:
        """Run ``block`` in the file's one Python session (names carry on to later blocks, as in one interpreter
        a reader pastes the page into); DocsRunError with the traceback when it raises."""
        self._count += 1
        source = self.rewrite(block.text, block.where)
        if self.python is None:
            self.python = subprocess.Popen(
                [sys.executable, "-u", "-c", PYTHON_SESSION],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        session = self.python
        assert session.stdin is not None and session.stdout is not None
        data = source.encode()
        session.stdin.write(f"{len(data)}\n".encode() + data)
        session.stdin.flush()
        output: list[bytes] = []
        guard = threading.Timer(COMMAND_GUARD_S, session.kill)
        guard.start()
        try:
            while True:
                line = session.stdout.readline()
                if not line:
                    raise DocsRunError(
                        f"{block.where}: the Python session ended\n{b''.join(output).decode(errors='replace')}"
                    )
                if line.startswith(PYTHON_DONE):
                    break
                output.append(line)
        finally:
            guard.cancel()
        if line.strip() != PYTHON_DONE + b" ok":
            raise DocsRunError(
                f"{block.where}: the Python example failed\n{textwrap.indent(source, '    ')}\n"
                f"output:\n{b''.join(output).decode(errors='replace')[-3000:]}" + self._server_logs()
            )

    def run(self, block: Block) -> None:
        if block.language in SHELL_LANGUAGES:
            self.run_shell(block)
        else:
            self.run_python(block)

    def _server_logs(self) -> str:
        return "".join(f"\n--- {s!r} log:\n{s.log_tail(20)}" for s in self.servers)

    def close(self) -> None:
        if self.python is not None:
            if self.python.stdin is not None:
                self.python.stdin.close()
            try:
                self.python.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.python.kill()
                self.python.wait()
            if self.python.stdout is not None:
                self.python.stdout.close()
        if self.bash.stdin is not None:
            self.bash.stdin.close()
        try:
            self.bash.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.bash.kill()
            self.bash.wait()
        if self.bash.stdout is not None:
            self.bash.stdout.close()
        for server in reversed(self.servers):
            server.stop()


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def runnable_files() -> Iterator[Path]:
    for path in doc_files():
        if any(block.runs for block in read_blocks(path)):
            yield path
