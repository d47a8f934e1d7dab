"""app/metrics/: the metric set, exact counts through the ASGI app, and multiprocess mode as the
prometheus-client docs set it up (in subprocesses, since the mode is chosen when prometheus_client is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import __version__
from app.issuing.issuer import no_charge
from app.main import create_app
from app.metrics import (
    LEASE_RENEWAL_OUTCOMES,
    MULTIPROC_ENV,
    REQUEST_DURATION_BUCKETS_SECONDS,
    Metrics,
)
from app.schemes import schemes
from app.schemes.base import GeneratorStats
from app.settings import Settings
from tests.helpers import lifespan, new_node, started

SCHEMES = list(schemes())
REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.anyio


# -- the facade on its own -----------------------------------------------------------------------------------


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_known_label_values_are_initialised_up_front() -> None:
    m = Metrics(SCHEMES, "1.2.3")
    for scheme in SCHEMES:
        assert sample(m, "idmint_ids_issued_total", scheme=scheme) == 0
        assert sample(m, "idmint_clock_rollback_total", scheme=scheme) == 0
        assert sample(m, "idmint_sequence_exhausted_total", scheme=scheme) == 0
        assert sample(m, "idmint_identity_refused_total", scheme=scheme) == 0
        assert sample(m, "idmint_issue_wait_seconds_count", scheme=scheme) == 0
        assert sample(m, "idmint_lease_held", scheme=scheme) == 0
        assert sample(m, "idmint_high_water_mark_timestamp_seconds", scheme=scheme) == 0
    for outcome in LEASE_RENEWAL_OUTCOMES:
        assert sample(m, "idmint_lease_renewals_total", outcome=outcome) == 0
    assert sample(m, "idmint_build_info", version="1.2.3") == 1
    assert sample(m, "idmint_lease_deadline_seconds") == 0
    assert sample(m, "idmint_clock_rollback_seconds") == 0
    # default process, platform and GC metrics on the instance's own registry
    assert sample(m, "process_cpu_seconds_total") is not None
    names = {family.name for family in m.registry.collect()}
    assert {"process_resident_memory_bytes", "python_info", "python_gc_collections"} <= names


def test_each_instance_has_its_own_registry() -> None:
    a, b = Metrics(SCHEMES, __version__), Metrics(SCHEMES, __version__)
    a.scheme("wiji").ids_issued(10)
    assert sample(a, "idmint_ids_issued_total", scheme="wiji") == 10
    assert sample(b, "idmint_ids_issued_total", scheme="wiji") == 0
    assert a.registry is not b.registry
    assert a.extra_state() == {"metrics_mode": "single-process", "multiprocess_dir": None}


def test_generator_stats_add_deltas_and_keep_the_largest_rollback() -> None:
    m = Metrics(SCHEMES, __version__)
    m.scheme("muid").generator_stats(rollbacks=2, max_rollback_ns=1_500_000, exhausted=3)
    m.scheme("muid").generator_stats(rollbacks=1, max_rollback_ns=500_000, exhausted=0)
    m.scheme("siq").generator_stats(rollbacks=0, max_rollback_ns=0, exhausted=5)
    assert sample(m, "idmint_clock_rollback_total", scheme="muid") == 3
    assert sample(m, "idmint_sequence_exhausted_total", scheme="muid") == 3
    assert sample(m, "idmint_sequence_exhausted_total", scheme="siq") == 5
    assert sample(m, "idmint_clock_rollback_seconds") == 0.0015


def test_issue_wait_and_high_water_mark() -> None:
    m = Metrics(SCHEMES, __version__)
    m.scheme("eight-byte").issue_wait(0.0008)
    m.scheme("eight-byte").issue_wait(0.003)
    assert sample(m, "idmint_issue_wait_seconds_count", scheme="eight-byte") == 2
    assert sample(m, "idmint_issue_wait_seconds_bucket", scheme="eight-byte", le="0.001") == 1
    assert sample(m, "idmint_issue_wait_seconds_sum", scheme="eight-byte") == pytest.approx(0.0038)
    m.scheme("hlc-ulid").high_water_mark(1_795_000_000.25)
    assert sample(m, "idmint_high_water_mark_timestamp_seconds", scheme="hlc-ulid") == 1_795_000_000.25


def test_lease_held_tracks_identities_per_claim() -> None:
    m = Metrics(SCHEMES, __version__)
    m.scheme("eight-byte").lease_held(True, 7)
    m.scheme("eight-byte").lease_held(True, 8)  # a node holding two generator IDs
    assert sample(m, "idmint_lease_held", scheme="eight-byte") == 1
    assert sample(m, "idmint_node_identity_info", scheme="eight-byte", identity="7") == 1
    assert sample(m, "idmint_node_identity_info", scheme="eight-byte", identity="8") == 1
    m.scheme("eight-byte").lease_held(False, 7)
    assert sample(m, "idmint_lease_held", scheme="eight-byte") == 1
    assert sample(m, "idmint_node_identity_info", scheme="eight-byte", identity="7") is None
    m.scheme("eight-byte").lease_held(False, None)
    assert sample(m, "idmint_lease_held", scheme="eight-byte") == 0
    assert sample(m, "idmint_node_identity_info", scheme="eight-byte", identity="8") is None
    m.scheme("wiji").lease_held(True, None)  # no identity to claim, but ready to issue
    assert sample(m, "idmint_lease_held", scheme="wiji") == 1


def test_lease_renewals_deadline_and_refusals() -> None:
    m = Metrics(SCHEMES, __version__)
    for outcome in ("ok", "ok", "late", "lost"):
        m.lease_renewal(outcome)
    assert sample(m, "idmint_lease_renewals_total", outcome="ok") == 2
    assert sample(m, "idmint_lease_renewals_total", outcome="late") == 1
    assert sample(m, "idmint_lease_renewals_total", outcome="lost") == 1
    with pytest.raises(ValueError, match="outcome must be one of ok, late, failed, lost, got 'maybe'"):
        m.lease_renewal("maybe")
    m.lease_deadline(6.5)
    assert sample(m, "idmint_lease_deadline_seconds") == 6.5
    m.lease_deadline(-1.0)
    assert sample(m, "idmint_lease_deadline_seconds") == 0
    m.lease_deadline(float("inf"))
    assert sample(m, "idmint_lease_deadline_seconds") == float("inf")
    m.scheme("siq").identity_refused("high_water_mark_ahead: 12.5 s")  # free text: not a label
    assert sample(m, "idmint_identity_refused_total", scheme="siq") == 1


def test_request_histogram_resolves_sub_millisecond_latency() -> None:
    assert sum(1 for b in REQUEST_DURATION_BUCKETS_SECONDS if b < 0.001) >= 3
    m = Metrics(SCHEMES, __version__)
    m.request("/v1/ids/{scheme}", "GET", 200, 0.00012)
    m.request("/v1/ids/{scheme}", "GET", 200, 0.0004)
    m.request("/v1/ids/{scheme}", "GET", 503, 0.02)
    labels = {"route": "/v1/ids/{scheme}", "method": "GET"}
    assert sample(m, "idmint_requests_total", status="200", **labels) == 2
    assert sample(m, "idmint_requests_total", status="503", **labels) == 1
    assert sample(m, "idmint_request_duration_seconds_bucket", le="0.0001", **labels) == 0
    assert sample(m, "idmint_request_duration_seconds_bucket", le="0.00025", **labels) == 1
    assert sample(m, "idmint_request_duration_seconds_bucket", le="0.0005", **labels) == 2
    assert sample(m, "idmint_request_duration_seconds_count", **labels) == 3


def test_render_is_prometheus_text() -> None:
    m = Metrics(SCHEMES, __version__)
    m.scheme("muid").ids_issued(3)
    body, content_type = m.render()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert b'idmint_ids_issued_total{scheme="muid"} 3.0' in body
    assert b"# TYPE idmint_request_duration_seconds histogram" in body


# -- through the ASGI app (httpx.ASGITransport) ---------------------------------------------------------------


def app_metrics(app: Any) -> Metrics:
    metrics = app.app.state.node.metrics
    assert isinstance(metrics, Metrics)
    return metrics


async def test_counts_move_by_exactly_the_ids_issued(tmp_path: Path) -> None:
    app = create_app(Settings(state_dir=tmp_path))
    async with lifespan(app):
        m = app_metrics(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://idmint") as client:
            before = {s: sample(m, "idmint_ids_issued_total", scheme=s) for s in SCHEMES}
            assert before == dict.fromkeys(SCHEMES, 0.0)
            expected = dict.fromkeys(SCHEMES, 0)
            for scheme, method, count in [
                ("eight-byte", "GET", 7),
                ("eight-byte", "POST", 130),
                ("muid", "GET", 1),
                ("muid", "POST", 999),
                ("wiji", "GET", 42),
                ("siq", "POST", 5),
                ("hlc-ulid", "GET", 64),
            ]:
                r = await client.request(method, f"/v1/ids/{scheme}", params={"count": count})
                assert r.status_code == 200, r.text
                assert len(r.json()["ids"]) == count
                expected[scheme] += count
                after = {s: sample(m, "idmint_ids_issued_total", scheme=s) for s in SCHEMES}
                assert after == {s: float(n) for s, n in expected.items()}

            # Rejected requests issue nothing but are counted as requests, by status.
            assert (await client.get("/v1/ids/muid", params={"count": 0})).status_code == 422
            assert (await client.post("/v1/ids/muid", params={"count": "x"})).status_code == 422
            assert (await client.get("/v1/ids/nope")).status_code == 404
            after = {s: sample(m, "idmint_ids_issued_total", scheme=s) for s in SCHEMES}
            assert after == {s: float(n) for s, n in expected.items()}

            body = (await client.get("/metrics")).text
            assert f'idmint_ids_issued_total{{scheme="muid"}} {float(expected["muid"])}' in body


async def test_requests_are_counted_by_route_template(tmp_path: Path) -> None:
    app = create_app(Settings(state_dir=tmp_path))
    async with lifespan(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://idmint") as client:
            for _ in range(3):
                assert (await client.get("/v1/ids/wiji", params={"count": 2})).status_code == 200
            assert (await client.post("/v1/ids/wiji", params={"count": 2})).status_code == 200
            assert (await client.get("/v1/ids/wiji", params={"count": 0})).status_code == 422
            assert (await client.get("/healthz")).status_code == 200
            for n in range(3):
                assert (await client.get(f"/no/such/{n}")).status_code == 404
        m = app_metrics(app)
        counts: dict[tuple[str, str, str], float] = {}
        for family in m.registry.collect():
            if family.name == "idmint_requests":
                for s in family.samples:
                    if s.name == "idmint_requests_total":
                        counts[(s.labels["route"], s.labels["method"], s.labels["status"])] = s.value

    route = "/v1/ids/{scheme}"
    assert counts[(route, "GET", "200")] == 3
    assert counts[(route, "POST", "200")] == 1
    assert counts[(route, "GET", "422")] == 1
    assert counts[("/healthz", "GET", "200")] == 1
    # The label stays bounded: raw paths never become label values.
    assert not [key for key in counts if "wiji" in key[0] or "/no/such" in key[0]], counts
    unmatched = [(k, v) for k, v in counts.items() if k[2] == "404"]
    assert len(unmatched) == 1 and unmatched[0][1] == 3, unmatched


async def test_lease_state_and_identities_after_startup(tmp_path: Path) -> None:
    app = create_app(Settings(state_dir=tmp_path))
    async with lifespan(app):
        m = app_metrics(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://idmint") as client:
            assert (await client.get("/readyz")).status_code == 200
            catalogue = (await client.get("/v1/schemes")).json()["schemes"]
        for scheme in SCHEMES:  # typeid too: its gauge follows uuidv7's, whose generator it issues from
            assert sample(m, "idmint_lease_held", scheme=scheme) == 1, scheme
        identities: dict[str, list[tuple[str, float]]] = {}
        for family in m.registry.collect():
            if family.name == "idmint_node_identity_info":
                for s in family.samples:
                    identities.setdefault(s.labels["scheme"], []).append((s.labels["identity"], s.value))
        with_identity = {entry["name"] for entry in catalogue if "identity" in entry}
        assert set(identities) == with_identity
        for found in identities.values():
            assert found and all(value == 1 and identity.isdigit() for identity, value in found), found
        assert sample(m, "idmint_build_info", version=__version__) == 1
    # clean shutdown gives the identities back
    for scheme in SCHEMES:
        assert sample(m, "idmint_lease_held", scheme=scheme) == 0, scheme


async def test_several_apps_in_one_process_keep_separate_counts(tmp_path: Path) -> None:
    a = create_app(Settings(state_dir=tmp_path / "a"))
    b = create_app(Settings(state_dir=tmp_path / "b"))
    async with lifespan(a), lifespan(b):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://a") as client:
            assert (await client.get("/v1/ids/siq", params={"count": 9})).status_code == 200
        assert sample(app_metrics(a), "idmint_ids_issued_total", scheme="siq") == 9
        assert sample(app_metrics(b), "idmint_ids_issued_total", scheme="siq") == 0


# -- multiprocess mode (each case in fresh interpreters) -------------------------------------------------------


def python(code: str, env: dict[str, str]) -> str:
    full_env = {k: v for k, v in os.environ.items() if k != MULTIPROC_ENV}
    full_env.update(env)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


WORKER = """
    import os
    from app.metrics import Metrics
    m = Metrics(["muid", "siq"], "9.9.9")
    m.scheme("muid").ids_issued({count})
    m.scheme("muid").lease_held(True, {identity})
    m.scheme("siq").lease_held({siq_held}, None)
    m.lease_deadline({deadline})
    m.scheme("muid").generator_stats(1, {rollback_ns}, 0)
    m.request("/v1/ids/{{scheme}}", "GET", 200, 0.0003)
    print(os.getpid())
