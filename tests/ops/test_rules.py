"""deploy/prometheus-rules.yml and the Grafana dashboard, checked by promtool: every alert fires on the series it is
meant for (and not on its look-alikes) under ``promtool test rules``; every dashboard query parses; every metric
name they use is one idmint exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from app.metrics import Metrics
from tests.support.prometheus import DEPLOY, find_tool, run_tool

RULES = DEPLOY / "prometheus-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "idmint.json"
A = {"job": "idmint", "instance": "a:8000"}
B = {"job": "idmint", "instance": "b:8000"}


def _rules() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return {rule["alert"]: rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule}


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def _expected(alert: str, labels: dict[str, str]) -> dict[str, Any]:
    """The alert's labels and its annotations rendered the way Prometheus renders these simple templates."""
    rule = _rules()[alert]
    annotations = {}
    for key, template in rule.get("annotations", {}).items():
        annotations[key] = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
        assert "{{" not in annotations[key], f"test cannot render {template!r}"
    return {"exp_labels": {**labels, **rule.get("labels", {})}, "exp_annotations": annotations}


def _unit_tests() -> list[dict[str, Any]]:
    muid_a, siq_a, muid_b = {**A, "scheme": "muid"}, {**A, "scheme": "siq"}, {**B, "scheme": "muid"}
    return [
        {  # a replica that stops answering scrapes; the other keeps answering
            "interval": "1m",
            "input_series": [_series("up", A, "1 1 0 0 0 0"), _series("up", B, "1x6")],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "IdmintDown", "exp_alerts": []},
                {"eval_time": "4m", "alertname": "IdmintDown", "exp_alerts": [_expected("IdmintDown", A)]},
            ],
        },
        {  # one scheme of replica a loses its identity for good; b stays ready
            "interval": "1m",
            "input_series": [
                _series("idmint_lease_held", muid_a, "1 1 0 0 0 0"),
                _series("idmint_lease_held", siq_a, "1x6"),
                _series("idmint_lease_held", muid_b, "1x6"),
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "IdmintReplicaNotReady", "exp_alerts": []},
                {
                    "eval_time": "4m",
                    "alertname": "IdmintReplicaNotReady",
                    "exp_alerts": [_expected("IdmintReplicaNotReady", A)],
                },
            ],
        },
        {  # a lost lease on a; keepalives keep succeeding on b
            "interval": "1m",
            "input_series": [
                _series("idmint_lease_renewals_total", {**A, "outcome": "lost"}, "0 0 0 1 1 1"),
                _series("idmint_lease_renewals_total", {**A, "outcome": "failed"}, "0 0 0 1 1 1"),
                _series("idmint_lease_renewals_total", {**B, "outcome": "ok"}, "0+20x6"),
                _series("idmint_lease_renewals_total", {**B, "outcome": "lost"}, "0x6"),
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "IdmintLeaseLost", "exp_alerts": []},
                {
                    "eval_time": "4m",
                    "alertname": "IdmintLeaseLost",
                    "exp_alerts": [_expected("IdmintLeaseLost", {**A, "outcome": "lost"})],
                },
                # one failure is not "trouble renewing"
                {"eval_time": "4m", "alertname": "IdmintLeaseRenewalsFailing", "exp_alerts": []},
            ],
        },
        {  # keepalives failing again and again on a
            "interval": "1m",
            "input_series": [
                _series("idmint_lease_renewals_total", {**A, "outcome": "late"}, "0+1x10"),
                _series("idmint_lease_renewals_total", {**B, "outcome": "ok"}, "0+20x10"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "8m",
                    "alertname": "IdmintLeaseRenewalsFailing",
                    "exp_alerts": [_expected("IdmintLeaseRenewalsFailing", {**A, "outcome": "late"})],
                },
            ],
        },
        {  # a clock rollback and a refused identity on a's muid; nothing on b
            "interval": "1m",
            "input_series": [
                _series("idmint_clock_rollback_total", muid_a, "0 0 1 1 1"),
                _series("idmint_clock_rollback_total", muid_b, "0x5"),
                _series("idmint_identity_refused_total", muid_a, "0 0 0 2 2"),
                _series("idmint_identity_refused_total", muid_b, "0x5"),
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "IdmintClockRollback", "exp_alerts": []},
                {
                    "eval_time": "3m",
                    "alertname": "IdmintClockRollback",
                    "exp_alerts": [_expected("IdmintClockRollback", muid_a)],
                },
                {
                    "eval_time": "4m",
                    "alertname": "IdmintIdentityRefused",
                    "exp_alerts": [_expected("IdmintIdentityRefused", muid_a)],
                },
            ],
        },
        {  # sustained exhaustion (2/s) on a, occasional (0.5/s) on b
            "interval": "1m",
            "input_series": [
                _series("idmint_sequence_exhausted_total", {**A, "scheme": "eight-byte"}, "0+120x20"),
                _series("idmint_sequence_exhausted_total", {**B, "scheme": "eight-byte"}, "0+30x20"),
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "IdmintSequenceExhausted", "exp_alerts": []},
                {
                    "eval_time": "14m",
                    "alertname": "IdmintSequenceExhausted",
                    "exp_alerts": [_expected("IdmintSequenceExhausted", {**A, "scheme": "eight-byte"})],
                },
            ],
        },
        {  # issuing stops on every replica at minute 20: 15 minutes without increase, then 15 more (for)
            "interval": "1m",
            "input_series": [
                _series("idmint_ids_issued_total", muid_a, "0+10x20 200x40"),
                _series("idmint_ids_issued_total", muid_b, "0+1x20 20x40"),
            ],
            "alert_rule_test": [
                {"eval_time": "45m", "alertname": "IdmintNoIdsIssued", "exp_alerts": []},
                {
                    "eval_time": "52m",
                    "alertname": "IdmintNoIdsIssued",
                    "exp_alerts": [_expected("IdmintNoIdsIssued", {"job": "idmint"})],
                },
            ],
        },
        {  # ...but one replica issuing is enough
            "interval": "1m",
            "input_series": [
                _series("idmint_ids_issued_total", muid_a, "0+10x20 200x40"),
                _series("idmint_ids_issued_total", muid_b, "0+10x60"),
            ],
            "alert_rule_test": [{"eval_time": "52m", "alertname": "IdmintNoIdsIssued", "exp_alerts": []}],
        },
        {  # a's snowflake layout ends in a year (time() is 0 at the start of a promtool test); b's in 2080
            "interval": "1m",
            "input_series": [
                _series("idmint_id_space_end_timestamp_seconds", {**A, "scheme": "snowflake"}, "31536000x120"),
                _series("idmint_id_space_end_timestamp_seconds", {**B, "scheme": "snowflake"}, "3487778430x120"),
                _series("idmint_id_space_end_timestamp_seconds", {**B, "scheme": "uuidv7"}, " ".join(["Inf"] * 100)),
            ],
            "alert_rule_test": [
                {"eval_time": "30m", "alertname": "IdmintIdSpaceEndingSoon", "exp_alerts": []},
                {
                    "eval_time": "90m",
                    "alertname": "IdmintIdSpaceEndingSoon",
                    "exp_alerts": [_expected("IdmintIdSpaceEndingSoon", {**A, "scheme": "snowflake"})],
                },
            ],
        },
        {  # a cannot read its peer fleet for 10 minutes; b read its peer after 3 minutes (no alert)
            "interval": "1m",
            "input_series": [
                _series("idmint_peer_fleet_up", {**A, "peer": "http://fleet-2:8000"}, "0x20"),
                _series("idmint_peer_fleet_up", {**B, "peer": "http://fleet-1:8000"}, "0 0 0 1x20"),
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "IdmintPeerFleetDown", "exp_alerts": []},
                {
                    "eval_time": "10m",
                    "alertname": "IdmintPeerFleetDown",
                    "exp_alerts": [_expected("IdmintPeerFleetDown", {**A, "peer": "http://fleet-2:8000"})],
                },
            ],
        },
        {  # a's embedded fleet listens beyond loopback with one region; b's too, but regions set; c's on loopback
            "interval": "1m",
            "input_series": [
                _series("idmint_region_configured", {**A, "backend": "embedded", "exposed": "true"}, "0x20"),
                _series("idmint_region_configured", {**B, "backend": "embedded", "exposed": "true"}, "1x20"),
                _series(
                    "idmint_region_configured",
                    {"job": "idmint", "instance": "c:8000", "backend": "embedded", "exposed": "false"},
                    "0x20",
                ),
                _series(
                    "idmint_region_configured",
                    {"job": "idmint", "instance": "d:8000", "backend": "etcd", "exposed": "true"},
                    "0x20",
                ),
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "IdmintEmbeddedFleetWithoutRegion", "exp_alerts": []},
                {
                    "eval_time": "15m",
                    "alertname": "IdmintEmbeddedFleetWithoutRegion",
                    "exp_alerts": [
                        _expected("IdmintEmbeddedFleetWithoutRegion", {**A, "backend": "embedded", "exposed": "true"})
                    ],
                },
            ],
        },
    ]


