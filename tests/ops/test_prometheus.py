"""A real Prometheus (Debian's package) scrapes a real ``idmint serve`` with deploy/prometheus.yml's job, and the
counter it stores moves by exactly the number of IDs issued -- with one worker and with ``--workers 2``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.multiprocess import MultiProcessCollector

from app.schemes import schemes
from tests.support.prometheus import (
    DEPLOY,
    PrometheusServer,
    find_tool,
    process_environ,
    run_tool,
)
from tests.support.server import Server

# scheme -> list of (method, count): GETs go through the fast path, POSTs through the router. Every scheme is
# issued (those without an entry here get OTHER_CALLS), so the first scrape shows one series per scheme.
CALLS: dict[str, list[tuple[str, int]]] = {
    "eight-byte": [("GET", 1), ("GET", 64), ("POST", 1000), ("GET", 313)],
    "muid": [("POST", 7), ("GET", 2500)],
    "hlc-ulid": [("GET", 11), ("POST", 11)],
    "siq": [("GET", 3)],
    "wiji": [("POST", 4096), ("GET", 5)],
}
OTHER_CALLS = [("GET", 17), ("POST", 129)]
ISSUES: dict[str, list[tuple[str, int]]] = {name: CALLS.get(name, OTHER_CALLS) for name in schemes()}
ALERTS = {
    "IdmintDown",
    "IdmintReplicaNotReady",
    "IdmintLeaseLost",
    "IdmintLeaseRenewalsFailing",
    "IdmintClockRollback",
    "IdmintIdentityRefused",
    "IdmintSequenceExhausted",
    "IdmintNoIdsIssued",
    "IdmintEmbeddedFleetWithoutRegion",
    "IdmintPeerFleetDown",
    "IdmintIdSpaceEndingSoon",
}


def _issue(base_url: str, scheme: str, method: str, count: int) -> int:
    """One request on a fresh connection (so that several workers share the load); returns IDs received."""
    with httpx.Client(timeout=30) as client:
        response = client.request(method, f"{base_url}/v1/ids/{scheme}", params={"count": count})
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["ids"]) == count, body
    return count


def _issue_all(server: Server, repeat: int) -> dict[str, int]:
    jobs = [
        (scheme, method, count) for _ in range(repeat) for scheme, calls in ISSUES.items() for method, count in calls
    ]
    with ThreadPoolExecutor(max_workers=8) as pool:
        received = list(pool.map(lambda job: _issue(server.url, *job), jobs))
    totals: dict[str, int] = {}
    for (scheme, _, _), count in zip(jobs, received, strict=True):
        totals[scheme] = totals.get(scheme, 0) + count
    return totals


def _issued(prometheus: PrometheusServer) -> dict[str, float]:
    return {
        r["metric"]["scheme"]: float(r["value"][1]) for r in prometheus.query('idmint_ids_issued_total{job="idmint"}')
    }


def _scrape_and_count(
    server: Server,
    prometheus_server: Callable[[dict[str, Any]], PrometheusServer],
    scrape_config: Callable[..., dict[str, Any]],
    repeat: int,
) -> tuple[dict[str, int], PrometheusServer]:
    prometheus = prometheus_server(scrape_config(server.target))
    selector = 'idmint_ids_issued_total{job="idmint"}'
    prometheus.wait_until("the first scrape of every scheme", lambda: len(_issued(prometheus)) == len(ISSUES))
    before = _issued(prometheus)

    issued = _issue_all(server, repeat)
    done = time.time()
    prometheus.wait_for_scrape_after(done, selector)
    after = _issued(prometheus)

    increase = {scheme: after[scheme] - before[scheme] for scheme in ISSUES}
    assert increase == {scheme: float(n) for scheme, n in issued.items()}
    up = prometheus.query('up{job="idmint"}')
    assert [r["value"][1] for r in up] == ["1"]
    return issued, prometheus


def test_prometheus_counts_exactly_the_ids_issued(idmint_server, prometheus_server, scrape_config) -> None:
    server = idmint_server(workers=1)
    issued, prometheus = _scrape_and_count(server, prometheus_server, scrape_config, repeat=2)
    assert sum(issued.values()) > 10_000

    # The live server loaded deploy/prometheus-rules.yml through the generated config's rule_files.
    groups = prometheus.get("/api/v1/rules")["groups"]
    assert {rule["name"] for group in groups for rule in group["rules"]} == ALERTS
    # The idmint job's scrape carries the deployed static labels.
    target = prometheus.get("/api/v1/targets")["activeTargets"][0]
    assert target["labels"]["job"] == "idmint" and target["scrapeUrl"] == f"http://{server.target}/metrics"


def test_prometheus_counts_exactly_across_two_workers(idmint_server, prometheus_server, scrape_config) -> None:
    server = idmint_server(workers=2)
    workers = server.worker_pids()
    assert len(workers) == 2, workers
    # idmint serve set up multiprocess mode itself: a fresh directory, inherited by both workers.
    dirs = {process_environ(pid).get("PROMETHEUS_MULTIPROC_DIR") for pid in workers}
    assert len(dirs) == 1 and None not in dirs, dirs
    metrics_dir = Path(dirs.pop() or "")
    assert metrics_dir.name.startswith("idmint-metrics-")

    issued, prometheus = _scrape_and_count(server, prometheus_server, scrape_config, repeat=4)

    # Both workers issued, and what Prometheus stored is their sum (read each worker's own file).
    per_worker: dict[int, float] = {}
    for pid in workers:
        files = [str(metrics_dir / f"counter_{pid}.db")]
        for metric in MultiProcessCollector.merge(files, accumulate=False):
            if metric.name == "idmint_ids_issued":
                per_worker[pid] = sum(s.value for s in metric.samples if s.name == "idmint_ids_issued_total")
    assert len(per_worker) == 2 and all(v > 0 for v in per_worker.values()), per_worker
    assert sum(per_worker.values()) == sum(issued.values())

    # Per-worker node identities are all visible through one scrape (one series each, value 1).
    identities = prometheus.query('idmint_node_identity_info{job="idmint",scheme="eight-byte"} == 1')
    assert len(identities) == 2, identities
    # Gauges aggregate to one series per label set (no pid label): min over live workers for lease_held.
    held = prometheus.query('idmint_lease_held{job="idmint"}')
    assert sorted(r["metric"]["scheme"] for r in held) == sorted(ISSUES)
    assert all("pid" not in r["metric"] for r in held)

    server.proc.terminate()
    server.proc.wait(timeout=15)
    assert not metrics_dir.exists(), "idmint serve must remove the multiprocess directory it created"


def _check_metrics(text: str) -> None:
    promtool = find_tool("promtool")
    result = run_tool([promtool, "check", "metrics"], input_text=text)
    assert result.returncode == 0, f"promtool check metrics:\n{result.stdout}{result.stderr}"


def test_promtool_check_metrics_passes_on_our_metrics(idmint_server) -> None:
    server = idmint_server(workers=1)
    for scheme, calls in ISSUES.items():
        _issue(server.url, scheme, *calls[0])
    httpx.get(f"{server.url}/no/such/path", timeout=5)
    text = server.metrics_text()
    for name in (
        "idmint_ids_issued_total",
        "idmint_requests_total",
        "idmint_request_duration_seconds_bucket",
        "idmint_lease_held",
        "idmint_lease_renewals_total",
        "idmint_lease_deadline_seconds",
        "idmint_node_identity_info",
        "idmint_clock_rollback_total",
        "idmint_clock_rollback_seconds",
        "idmint_sequence_exhausted_total",
        "idmint_issue_wait_seconds_bucket",
        "idmint_high_water_mark_timestamp_seconds",
        "idmint_build_info",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ):
        assert f"\n{name}" in text, f"{name} missing from /metrics"
    _check_metrics(text)


def test_promtool_check_metrics_passes_with_two_workers(idmint_server) -> None:
    server = idmint_server(workers=2)
    for scheme, calls in ISSUES.items():
        _issue(server.url, scheme, *calls[0])
    text = server.metrics_text()
    assert "\nidmint_ids_issued_total" in text and "pid=" not in text
    _check_metrics(text)


def test_promtool_check_config_and_rules_on_deploy_files() -> None:
    promtool = find_tool("promtool")
    config = run_tool([promtool, "check", "config", str(DEPLOY / "prometheus.yml")])
    assert config.returncode == 0, config.stdout + config.stderr
    assert "prometheus-rules.yml" in config.stdout  # the rules are referenced, and were checked with it
    rules = run_tool([promtool, "check", "rules", str(DEPLOY / "prometheus-rules.yml")])
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in rules.stdout


def test_readyz_body_names_schemes(idmint_server) -> None:
    server = idmint_server(workers=1)
    response = httpx.get(f"{server.url}/readyz", timeout=5)
    assert response.status_code == 200
    body = json.loads(response.text)
    assert body["status"] == "ready"
    assert set(body["schemes"]) == set(ISSUES)
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
