"""deploy/kubernetes/: validated offline against the Kubernetes API schemas (kubernetes-validate), and consistent
with the app (probe paths, port, settings names) and the image (non-root user)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from app.settings import Settings
from tests.support.prometheus import DEPLOY, REPO, find_tool, run_tool

K8S = DEPLOY / "kubernetes"
MANIFESTS = ("configmap.yaml", "deployment.yaml", "service.yaml", "poddisruptionbudget.yaml")


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((K8S / name).read_text())


def test_kubernetes_validate_strict() -> None:
    tool = find_tool("kubernetes-validate")
    result = run_tool([tool, "--strict", *(str(K8S / name) for name in MANIFESTS)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == len(MANIFESTS), result.stdout


def test_kustomization_lists_every_manifest() -> None:
    assert sorted(_load("kustomization.yaml")["resources"]) == sorted(MANIFESTS)
    assert sorted(p.name for p in K8S.glob("*.yaml")) == sorted([*MANIFESTS, "kustomization.yaml"])


def test_deployment_probes_resources_and_configuration() -> None:
    deployment = _load("deployment.yaml")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    assert downward == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}  # into the claim ledger
    assert container["lifecycle"]["preStop"]["exec"]["command"][:2] == ["idmint", "admin"]
    assert container["lifecycle"]["preStop"]["exec"]["command"][-1] == "drain"
    assert int(env["IDMINT_PORT"]) == ports["http"]
    assert env["IDMINT_HOST"] == "0.0.0.0"

    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), kind

    configmap = _load("configmap.yaml")
    refs = [source["configMapRef"]["name"] for source in container["envFrom"]]
    assert refs == [configmap["metadata"]["name"]]
    settings_names = {f"IDMINT_{field.upper()}" for field in Settings.model_fields}
    assert set(configmap["data"]) | set(env) <= settings_names
    endpoints = configmap["data"]["IDMINT_ETCD_ENDPOINTS"].split(",")
    assert endpoints and all(re.fullmatch(r"https?://[^,\s]+", url) for url in endpoints)

    # The image's numeric USER is what the pod asserts.
    user = re.search(r"^USER (\d+):(\d+)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert user is not None
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True
    assert (security["runAsUser"], security["runAsGroup"]) == (int(user.group(1)), int(user.group(2)))


def test_service_and_pdb_select_the_deployment_pods() -> None:
    pod_labels = _load("deployment.yaml")["spec"]["template"]["metadata"]["labels"]
    selector = _load("deployment.yaml")["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    service = _load("service.yaml")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    pdb = _load("poddisruptionbudget.yaml")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1
    assert _load("deployment.yaml")["spec"]["replicas"] > pdb["spec"]["maxUnavailable"]


def test_every_manifest_file_is_yaml_with_kind() -> None:
    for path in sorted(Path(K8S).glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert doc.get("kind") and doc.get("apiVersion"), path