"""


def test_multiprocess_workers_aggregate_as_the_docs_say(tmp_path: Path) -> None:
    env = {MULTIPROC_ENV: str(tmp_path)}
    pid_a = int(python(WORKER.format(count=100, identity=5, siq_held=True, deadline=7.5, rollback_ns=2_000_000), env))
    pid_b = int(python(WORKER.format(count=23, identity=6, siq_held=False, deadline=3.0, rollback_ns=9_000_000), env))
    reader = """
        import json, os
        from app.metrics import Metrics
        m = Metrics(["muid", "siq"], "9.9.9")
        r = m.registry
        g = r.get_sample_value
        print(json.dumps({
            "issued": g("idmint_ids_issued_total", {"scheme": "muid"}),
            "requests": g("idmint_requests_total", {"route": "/v1/ids/{scheme}", "method": "GET", "status": "200"}),
            "held_muid": g("idmint_lease_held", {"scheme": "muid"}),
            "held_siq": g("idmint_lease_held", {"scheme": "siq"}),
            "deadline": g("idmint_lease_deadline_seconds", {}),
            "rollback": g("idmint_clock_rollback_seconds", {}),
            "rollbacks": g("idmint_clock_rollback_total", {"scheme": "muid"}),
            "id5": g("idmint_node_identity_info", {"scheme": "muid", "identity": "5"}),
            "id6": g("idmint_node_identity_info", {"scheme": "muid", "identity": "6"}),
            "build": g("idmint_build_info", {"version": "9.9.9"}),
            "process": g("process_cpu_seconds_total", {}),
            "mode": m.extra_state()["metrics_mode"],
            "body_has_pid": b"pid=" in m.render()[0],
        }))
    """
    # Both worker processes have exited: their live gauges (identities 5 and 6) are swept at scrape time (uvicorn
    # has no child_exit hook), while counters, histograms and the "max" gauge keep their values. The live gauges
    # left are the reader's own, initialised at 0. Custom collectors (process metrics) do not work in this mode.
    out = json.loads(python(reader, env))
    assert out == {
        "issued": 123.0,
        "requests": 2.0,
        "held_muid": 0.0,
        "held_siq": 0.0,
        "deadline": 0.0,
        "rollback": 0.009,
        "rollbacks": 2.0,
        "id5": None,
        "id6": None,
        "build": 1.0,
        "process": None,
        "mode": "multiprocess",
        "body_has_pid": False,
    }
    assert pid_a != pid_b


@pytest.mark.integration
def test_multiprocess_live_gauges_combine_across_live_workers(tmp_path: Path) -> None:
    """Two live workers (the reader process is one of them): livemin / livemax as documented."""
    env = {MULTIPROC_ENV: str(tmp_path)}
    code = """
        import json, os, subprocess, sys, textwrap
        from app.metrics import Metrics, worker_exit
        me = Metrics(["muid", "siq"], "9.9.9")
        me.scheme("muid").lease_held(True, 5)
        me.scheme("siq").lease_held(True, None)
        me.lease_deadline(7.5)
        # a second live worker
        child = subprocess.Popen([sys.executable, "-c", textwrap.dedent('''
            import sys
            from app.metrics import Metrics
            m = Metrics(["muid", "siq"], "9.9.9")
            m.scheme("muid").lease_held(True, 6)
            m.scheme("siq").lease_held(False, None)
            m.lease_deadline(3.0)
            print("ready", flush=True)
            sys.stdin.read()
        ''')], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        g = lambda name, **labels: me.registry.get_sample_value(name, labels)
        live = {"held_muid": g("idmint_lease_held", scheme="muid"), "held_siq": g("idmint_lease_held", scheme="siq"),
                "deadline": g("idmint_lease_deadline_seconds"),
                "id5": g("idmint_node_identity_info", scheme="muid", identity="5"),
                "id6": g("idmint_node_identity_info", scheme="muid", identity="6")}
        child.stdin.close(); child.wait()
        worker_exit(child.pid)  # what the supervisor calls after reaping a worker
        after = {"held_siq": g("idmint_lease_held", scheme="siq"), "deadline": g("idmint_lease_deadline_seconds"),
                 "id6": g("idmint_node_identity_info", scheme="muid", identity="6")}
        me.scheme("muid").lease_held(False, 5)  # remove() is unsupported in multiprocess mode: the series drops to 0
        dropped = g("idmint_node_identity_info", scheme="muid", identity="5")
        print(json.dumps({"live": live, "after": after, "dropped": dropped}))
    """
    out = json.loads(python(code, env))
    assert out["live"] == {"held_muid": 1.0, "held_siq": 0.0, "deadline": 3.0, "id5": 1.0, "id6": 1.0}
    assert out["after"] == {"held_siq": 1.0, "deadline": 7.5, "id6": None}
    assert out["dropped"] == 0.0


def test_prepare_process_environment_creates_and_wipes_the_directory(tmp_path: Path) -> None:
    code = """
        import json, os
        from app.metrics import prepare_process_environment
        prepare_process_environment(1)
        single = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        prepare_process_environment(2)
        made = os.environ["PROMETHEUS_MULTIPROC_DIR"]
        from prometheus_client import values
        print(json.dumps({"single": single, "made": made, "exists": os.path.isdir(made),
                          "multiprocess": values.ValueClass._multiprocess}))
    """
    out = json.loads(python(code, {}))
    assert out["single"] is None and out["exists"] and out["multiprocess"] is True
    assert Path(out["made"]).name.startswith("idmint-metrics-")
    assert not Path(out["made"]).exists(), "the directory it created is removed at exit"

    preset = tmp_path / "preset"
    preset.mkdir()
    for stale in ("counter_123.db", "gauge_livemin_123.db", "histogram_9.db"):
        (preset / stale).write_bytes(b"stale")
    (preset / "keep.txt").write_text("not ours")
    python(
        "from app.metrics import prepare_process_environment; prepare_process_environment(1)",
        {MULTIPROC_ENV: str(preset)},
    )
    assert sorted(p.name for p in preset.iterdir()) == ["keep.txt"]


def test_prepare_process_environment_refuses_after_prometheus_client_import() -> None:
    code = """
        import prometheus_client
        from app.errors import ConfigError
        from app.metrics import prepare_process_environment
        try:
            prepare_process_environment(2)
        except ConfigError as exc:
            print(exc)
    """
    out = python(code, {})
    assert "PROMETHEUS_MULTIPROC_DIR must be set before prometheus_client is imported" in out


async def test_generator_stats_count_once_per_generator_and_from_zero_for_a_new_one(tmp_path: Path) -> None:
    """A new generator (fresh claim, or a scheme without claims starting over) counts from zero: its first events
    are metered, never a negative step (which prometheus refuses, failing the request). Events of a generator that
    two schemes issue from (uuidv7 and typeid) are counted once, under the scheme that owns it."""
    async with started(new_node(tmp_path)) as node:
        m = node.metrics
        meter = node.issuers["wiji"].stats
        meter.account(GeneratorStats(clock_rollbacks=3, max_rollback_ns=2_000_000, sequence_exhausted=2))
        meter.account(GeneratorStats(clock_rollbacks=1, max_rollback_ns=1_000))  # a fresh generator
        assert sample(m, "idmint_clock_rollback_total", scheme="wiji") == 4
        assert sample(m, "idmint_sequence_exhausted_total", scheme="wiji") == 2

        uuids = node.issuers["uuidv7"].generator
        assert uuids is not None
        uuids.stats.clock_rollbacks += 1  # as the generator counts a rollback
        await node.issuers["typeid"].issue(1, {}, charge=no_charge)
        await node.issuers["uuidv7"].issue(1, {}, charge=no_charge)
        assert sample(m, "idmint_clock_rollback_total", scheme="uuidv7") == 1
        assert sample(m, "idmint_clock_rollback_total", scheme="typeid") == 0
