"""The conformance driver: runs the cases of ``clients/conformance/cases/`` against each client's runner, through real
idmint servers and fault proxies, and prints one line per client (``python: 59 passed, 0 failed``).

::

    python clients/conformance/driver.py [--client python|typescript|go ...] [--case NAME ...] [--json FILE] [-v]

It starts what the cases name (``tests/support/server.py`` and ``tests/support/etcd.py``, the test suite's harnesses):

* ``embedded``: one ``idmint serve`` on the embedded backend, region 0 of 2, ``IDMINT_MAX_COUNT=1000``;
* ``region-1``: another fleet (its own state dir), region 1 of 2: disjoint identities, separate sequences;
* ``overlapping``: another fleet on one region: its identity pools overlap ``embedded``'s;
* ``etcd-a`` and ``etcd-b``: two replicas of one fleet on a real etcd (distinct leased identities), for failover;
  one killed by a case is replaced by a new replica before the next case that needs it.

Every server but ``overlapping`` has one public-ID key (``IDMINT_PUBLIC_ID_KEYS_FILE``, key 1, a secret made for
the run): ``format=public`` and ``/v1/public`` work there, and are a 422 naming the setting on ``overlapping``.

Each case gets fresh fault proxies (:mod:`proxy`) in front of them. The runner of a client is a program reading one
JSON command a line on stdin and writing one JSON result a line on stdout (README.md beside this file); it runs
for the whole suite, and each case starts with its own client. The clients named run side by side (a thread each,
one set of servers): a case that kills a server runs alone, the others together. Every case also checks, whatever
its steps say:
every ID handed out matches its scheme's token pattern (from the server's ``/v1/schemes``), and no ID (nor
sequence integer) is handed out twice within the case. Exit status: 0 when every case passed for every client.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import httpx  # noqa: E402
from proxy import FaultProxy  # noqa: E402

from tests.support.etcd import EtcdServer  # noqa: E402
from tests.support.server import Server, free_port  # noqa: E402

CASES_DIR = HERE / "cases"
RESULT_TIMEOUT_S = 180.0
"""A guard against a runner that never answers (the case fails naming the command), not a time budget."""

REGIONS_ENV = {"IDMINT_REGIONS": "2", "IDMINT_EIGHT_BYTE_GENERATORS": "4", "IDMINT_SNOWFLAKE_WORKERS": "4"}
SERVER_ENVS: dict[str, dict[str, str]] = {
    "embedded": {**REGIONS_ENV, "IDMINT_REGION": "0", "IDMINT_MAX_COUNT": "1000"},
    "region-1": {**REGIONS_ENV, "IDMINT_REGION": "1", "IDMINT_MAX_COUNT": "1000"},
    "overlapping": {"IDMINT_MAX_COUNT": "1000"},
}
# fmt: off
ERROR_TABLE = [
    # kind                    Python                       TypeScript                   Go
    ("validation",             "ValidationError",           "ValidationError",           "ValidationError"),
    ("unauthorized",           "UnauthorizedError",         "UnauthorizedError",         "UnauthorizedError"),
    ("forbidden",              "ForbiddenError",            "ForbiddenError",            "ForbiddenError"),
    ("unknown_scheme",         "UnknownSchemeError",        "UnknownSchemeError",        "UnknownSchemeError"),
    ("unknown_sequence",       "UnknownSequenceError",      "UnknownSequenceError",      "UnknownSequenceError"),
    ("request_rejected",       "RequestRejectedError",      "RequestRejectedError",      "RequestRejectedError"),
    ("no_replica_available",   "NoReplicaAvailableError",   "NoReplicaAvailableError",   "NoReplicaAvailableError"),
    ("fleet_overlap",          "FleetOverlapError",         "FleetOverlapError",         "FleetOverlapError"),
    ("sequence_stores_differ", "SequenceStoresDifferError", "SequenceStoresDifferError", "SequenceStoresDifferError"),
    ("unknown_public_id",      "UnknownPublicIdError",      "UnknownPublicIdError",      "UnknownPublicIDError"),
    ("client_closed",          "ClientClosedError",         "ClientClosedError",         "ErrClientClosed"),
]
# fmt: on
ERROR_CLASSES = {kind: dict(zip(("python", "typescript", "go"), names, strict=True)) for kind, *names in ERROR_TABLE}
"""Each error kind a case may expect, and the class each client raises for it (Go: the type errors.As matches,
or the sentinel errors.Is matches). A runner reports the class it caught; the case passes only with this one."""

NO_PUBLIC_KEYS = ("overlapping",)
"""Servers started without a public-ID key file."""

AFTER_GUARD_S = 1800.0
"""A guard against a ``--after`` file never written, not a time budget."""

ETCD_REPLICAS = ("etcd-a", "etcd-b")
ETCD_LEASE_TTL_S = "3"


def runner_commands() -> dict[str, list[str]]:
    """Each client's runner command (the TypeScript one needs ``npm run build``, the Go one ``go build``: done by
    :func:`prepare`)."""
    return {
        "python": [sys.executable, str(HERE / "runners" / "python_runner.py")],
        "typescript": ["node", str(REPO / "clients" / "typescript" / "build" / "conformance" / "runner.js")],
        "go": [str(Path(tempfile.gettempdir()) / f"idmint-conformance-go-{os.getuid()}")],
    }


def prepare(client: str, command: list[str]) -> None:
    """Build a client's runner when it needs building (TypeScript: tsc; Go: go build)."""
    if client == "typescript":
        subprocess.run(["npm", "run", "--silent", "build"], cwd=REPO / "clients" / "typescript", check=True)
    elif client == "go":
        subprocess.run(
            ["go", "build", "-o", command[0], "./cmd/idmint-conformance"], cwd=REPO / "clients" / "go", check=True
        )