def test_every_alert_has_a_unit_test() -> None:
    tested = {case["alertname"] for test in _unit_tests() for case in test["alert_rule_test"]}
    assert tested == set(_rules())


def test_promtool_test_rules(tmp_path: Path) -> None:
    promtool = find_tool("promtool")
    spec = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": _unit_tests()}
    path = tmp_path / "idmint-rules.test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = run_tool([promtool, "test", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Grafana's variables replaced by what Grafana sends, each query checked as a recording rule by promtool."""
    exprs = [e.replace("$__rate_interval", "1m").replace("$instance", ".*") for e in _dashboard_exprs()]
    assert exprs and not [e for e in exprs if "$" in e]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(exprs)],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    result = run_tool([find_tool("promtool"), "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def _exposed_names() -> set[str]:
    m = Metrics(["muid"], "0")
    m.request("/r", "GET", 200, 0.001)
    m.scheme("muid").lease_held(True, 1)
    m.region_configured(False, "embedded", False)
    m.peer_fleet_up("http://peer:8000", False)
    m.scheme("muid").id_space_end(1.0)
    names: set[str] = set()
    for family in m.registry.collect():
        names.update(sample.name for sample in family.samples)
    return names


def test_rules_and_dashboard_use_only_exposed_metric_names() -> None:
    exposed = _exposed_names()
    used = set()
    for expr in [rule["expr"] for rule in _rules().values()] + _dashboard_exprs():
        used.update(re.findall(r"\bidmint_[a-z_]+\b", expr))
    assert used and used <= exposed, used - exposed


def test_dashboard_covers_the_operators_questions() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = " ".join(_dashboard_exprs())
    for needle in (
        "rate(idmint_ids_issued_total",
        "histogram_quantile(0.99",
        "idmint_request_duration_seconds_bucket",
        "idmint_lease_held",
        "idmint_lease_deadline_seconds",
        "idmint_node_identity_info",
        "idmint_clock_rollback_total",
        "idmint_clock_rollback_seconds",
        "idmint_sequence_exhausted_total",
    ):
        assert needle in exprs, needle
    assert "sum by (scheme) (rate(idmint_ids_issued_total" in exprs  # issue rate per scheme
    assert dashboard["uid"] and dashboard["title"] == "idmint"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
