"""The PostgreSQL and MySQL deployments: docker-compose.postgres.yml and docker-compose.mysql.yml checked with
``docker-compose config``, and the Kubernetes overlays deploy/kubernetes-postgres/ and deploy/kubernetes-mysql/ each
rendered here (its JSON patches applied to the base, as kustomize does) and
validated offline against the Kubernetes API schemas (kubernetes-validate); both consistent with the settings."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import Settings, load_settings
from tests.support.prometheus import DEPLOY, REPO, find_tool, run_tool

COMPOSE = REPO / "docker-compose.postgres.yml"
REPLICAS = ("idmint-1", "idmint-2", "idmint-3")
BASE = DEPLOY / "kubernetes"
OVERLAY = DEPLOY / "kubernetes-postgres"
OVERLAYS = {"postgres": DEPLOY / "kubernetes-postgres", "mysql": DEPLOY / "kubernetes-mysql"}


def _settings_env_names() -> set[str]:
    return {f"IDMINT_{field.upper()}" for field in Settings.model_fields}


def test_compose_on_postgres_validates_and_carries_no_password_in_the_url() -> None:
    result = run_tool([find_tool("docker-compose"), "-f", str(COMPOSE), "config"])
    assert result.returncode == 0, result.stdout + result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"postgres", *REPLICAS}
    postgres = services["postgres"]
    assert postgres["image"].startswith("postgres:") and "pg_isready" in postgres["healthcheck"]["test"]
    ports: set[str] = set()
    for name in REPLICAS:
        replica = services[name]
        env = replica["environment"]
        assert replica["build"]["context"] == str(REPO)
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert set(env) - {"PGPASSWORD"} <= _settings_env_names()
        assert env["PGPASSWORD"] == postgres["environment"]["POSTGRES_PASSWORD"]
        settings = load_settings(postgres_url=env["IDMINT_POSTGRES_URL"])
        assert (
            settings.postgres_url is not None and ":" not in settings.postgres_url.get_secret_value()[13:].split("@")[0]
        )  # postgresql://user@...: no password in the URL
        ports.update(p["published"] for p in replica["ports"])
    assert len(ports) == 3


def test_compose_on_mysql_validates_with_the_password_from_the_environment() -> None:
    compose = REPO / "docker-compose.mysql.yml"
    env = {**os.environ, "IDMINT_MYSQL_PASSWORD": "from-the-environment"}
    args = [find_tool("docker-compose"), "-f", str(compose), "config"]
    result = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"mariadb", *REPLICAS}
    mariadb = services["mariadb"]
    assert mariadb["image"].startswith("mariadb:") and "healthcheck.sh" in mariadb["healthcheck"]["test"]
    assert mariadb["environment"]["MARIADB_PASSWORD"] == "from-the-environment"
    for name in REPLICAS:
        replica = services[name]
        assert replica["depends_on"]["mariadb"]["condition"] == "service_healthy"
        assert set(replica["environment"]) <= _settings_env_names()
        settings = load_settings(mysql_url=replica["environment"]["IDMINT_MYSQL_URL"])
        assert settings.mysql_url is not None
        assert settings.mysql_url.get_secret_value() == "mysql://idmint:from-the-environment@mariadb:3306/idmint"
    assert len({p["published"] for name in REPLICAS for p in services[name]["ports"]}) == 3


def _apply(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """``operations`` (JSON Patch, RFC 6902: the ``add`` and ``remove`` the overlay uses) applied to a copy."""
    out = copy.deepcopy(document)
    for op in operations:
        *parents, last = [part for part in op["path"].split("/")[1:]]
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "remove":
            del target[last]  # a KeyError here is what kustomize reports as a missing path
        elif op["op"] == "add":
            if isinstance(target, list):
                target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
            else:
                target[last] = op["value"]
        else:
            raise AssertionError(f"the test applies add and remove only, got {op['op']}")
    return out


def rendered(where: Path = OVERLAY) -> list[dict[str, Any]]:
    """The overlay's manifests, as ``kubectl kustomize deploy/kubernetes-postgres`` (or ``where``) renders them."""
    overlay = yaml.safe_load((where / "kustomization.yaml").read_text())
    assert overlay["resources"][0] == "../kubernetes"
    base = yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"]
    documents = [yaml.safe_load((BASE / name).read_text()) for name in base]
    documents += [yaml.safe_load((where / name).read_text()) for name in overlay["resources"][1:]]
    for patch in overlay["patches"]:
        target = patch["target"]
        found = [d for d in documents if (d["kind"], d["metadata"]["name"]) == (target["kind"], target["name"])]
        assert len(found) == 1, target
        documents[documents.index(found[0])] = _apply(found[0], yaml.safe_load(patch["patch"]))
    return documents


@pytest.mark.parametrize("backend", sorted(OVERLAYS))
def test_the_kubernetes_overlay_takes_the_url_from_a_secret_and_validates(tmp_path: Path, backend: str) -> None:
    documents = rendered(OVERLAYS[backend])
    setting = f"IDMINT_{backend.upper()}_URL"
    by_kind = {d["kind"]: d for d in documents}
    config = by_kind["ConfigMap"]["data"]
    assert not [k for k in config if k.startswith("IDMINT_ETCD_")]
    secret = by_kind["Secret"]
    container = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    url_from = next(e["valueFrom"]["secretKeyRef"] for e in container["env"] if e["name"] == setting)
    assert url_from == {"name": secret["metadata"]["name"], "key": "url"}
    assert set(secret["stringData"]) == {"url"}
    # What a pod would load: the ConfigMap plus the Secret's URL, on this backend.
    values = {k.removeprefix("IDMINT_").lower(): v for k, v in config.items()}
    settings = load_settings(**values, **{f"{backend}_url": secret["stringData"]["url"]})
    assert getattr(settings, f"{backend}_url") is not None and not settings.etcd_endpoints
    files = []
    for n, document in enumerate(documents):
        path = tmp_path / f"{n}-{document['kind'].lower()}.yaml"
        path.write_text(yaml.safe_dump(document))
        files.append(str(path))
    result = run_tool([find_tool("kubernetes-validate"), "--strict", *files])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == len(documents), result.stdout