# -- servers -------------------------------------------------------------------------------------------------


class Servers:
    """The idmint servers (and etcd) the cases use, started when first needed and stopped at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.running: dict[str, Server] = {}
        self.etcd: EtcdServer | None = None
        self.namespace = f"conformance-{secrets.token_hex(4)}/"
        self.patterns: dict[tuple[str, str], re.Pattern[str]] = {}
        self.canonical: dict[str, str] = {}
        self.public_keys = workdir / "public-keys.toml"
        self.public_keys.write_text(f'[[key]]\nid = 1\nsecret = "{secrets.token_hex(32)}"\n')
        self.starting = threading.Lock()
        """Held while servers are started or replaced (the clients' threads share them)."""

    def env(self, name: str) -> dict[str, str]:
        keys = {} if name in NO_PUBLIC_KEYS else {"IDMINT_PUBLIC_ID_KEYS_FILE": str(self.public_keys)}
        return {**self.base_env(name), **keys}

    def base_env(self, name: str) -> dict[str, str]:
        if name in SERVER_ENVS:
            return SERVER_ENVS[name]
        if self.etcd is None:
            self.etcd = EtcdServer(self.workdir / "etcd")
            self.etcd.start()
        return {
            "IDMINT_ETCD_ENDPOINTS": self.etcd.endpoint,
            "IDMINT_ETCD_NAMESPACE": self.namespace,
            "IDMINT_ETCD_LEASE_TTL": ETCD_LEASE_TTL_S,
            "IDMINT_ETCD_SAFETY_MARGIN": "1.0",
            "IDMINT_MAX_COUNT": "1000",
        }

    def ensure(self, names: list[str]) -> None:
        """Start every server of ``names`` that is not running (a killed one is replaced), then wait for all."""
        with self.starting:
            self._ensure(names)

    def _ensure(self, names: list[str]) -> None:
        started = []
        for name in names:
            server = self.running.get(name)
            if server is None or not server.running:
                if server is not None:
                    server.stop()
                self.running[name] = Server(self.workdir / name, self.env(name))
                started.append(self.running[name])
        for server in started:
            server.wait_ready()
        if not self.patterns and self.running:
            self._learn(next(iter(self.running.values())))

    def _learn(self, server: Server) -> None:
        for scheme in server.get_json("/v1/schemes")["schemes"]:
            self.canonical[scheme["name"]] = scheme["canonical_format"]
            for form, pattern in scheme["token_patterns"].items():
                self.patterns[(scheme["name"], form)] = re.compile(pattern)

    def url(self, name: str) -> str:
        return self.running[name].url

    def kill(self, name: str) -> None:
        self.running[name].kill()

    def stop(self) -> None:
        for server in self.running.values():
            server.stop()
        if self.etcd is not None:
            self.etcd.stop()


# -- runners -------------------------------------------------------------------------------------------------


class Runner:
    """One client's runner process; :meth:`ask` sends a command and returns its result."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.proc: subprocess.Popen[str] | None = None
        self.stderr = tempfile.TemporaryFile(mode="w+")

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            bufsize=1,
        )

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(RESULT_TIMEOUT_S)
        if not line or not line[0]:
            self.stop()
            self.stderr.seek(0)
            tail = self.stderr.read()[-2000:]
            raise CaseFailed(f"the runner gave no result for {command['op']} (stderr: {tail!r})")
        try:
            return dict(json.loads(line[0]))
        except ValueError as exc:
            raise CaseFailed(f"the runner printed a line that is not JSON: {line[0][:200]!r}") from exc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# -- cases ---------------------------------------------------------------------------------------------------


class CaseFailed(Exception):
    pass


@dataclass
class Case:
    name: str
    about: str
    servers: list[str]
    proxies: dict[str, dict[str, Any]]
    steps: list[dict[str, Any]]
    file: str


def load_cases(only: list[str] | None = None) -> list[Case]:
    cases = []
    for path in sorted(CASES_DIR.glob("*.json")):
        for raw in json.loads(path.read_text()):
            case = Case(
                raw["name"], raw["about"], raw.get("servers", []), raw.get("proxies", {}), raw["steps"], path.name
            )
            if only is None or case.name in only:
                cases.append(case)
    names = [c.name for c in cases]
    repeated = {n for n in names if names.count(n) > 1}
    if repeated:
        raise SystemExit(f"case names must be unique: {sorted(repeated)}")
    kinds = {s["expect"]["error"] for c in cases for s in c.steps if "error" in s.get("expect", {})}
    if kinds - ERROR_CLASSES.keys():
        raise SystemExit(f"error kinds without classes in ERROR_CLASSES: {sorted(kinds - ERROR_CLASSES.keys())}")
    return cases


@dataclass
class Run:
    """One case run against one client: the proxies, the names replicas resolve to, what was handed out."""

    case: Case
    client: str
    servers: Servers
    token: str
    proxies: dict[str, FaultProxy] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    handed_out: dict[str, str] = field(default_factory=dict)
    """ID (or ``sequence:<name>:<integer>``) -> the step that handed it out."""
    kept: dict[str, list[str]] = field(default_factory=dict)
    """What steps with ``keep`` handed out (their ``ids`` or ``values``), by the name they kept it under."""

    def setup(self) -> None:
        self.servers.ensure(self.case.servers)
        for name in self.case.servers:
            self.urls["@" + name] = self.servers.url(name)
        for name, spec in self.case.proxies.items():
            upstreams = spec["to"] if isinstance(spec["to"], list) else [spec["to"]]
            first = upstreams[0]
            proxy = FaultProxy([self.servers.url(u) for u in upstreams], on_kill=lambda s=first: self.servers.kill(s))
            params = {k: self.text(v) for k, v in spec.items() if k not in ("to", "mode")}
            proxy.set(spec.get("mode", "pass"), **params)
            self.proxies[name] = proxy
            self.urls[name] = proxy.url
        self.urls["dead"] = f"http://127.0.0.1:{free_port()}"

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()

    def text(self, value: Any) -> Any:
        """``value`` with ``$run`` replaced by this run's token and ``@server`` / proxy names by their URLs; a string
        ``$kept:NAME`` is the list a step kept as NAME, ``$kept:NAME:K`` its item K."""
        if isinstance(value, str) and value.startswith("$kept:"):
            name, _, index = value[len("$kept:") :].partition(":")
            if name not in self.kept:
                raise CaseFailed(f"{value}: no step kept {name!r}")
            return list(self.kept[name]) if not index else self.kept[name][int(index)]
        if isinstance(value, str):
            value = value.replace("$run", self.token)
            return self.urls.get(value, value)
        if isinstance(value, list):
            return [self.text(v) for v in value]
        if isinstance(value, dict):
            return {k: self.text(v) for k, v in value.items()}
        return value


def run_case(case: Case, client: str, runner: Runner, servers: Servers, token: str) -> None:
    run = Run(case, client, servers, token)
    try:
        run.setup()
        for number, step in enumerate(case.steps, 1):
            where = f"step {number} ({step.get('op') or step.get('do') or step.get('check')})"
            try:
                if "op" in step:
                    command_step(run, runner, step, where)
                elif "do" in step:
                    action(run, step)
                else:
                    driver_check(run, step)
            except CaseFailed as exc:
                raise CaseFailed(f"{where}: {exc}") from None
    finally:
        run.close()


def command_step(run: Run, runner: Runner, step: dict[str, Any], where: str) -> None:
    command = {k: run.text(v) for k, v in step.items() if k not in ("expect", "keep")}
    started = time.monotonic()
    result = runner.ask(command)
    elapsed = time.monotonic() - started
    check_handed_out(run, command, result, where)
    check_revealed(run, result)
    expect = step.get("expect", {"ok": True})
    compare(run, expect, result, elapsed)
    if "keep" in step:
        run.kept[step["keep"]] = [str(v) for v in result.get("ids") or result.get("values") or []]


def check_handed_out(run: Run, command: dict[str, Any], result: dict[str, Any], where: str) -> None:
    """The invariants of every case: IDs of their scheme's pattern, nothing handed out twice."""
    ids = result.get("ids") or []
    if ids:
        scheme = command["scheme"]
        form = command.get("format") or run.servers.canonical.get(scheme, "")
        pattern = run.servers.patterns.get((scheme, form))
        for one in ids:
            if not isinstance(one, str) or (pattern is not None and not pattern.fullmatch(one)):
                raise CaseFailed(f"handed out {one!r}, which is not a {scheme} ID ({form})")
    if command["op"] == "next" and command.get("format") == "public":  # a sequence integer's public text
        pattern = run.servers.patterns.get(("snowflake", "public"))  # the 64-bit form's
        for one in result.get("values") or []:
            if not isinstance(one, str) or (pattern is not None and not pattern.fullmatch(one)):
                raise CaseFailed(f"handed out {one!r}, which is not a sequence integer's public text")
    values = [f"sequence:{command.get('name')}:{v}" for v in result.get("values") or []]
    if result.get("ok") and command["op"] == "range":
        first, last = int(result["first"]), int(result["last"])
        values += [f"sequence:{command['name']}:{v}" for v in (first, last)]
    for one in [*ids, *values]:
        if one in run.handed_out:
            raise CaseFailed(f"handed out {one!r} twice (first by {run.handed_out[one]})")
        run.handed_out[one] = where


def revealed_items(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The revealed items of a ``reveal`` (one) or ``reveal_many`` result."""
    if isinstance(result.get("revealed"), dict):
        return [result["revealed"]]
    return [i for i in result.get("items") or [] if isinstance(i, dict)]


def check_revealed(run: Run, result: dict[str, Any]) -> None:
    """An invariant of every case: a revealed ID is of its scheme's canonical form (a sequence's: decimal digits),
    and its decode reading, when there is one, reads that ID."""
    for item in revealed_items(result):
        if "error" in item:
            continue
        scheme, ident = item.get("scheme"), item.get("id")
        if scheme == "sequence":
            if not isinstance(ident, str) or not re.fullmatch(r"0|[1-9][0-9]{0,18}", ident):
                raise CaseFailed(f"revealed {ident!r}, which is not a sequence integer")
            continue
        pattern = run.servers.patterns.get((str(scheme), run.servers.canonical.get(str(scheme), "")))
        if not isinstance(ident, str) or pattern is None or not pattern.fullmatch(ident):
            raise CaseFailed(f"revealed {ident!r}, which is not a {scheme} ID in its canonical form")
        decoded = item.get("decoded") or {}
        if decoded.get("id") != ident or decoded.get("scheme") != scheme:
            raise CaseFailed(f"revealed {ident!r} with a decode reading of {decoded.get('id')!r}")


def compare(run: Run, expect: dict[str, Any], result: dict[str, Any], elapsed: float) -> None:
    def fail(what: str) -> None:
        shown = json.dumps(result)
        raise CaseFailed(f"{what}; result: {shown[:1500]}")

    if "ok" in expect and result.get("ok") is not expect["ok"]:
        fail(f"expected ok={expect['ok']}")
    if "error" in expect:
        wanted = ERROR_CLASSES[expect["error"]][run.client]
        if result.get("class") != wanted:
            fail(f"expected error {expect['error']!r}: class {wanted}")
    if "error" not in expect and expect.get("ok", True) and not result.get("ok"):
        fail("expected success")
    if "count" in expect:
        got = result.get("ids") if "ids" in result else result.get("values")
        if got is None or len(got) != expect["count"]:
            fail(f"expected {expect['count']} IDs")
    for key in ("values", "first", "last", "status", "delivered"):
        if key in expect and result.get(key) != run.text(expect[key]):
            fail(f"expected {key} {expect[key]!r}")
    if "delivered_at_least" in expect and int(result.get("delivered", -1)) < expect["delivered_at_least"]:
        fail(f"expected at least {expect['delivered_at_least']} delivered")
    if "message" in expect and expect["message"].lower() not in result.get("message", "").lower():
        fail(f"expected a message holding {expect['message']!r}")
    reasons = result.get("reasons") or {}
    for name, words in expect.get("reasons", {}).items():
        url = run.urls[name]
        reason = reasons.get(url)
        if reason is None:
            fail(f"expected a reason for {name} ({url})")
        for word in [words] if isinstance(words, str) else words:
            if word.lower() not in reason.lower():
                fail(f"expected {name}'s reason to hold {word!r}")
    if "within_s" in expect and elapsed > expect["within_s"]:
        fail(f"took {elapsed:.1f} s, more than {expect['within_s']} s")
    if "decoded" in expect:
        decoded = result.get("decoded") or {}
        for key, value in expect["decoded"].items():
            if key == "fields":
                if any(decoded.get("fields", {}).get(k) != v for k, v in value.items()):
                    fail(f"expected decoded fields {value}")
            elif decoded.get(key) != run.text(value):
                fail(f"expected decoded {key} {value!r}")
    if "candidates_include" in expect:
        schemes = [c.get("scheme") for c in result.get("candidates") or []]
        if expect["candidates_include"] not in schemes:
            fail(f"expected a candidate reading as {expect['candidates_include']}")
    if "schemes_include" in expect:
        names = {s.get("name") for s in result.get("schemes") or []}
        missing = set(expect["schemes_include"]) - names
        if missing:
            fail(f"expected schemes {sorted(missing)}")
    if expect.get("rising"):
        values = [int(v) for v in result.get("values") or []]
        if values != sorted(values):
            fail("expected rising integers")
    if "revealed" in expect:
        unopened = set(expect.get("unopened", []))
        items = revealed_items(result)
        if not items:
            fail("expected revealed IDs")
        for number, item in enumerate(items):
            if (number in unopened) != ("error" in item):
                fail(f"expected item {number} {'not ' if number not in unopened else ''}to be refused")
            if "error" not in item and any(item.get(k) != v for k, v in expect["revealed"].items()):
                fail(f"expected item {number} to reveal as {expect['revealed']}")
    if expect.get("revealed_rising"):
        opened = [i for i in revealed_items(result) if "error" not in i]
        keys = [int(i["id"]) if i.get("scheme") == "sequence" else str(i["id"]) for i in opened]
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            fail("expected the revealed IDs to rise in the order their public texts were handed out")
    if "above" in expect:
        values = [int(v) for v in result.get("values") or []] or [int(result.get("first", 0))]
        if min(values) <= int(expect["above"]):
            fail(f"expected integers above {expect['above']}")


def action(run: Run, step: dict[str, Any]) -> None:
    what = step["do"]
    if what == "mode":
        params = {k: run.text(v) for k, v in step.items() if k not in ("do", "proxy", "mode")}
        run.proxies[step["proxy"]].set(step["mode"], **params)
    elif what == "reset":
        run.proxies[step["proxy"]].reset()
    elif what == "sleep":
        time.sleep(float(step["seconds"]))
    elif what == "kill":
        run.servers.kill(step["server"])
    elif what == "create_sequence":
        body = {"name": run.text(step["name"]), "start": int(step.get("start", 1)), "cache": step.get("cache", 100)}
        response = httpx.post(f"{run.servers.url(step['server'])}/v1/sequences", json=body, timeout=30)
        if response.status_code not in (200, 201):
            raise CaseFailed(f"creating sequence {body['name']} failed: {response.status_code} {response.text}")
    else:
        raise CaseFailed(f"unknown action {what!r}")


def driver_check(run: Run, step: dict[str, Any]) -> None:
    names = step["proxy"] if isinstance(step["proxy"], list) else [step["proxy"]]
    if len(names) > 1:  # the requests of several proxies, added up
        prefix = step.get("path", "/v1/ids/")
        count = sum(1 for n in names for s in run.proxies[n].seen if s.path.startswith(prefix))
        if count != step["count"]:
            raise CaseFailed(f"{names} saw {count} requests of {prefix}, expected {step['count']}")
        return
    proxy = run.proxies[names[0]]
    what = step["check"]
    if what == "passed":
        if "ids" in step and proxy.ids_passed != step["ids"]:
            raise CaseFailed(f"{step['proxy']} passed {proxy.ids_passed} IDs, expected {step['ids']}")
        if "min" in step and proxy.ids_passed < step["min"]:
            raise CaseFailed(f"{step['proxy']} passed {proxy.ids_passed} IDs, expected at least {step['min']}")
    elif what == "requests":
        prefix = step.get("path", "/v1/ids/")
        count = sum(1 for s in proxy.seen if s.path.startswith(prefix))
        if "count" in step and count != step["count"]:
            raise CaseFailed(f"{step['proxy']} saw {count} requests of {prefix}, expected {step['count']}")
        if "max" in step and count > step["max"]:
            raise CaseFailed(f"{step['proxy']} saw {count} requests of {prefix}, expected at most {step['max']}")
        if "min" in step and count < step["min"]:
            raise CaseFailed(f"{step['proxy']} saw {count} requests of {prefix}, expected at least {step['min']}")
    elif what == "authorization":
        sent, wanted = {s.authorization for s in proxy.seen}, run.text(step["value"])
        if sent != {wanted}:
            raise CaseFailed(f"{step['proxy']} saw authorization {sorted(map(str, sent))}, expected {wanted!r}")
    else:
        raise CaseFailed(f"unknown check {what!r}")


class CaseGate:
    """Lets the cases of several clients run together, except a case that kills a server (:func:`kills`): that one
    runs alone, once the cases running have ended (and no new one starts while it waits)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._alone = False
        self._waiting_alone = 0

    @contextlib.contextmanager
    def enter(self, alone: bool) -> Iterator[None]:
        with self._changed:
            if alone:
                self._waiting_alone += 1
                self._changed.wait_for(lambda: not self._alone and self._running == 0)
                self._waiting_alone -= 1
                self._alone = True
            else:
                self._changed.wait_for(lambda: not self._alone and self._waiting_alone == 0)
                self._running += 1
        try:
            yield
        finally:
            with self._changed:
                if alone:
                    self._alone = False
                else:
                    self._running -= 1
                self._changed.notify_all()


def kills(case: Case) -> bool:
    """Whether ``case`` kills a server (a ``kill`` action, or a proxy in mode ``kill``): other cases on that server
    would see it go."""
    modes = [spec.get("mode") for spec in case.proxies.values()]
    modes += [step.get("mode") for step in case.steps if step.get("do") == "mode"]
    return "kill" in modes or any(step.get("do") == "kill" for step in case.steps)


# -- main ----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", action="append", choices=sorted(runner_commands()), help="default: all three")
    parser.add_argument("--case", action="append", help="run only these cases (by name)")
    parser.add_argument("--json", type=Path, help="write the results here (per client: passed, failed, failures)")
    parser.add_argument("--no-build", action="store_true", help="the runners are built already")
    parser.add_argument(
        "--built", action="append", default=[], help="this client's runner is built already (repeatable)"
    )
    parser.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="CLIENT=FILE",
        help="start this client's cases once FILE holds `ok` (its own checks passed, run beside the other clients' "
        "cases); anything else there leaves the client out (repeatable)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case as it passes")
    args = parser.parse_args(argv)
    clients = args.client or ["python", "typescript", "go"]
    cases = load_cases(args.case)
    commands = runner_commands()
    after = dict(spec.split("=", 1) for spec in args.after)
    built = set(clients) if args.no_build else set(args.built)

    def run(client: str) -> dict[str, Any] | None:
        if client in after and not checks_passed(Path(after[client])):
            return None
        if client not in built:
            prepare(client, commands[client])
        return run_client(client, commands[client], cases, servers, gate, args.verbose)

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="idmint-conformance-") as workdir:
        servers = Servers(Path(workdir))
        gate = CaseGate()
        try:
            with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
                runs = {client: pool.submit(run, client) for client in clients}
                results = {client: result for client, done in runs.items() if (result := done.result()) is not None}
        finally:
            servers.stop()
    for client, outcome in results.items():
        print(f"{client}: {outcome['passed']} passed, {outcome['failed']} failed", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if all(r["failed"] == 0 for r in results.values()) else 1


def checks_passed(path: Path) -> bool:
    """Wait for ``path`` to hold a line (its client's own checks ended: ``--after``); whether that line is ``ok``."""
    deadline = time.monotonic() + AFTER_GUARD_S
    while not (text := path.read_text() if path.exists() else "").endswith("\n"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} was not written in {AFTER_GUARD_S:g} s")
        time.sleep(0.2)
    return text.strip() == "ok"


def run_client(
    client: str, command: list[str], cases: list[Case], servers: Servers, gate: CaseGate, verbose: bool
) -> dict[str, Any]:
    runner = Runner(command)
    passed, failures = 0, {}
    try:
        for index, case in enumerate(cases):
            token = f"{client[:2]}{index}-{secrets.token_hex(2)}"
            started = time.monotonic()
            try:
                with gate.enter(alone=kills(case)):
                    run_case(case, client, runner, servers, token)
            except CaseFailed as exc:
                failures[case.name] = str(exc)
                print(f"{client}: FAILED {case.name} ({case.file}): {exc}", flush=True)
                runner.stop()  # a fresh runner for the next case
                continue
            passed += 1
            if verbose:
                print(f"{client}: passed {case.name} ({time.monotonic() - started:.1f} s)", flush=True)
    finally:
        runner.stop()
    return {"passed": passed, "failed": len(failures), "failures": failures, "cases": len(cases)}


if __name__ == "__main__":
    sys.exit(main())
