"""Dockerfile, .dockerignore, docker-compose.yml and Grafana provisioning, checked with the real tools that run here
(hadolint, docker-compose config) and by running the commands the files contain. The image is built and run, and
the compose stack brought up, by tests/ops/test_podman.py (podman; there is no Docker engine on this machine)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from app.settings import Settings
from tests.support.prometheus import DEPLOY, REPO, find_tool, run_tool
from tests.support.server import free_port

DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
REPLICAS = ("idmint-1", "idmint-2", "idmint-3")


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs of the Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += (" " if pending else "") + stripped.rstrip("\\").strip()
        if stripped.endswith("\\"):
            continue
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def _one(name: str) -> str:
    found = [args for word, args in _instructions() if word == name]
    assert len(found) == 1, f"expected one {name}, found {found}"
    return found[0]


def _settings_env_names() -> set[str]:
    return {f"IDMINT_{field.upper()}" for field in Settings.model_fields}


# -- Dockerfile ------------------------------------------------------------------------------------------------


def test_hadolint_passes() -> None:
    hadolint = find_tool("hadolint")
    result = run_tool([hadolint, str(DOCKERFILE)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_dockerfile_shape() -> None:
    instructions = _instructions()
    froms = [args for word, args in instructions if word == "FROM"]
    args = dict(a.split("=", 1) for word, a in instructions if word == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", args["PYTHON_IMAGE"])
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    user = _one("USER")
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", user), "non-root, numeric (runAsNonRoot can verify it)"
    assert json.loads(_one("CMD")) == ["idmint", "serve"]
    # The dependency layer (the lock alone) comes before the application source is copied.
    copies = [args for word, args in instructions if word == "COPY"]
    order = [copies.index(source) for source in ("requirements.lock ./", "pyproject.toml README.md ./", "app ./app")]
    assert order == sorted(order)
    env_names = {m for word, args in instructions if word == "ENV" for m in re.findall(r"\b(IDMINT_\w+)=", args)}
    assert {"IDMINT_HOST", "IDMINT_PORT", "IDMINT_WORKERS"} <= env_names <= _settings_env_names()
    documented = set(re.findall(r"\bIDMINT_[A-Z_]+[A-Z]\b", DOCKERFILE.read_text()))
    unknown = {name for name in documented if name not in _settings_env_names() and not name.endswith("_CERT")}
    assert not unknown, f"Dockerfile documents settings that do not exist: {unknown}"


def test_dockerfile_dependency_layer_installs_the_lock_with_its_hashes() -> None:
    """The image installs exactly requirements.lock (tests/test_lock.py checks it against pyproject.toml), every
    file checked against its SHA-256, before the application's source is copied; idmint itself adds nothing."""
    instructions = _instructions()
    runs = [args for word, args in instructions if word == "RUN"]
    lock = next(run for run in runs if "-r requirements.lock" in run)
    assert "--require-hashes" in lock and "--no-deps" in lock, lock
    app = next(run for run in runs if run.rstrip().endswith(" ."))
    assert "--no-deps" in app, app
    assert instructions.index(("RUN", lock)) < instructions.index(("COPY", "app ./app"))


def test_dockerignore_keeps_what_the_build_copies() -> None:
    ignore = (REPO / ".dockerignore").read_text().split()
    assert "*" in ignore
    for source in ("pyproject.toml", "README.md", "app/"):
        assert f"!{source}" in ignore, source
    for word, args in _instructions():
        if word == "COPY" and not args.startswith("--from"):
            source = args.split()[0]
            assert f"!{source.rstrip('/')}" in [entry.rstrip("/") for entry in ignore], source


def test_dockerfile_healthcheck_command_works_against_a_real_server(idmint_server) -> None:
    healthcheck = _one("HEALTHCHECK")
    exec_form = json.loads(healthcheck[healthcheck.index("CMD ") + 4 :])
    assert exec_form[0] == "python" and "/healthz" in exec_form[-1]
    command = [sys.executable, *exec_form[1:]]
    server = idmint_server(workers=1)
    ok = subprocess.run(command, env={"IDMINT_PORT": str(server.port)}, capture_output=True, timeout=10)
    assert ok.returncode == 0, ok.stderr
    dead = subprocess.run(command, env={"IDMINT_PORT": str(free_port())}, capture_output=True, timeout=10)
    assert dead.returncode != 0


# -- docker-compose.yml ----------------------------------------------------------------------------------------


def _compose_config() -> dict[str, Any]:
    compose = find_tool("docker-compose")
    result = run_tool([compose, "-f", str(COMPOSE), "config"])
    assert result.returncode == 0, result.stdout + result.stderr
    return yaml.safe_load(result.stdout)


def test_docker_compose_config_validates() -> None:
    config = _compose_config()
    services = config["services"]
    assert set(services) == {"etcd", *REPLICAS, "prometheus", "grafana"}

    etcd = services["etcd"]
    assert re.fullmatch(r"\S+/etcd:v3\.5\.\d+", etcd["image"]), etcd["image"]
    assert "etcdctl" in etcd["healthcheck"]["test"] and "health" in etcd["healthcheck"]["test"]

    ports: set[str] = set()
    for name in REPLICAS:
        replica = services[name]
        assert replica["build"]["context"] == str(REPO)
        assert replica["environment"]["IDMINT_ETCD_ENDPOINTS"] == "http://etcd:2379"
        assert set(replica["environment"]) <= _settings_env_names()
        assert replica["depends_on"]["etcd"]["condition"] == "service_healthy"
        ports.update(p["published"] for p in replica["ports"])
        assert [p["target"] for p in replica["ports"]] == [8000]
    assert len(ports) == 3


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    mounts = {}
    for volume in service["volumes"]:
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        mounts[target] = source
    return mounts


def test_compose_prometheus_scrapes_every_replica_with_the_deployed_config() -> None:
    services = _compose_config()["services"]
    mounts = _mounts(services["prometheus"])
    assert Path(mounts["/etc/prometheus/prometheus.yml"]) == DEPLOY / "prometheus.yml"
    assert Path(mounts["/etc/prometheus/prometheus-rules.yml"]) == DEPLOY / "prometheus-rules.yml"
    deployed = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert deployed["rule_files"] == ["prometheus-rules.yml"]  # resolved next to the mounted config
    job = next(j for j in deployed["scrape_configs"] if j["job_name"] == "idmint")
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    assert targets == [f"{name}:8000" for name in REPLICAS]


def test_compose_grafana_is_provisioned_from_deploy_grafana() -> None:
    services = _compose_config()["services"]
    mounts = _mounts(services["grafana"])
    assert Path(mounts["/etc/grafana/provisioning"]) == DEPLOY / "grafana" / "provisioning"
    dashboards_dir = Path(mounts["/var/lib/grafana/dashboards"])
    assert dashboards_dir == DEPLOY / "grafana" / "dashboards"
    assert (dashboards_dir / "idmint.json").is_file()

    provisioning = DEPLOY / "grafana" / "provisioning"
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    assert "9090:9090" in str(services["prometheus"]["ports"]) or any(
        p.get("target") == 9090 for p in services["prometheus"]["ports"]
    )
    provider = yaml.safe_load((provisioning / "dashboards" / "idmint.yml").read_text())["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboard = json.loads((dashboards_dir / "idmint.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["current"]["value"] == datasource["uid"]
