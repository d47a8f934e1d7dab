"""The container image and the compose stack, built and run for real with podman (tests/support/podman.py).

One image is built per session from the repository's Dockerfile (``--format docker``, on a debootstrapped Debian
base passed as ``PYTHON_IMAGE``) and shared by every test here. Containers use the host's network and bind
127.0.0.1; each test removes its containers and volumes. The scheme list comes from each node's /v1/schemes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.etcd import EtcdServer, find_etcd_binary
from tests.support.podman import (
    REPO,
    SESSION,
    STATE_DIR,
    SUITE,
    Container,
    ContainerFactory,
    Image,
    Podman,
    apt_mirror,
    build_image,
)
from tests.support.prometheus import DEPLOY, IDMINT_JOB, find_tool
from tests.support.server import free_port

GRACE_S = 15  # docker-compose.yml's stop_grace_period
STREAM_COUNT = 100_000
COMPOSE_FILE = REPO / "docker-compose.yml"
COMPOSE_OVERRIDE = REPO / "tests" / "ops" / "compose.podman.yml"
COMPOSE_REPLICAS = {"idmint-1": 8001, "idmint-2": 8002, "idmint-3": 8003}
ETCD_PORTS = (2379, 2380)  # docker-compose.yml's etcd ports (listening on 127.0.0.1 with the override)


def catalogue(container: Container) -> list[dict[str, Any]]:
    response = container.get("/v1/schemes")
    assert response.status_code == 200, response.text
    entries = response.json()["schemes"]
    assert entries, "no scheme served"
    return list(entries)


def held_identities(entry: dict[str, Any]) -> list[int]:
    """The identities this node holds for a scheme, as /v1/schemes reports them ([] for schemes without one)."""
    return list(entry.get("node", {}).get("identities") or [])


def issue(container: Container, scheme: str, count: int, **params: str) -> list[str]:
    response = container.get(f"/v1/ids/{scheme}", count=count, **params)
    assert response.status_code == 200, f"{scheme}: {response.status_code} {response.text}"
    ids = response.json()["ids"]
    assert len(ids) == count
    return list(ids)


def stream(container: Container, scheme: str, count: int) -> list[str]:
    with container.client.stream(
        "GET", f"{container.base_url}/v1/ids/{scheme}/stream", params={"count": count}, timeout=120
    ) as response:
        assert response.status_code == 200, f"{scheme}: {response.status_code}"
        lines = response.read().decode().splitlines()
    assert len(lines) == count, f"{scheme}: {len(lines)} of {count} IDs"
    return lines


def decoded(container: Container, scheme: str, text: str) -> dict[str, Any]:
    response = container.get(f"/v1/decode/{scheme}/{text}")
    assert response.status_code == 200, f"{scheme} {text!r}: {response.status_code} {response.text}"
    body = response.json()
    assert body["scheme"] == scheme
    return dict(body)


def proc_status(container: Container, pid: int = 1) -> dict[str, str]:
    done = container.exec("cat", f"/proc/{pid}/status", check=True)
    return dict(line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line)


def can_write(container: Container, directory: str) -> bool:
    """Whether the container's user can create a file in ``directory``."""
    probe = f"{directory.rstrip('/')}/.idmint-write-probe"
    done = container.exec("python", "-c", f"open({probe!r}, 'x').close(); import os; os.unlink({probe!r})")
    return done.returncode == 0


# -- the image -------------------------------------------------------------------------------------------------


def test_image_is_built_from_the_dockerfile_and_declares_user_healthcheck_and_state_volume(
    podman: Podman, idmint_image: Image
) -> None:
    data = json.loads(podman.run("image", "inspect", idmint_image.tag).stdout)[0]
    config = data["Config"]
    print(
        f"\nidmint image {idmint_image.tag}: {idmint_image.size / 1e6:.0f} MB, built in "
        f"{idmint_image.build_seconds:.0f} s"
    )
    assert config["User"] == "10001:10001"
    assert config["Cmd"] == ["idmint", "serve"]
    assert STATE_DIR in config["Volumes"]
    assert config["WorkingDir"] == STATE_DIR
    assert "ExposedPorts" in config and "8000/tcp" in config["ExposedPorts"]
    healthcheck = data["Healthcheck"]  # kept by --format docker (OCI images drop it)
    assert healthcheck["Test"][0] == "CMD" and "/healthz" in healthcheck["Test"][-1]
    assert 0 < idmint_image.size < 1_000_000_000


def test_container_is_ready_issues_and_decodes_every_scheme_as_uid_10001(containers: ContainerFactory) -> None:
    container = containers.start()
    entries = catalogue(container)
    for entry in entries:
        name = entry["name"]
        formats = entry.get("formats") or []
        for fmt in formats:  # every text form the scheme lists decodes back to the same ID
            # TypeID's `uuid` output form is a plain UUID, which the TypeID parser refuses by its spec: it decodes
            # as the uuidv7 it is.
            reader = "uuidv7" if (name, fmt) == ("typeid", "uuid") else name
            for text in issue(container, name, 3, format=fmt):
                body = decoded(container, reader, text)
                if fmt == entry.get("canonical_format", formats[0]):
                    assert body["id"] == text
        canonical = issue(container, name, 1)[0]
        candidates = container.get(f"/v1/decode/{canonical}")
        assert candidates.status_code == 200, candidates.text
        assert name in [c["scheme"] for c in candidates.json()["candidates"]], (name, canonical)

    status = proc_status(container)
    assert status["Uid"].split() == ["10001"] * 4 and status["Gid"].split() == ["10001"] * 4
    argv = container.exec("cat", "/proc/1/cmdline", check=True).stdout.split("\0")
    assert argv[-3:] == ["/opt/idmint/bin/idmint", "serve", ""], argv  # PID 1 is the image's CMD

    # The process can write its state directory and nothing of the image: not its code, not the system.
    assert can_write(container, STATE_DIR)
    package_dir = container.exec(
        "python", "-c", "import app, os; print(os.path.dirname(app.__file__))", check=True
    ).stdout.strip()
    for directory in (
        "/",
        "/etc",
        "/usr",
        "/usr/local/bin",
        "/opt/idmint",
        "/opt/idmint/bin",
        package_dir,
        "/root",
        "/var/lib",
        "/home",
    ):
        assert not can_write(container, directory), directory

    health = container.podman.run("healthcheck", "run", container.name, check=False)
    assert health.returncode == 0, health.stdout + health.stderr
    assert container.get("/healthz").json() == {"status": "ok"}


def test_read_only_container_stops_on_sigterm_and_restarts_above_its_marks_from_the_state_volume(
    containers: ContainerFactory,
) -> None:
    """Run as Kubernetes does (read-only root, no tmpfs): only the state volume is writable. SIGTERM ends the
    process within the grace period; a new container on the same volume, its clock 1.5 s behind, reclaims the same
    identities and issues above every earlier ID of the schemes that hold one."""
    volume = containers.volume()
    args = ("--read-only", "--read-only-tmpfs=false", "-v", f"{volume}:{STATE_DIR}")
    first = containers.start(args=args)
    assert not can_write(first, "/tmp") and can_write(first, STATE_DIR)
    entries = catalogue(first)
    held = {e["name"]: held_identities(e) for e in entries}
    before = {e["name"]: issue(first, e["name"], 200) for e in entries}

    elapsed = first.stop(GRACE_S)
    state = first.inspect()["State"]
    assert state["ExitCode"] == 0, first.logs()[-3000:]  # exited on SIGTERM, not SIGKILLed after the grace period
    assert elapsed < GRACE_S, elapsed

    again = containers.start(args=args, env={"IDMINT_CLOCK_OFFSET_MS": "-1500"})
    assert {e["name"]: held_identities(e) for e in catalogue(again)} == held
    with_marks = [name for name, ids in held.items() if ids]
    assert with_marks, "no scheme holds an identity"
    for name, old in before.items():
        new = issue(again, name, 200)
        assert set(new).isdisjoint(old), name
        if name in with_marks:
            last = max(decoded(again, name, text)["timestamp"] for text in old[-5:])
            first_new = min(decoded(again, name, text)["timestamp"] for text in new[:5])
            assert first_new >= last, (name, last, first_new)


# -- three containers against a real etcd ----------------------------------------------------------------------


def etcd_lease_count(etcd: EtcdServer) -> int:
    out = etcd.etcdctl("lease", "list")
    return sum(1 for line in out.splitlines() if line.strip() and not line.startswith("found"))


def test_three_containers_on_etcd_hold_distinct_identities_and_never_repeat_an_id(
    containers: ContainerFactory, etcd_factory: Any
) -> None:
    etcd = etcd_factory()
    env = {
        "IDMINT_ETCD_ENDPOINTS": etcd.endpoint,
        "IDMINT_ETCD_NAMESPACE": f"test/podman-{SESSION}/",
        "IDMINT_LEASE_TTL": "10",
    }
    replicas = [containers.start(env=env, ready=False) for _ in range(3)]
    for replica in replicas:
        replica.wait_ready()
    assert len({r.port for r in replicas}) == 3

    entries = [catalogue(r) for r in replicas]
    names = [e["name"] for e in entries[0]]
    assert all([e["name"] for e in node] == names for node in entries)
    claimed = 0
    for index, name in enumerate(names):
        held = [held_identities(node[index]) for node in entries]
        flat = [identity for ids in held for identity in ids]
        assert len(flat) == len(set(flat)), f"{name}: identities shared between replicas: {held}"
        claimed += len(flat)
    assert claimed >= 3, "no scheme claimed an identity through etcd"
    assert etcd_lease_count(etcd) >= 1

    for name in names:
        seen: set[str] = set()
        for replica in replicas:
            ids = stream(replica, name, STREAM_COUNT)
            seen.update(ids)
        assert len(seen) == 3 * STREAM_COUNT, f"{name}: {3 * STREAM_COUNT - len(seen)} duplicates"

    # SIGTERM: each replica exits within the grace period and revokes its lease (releasing its identities).
    for replica in replicas:
        assert replica.stop(GRACE_S) < GRACE_S
        assert replica.inspect()["State"]["ExitCode"] == 0, replica.logs()[-3000:]
    assert etcd_lease_count(etcd) == 0


# -- compose ---------------------------------------------------------------------------------------------------


def podman_compose() -> str:
    """podman-compose from the dev extras (Debian's 1.0.3 cannot run services with network_mode: host)."""
    script = Path(sys.executable).parent / "podman-compose"
    if not script.is_file():
        pytest.fail("podman-compose is not installed: install the dev extras (pip install -e '.[dev]')", pytrace=False)
    return str(script)


def build_tool_image(
    podman: Podman, base_image: str, tag: str, workdir: Path, files: dict[str, Path], instructions: str
) -> None:
    """An image FROM the base with ``files`` (name -> host path) copied to /usr/local/bin."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (workdir / name).write_bytes(source.read_bytes())
        (workdir / name).chmod(0o755)
    copies = "".join(f"COPY {name} /usr/local/bin/{name}\n" for name in files)
    (workdir / "Containerfile").write_text(f"FROM {base_image}\n{copies}{instructions}\n")
    build_image(podman, tag, workdir, dockerfile=workdir / "Containerfile")


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def compose_ports(podman: Podman) -> Iterator[None]:
    """One compose stack at a time on this machine (its ports are fixed): a lock file, then the ports must be free."""
    with open(podman.root / "compose.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        busy = [port for port in (*ETCD_PORTS, *COMPOSE_REPLICAS.values()) if not port_free(port)]
        if busy:
            pytest.fail(f"ports needed by the compose stack are in use on 127.0.0.1: {busy}", pytrace=False)
        yield


@pytest.fixture
def compose_stack(
    podman: Podman, base_image: str, idmint_image: Image, compose_ports: None, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """docker-compose.yml + tests/ops/compose.podman.yml brought up with podman-compose (etcd, three replicas,
    Prometheus), torn down with ``down -v`` and every image made for it removed."""
    project = f"idmint-test-{SESSION}"
    etcd_tag = f"localhost/idmint-test-etcd:{SESSION}"
    prometheus_tag = f"localhost/idmint-test-prometheus:{SESSION}"
    prometheus_port = free_port()

    deployed = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    for job in deployed["scrape_configs"]:
        if job["job_name"] == IDMINT_JOB:
            for static in job["static_configs"]:
                static["targets"] = [f"127.0.0.1:{port}" for port in COMPOSE_REPLICAS.values()]
            job["scrape_interval"] = job["scrape_timeout"] = "1s"
        else:
            job["static_configs"] = [{"targets": [f"127.0.0.1:{prometheus_port}"]}]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(deployed, sort_keys=False))
    config.chmod(0o644)

    env = {
        **podman.env,
        "IDMINT_TEST_IMAGE": idmint_image.tag,
        "IDMINT_TEST_ETCD_IMAGE": etcd_tag,
        "IDMINT_TEST_PROMETHEUS_IMAGE": prometheus_tag,
        "IDMINT_TEST_PROMETHEUS_CONFIG": str(config),
        "IDMINT_TEST_PROMETHEUS_PORT": str(prometheus_port),
    }
    base = [podman_compose(), "--project-name", project, "-f", str(COMPOSE_FILE), "-f", str(COMPOSE_OVERRIDE)]

    def compose(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
        )

    try:
        build_tool_image(
            podman,
            base_image,
            etcd_tag,
            tmp_path / "etcd-image",
            {"etcd": find_etcd_binary("etcd"), "etcdctl": find_etcd_binary("etcdctl")},
            "",
        )
        build_tool_image(
            podman,
            base_image,
            prometheus_tag,
            tmp_path / "prometheus-image",
            {"prometheus": Path(find_tool("prometheus"))},
            'ENTRYPOINT ["/usr/local/bin/prometheus"]',
        )
        up = compose("up", "-d", "etcd", *COMPOSE_REPLICAS, "prometheus")
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        yield {"compose": compose, "prometheus": f"http://127.0.0.1:{prometheus_port}", "project": project}
    finally:
        label = f"label=io.podman.compose.project={project}"
        members = podman.run("ps", "-aq", "--filter", label, check=False).stdout.split()
        anonymous = [
            mount["Name"]
            for info in (json.loads(podman.run("container", "inspect", *members).stdout) if members else [])
            for mount in info["Mounts"]
            if mount.get("Type") == "volume"
        ]
        down = compose("down", "-v", "-t", str(GRACE_S))
        leftover = podman.run("ps", "-aq", "--filter", label, check=False).stdout.split()
        if leftover:
            podman.run("rm", "-f", "-v", "-t", "0", *leftover, check=False)
        volumes = podman.run("volume", "ls", "-q", "--filter", label, check=False).stdout.split()
        for volume in {*volumes, *anonymous}:
            podman.run("volume", "rm", "-f", volume, check=False)
        podman.run("rmi", "-f", etcd_tag, prometheus_tag, check=False)
        assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
        assert not leftover, f"podman-compose down left containers: {leftover}"


def wait_for(what: str, check: Any, timeout: float, on_timeout: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            detail = on_timeout() if on_timeout else ""
            raise AssertionError(f"timed out ({timeout:g} s) waiting for {what}\n{detail}")
        time.sleep(0.5)


def test_compose_brings_up_etcd_three_replicas_and_prometheus_scraping_them(
    podman: Podman, compose_stack: dict[str, Any]
) -> None:
    compose = compose_stack["compose"]
    client = httpx.Client(timeout=10)

    def logs() -> str:
        done = compose("logs", timeout=60)
        return (done.stdout + done.stderr)[-6000:]

    try:
        for name, port in COMPOSE_REPLICAS.items():
            wait_for(
                f"{name} ready on :{port}",
                lambda port=port: client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200,
                90,
                logs,
            )

        schemes = [e["name"] for e in client.get("http://127.0.0.1:8001/v1/schemes").json()["schemes"]]
        for name in schemes:
            seen: list[str] = []
            for port in COMPOSE_REPLICAS.values():
                response = client.get(f"http://127.0.0.1:{port}/v1/ids/{name}", params={"count": 1000})
                assert response.status_code == 200, response.text
                seen += response.json()["ids"]
            assert len(set(seen)) == len(seen) == 3000, name
        backends = {
            client.get(f"http://127.0.0.1:{port}/readyz").json()["backend"]["backend"]
            for port in COMPOSE_REPLICAS.values()
        }
        assert backends == {"etcd"}, backends

        prometheus = compose_stack["prometheus"]

        def all_up() -> bool:
            response = client.get(f"{prometheus}/api/v1/targets")
            if response.status_code != 200:
                return False
            targets = [t for t in response.json()["data"]["activeTargets"] if t["labels"]["job"] == IDMINT_JOB]
            return len(targets) == 3 and all(t["health"] == "up" for t in targets)

        wait_for("Prometheus to scrape the three replicas", all_up, 60, logs)
        targets = client.get(f"{prometheus}/api/v1/targets").json()["data"]["activeTargets"]
        assert sorted(t["labels"]["instance"] for t in targets if t["labels"]["job"] == IDMINT_JOB) == sorted(
            f"127.0.0.1:{port}" for port in COMPOSE_REPLICAS.values()
        )
        rules = client.get(f"{prometheus}/api/v1/rules").json()["data"]["groups"]
        assert rules, "the alert rules of deploy/prometheus-rules.yml were not loaded"

        # docker-compose.yml's stop_grace_period is enough: every replica exits on SIGTERM (code 0).
        started = time.monotonic()
        stop = compose("stop", *COMPOSE_REPLICAS, timeout=120)
        assert stop.returncode == 0, stop.stdout[-3000:] + stop.stderr[-3000:]
        assert time.monotonic() - started < GRACE_S * len(COMPOSE_REPLICAS)
        for name in COMPOSE_REPLICAS:
            ids = podman.run(
                "ps",
                "-aq",
                "--filter",
                f"label=com.docker.compose.service={name}",
                "--filter",
                f"label=io.podman.compose.project={compose_stack['project']}",
            ).stdout.split()
            assert len(ids) == 1, (name, ids)
            info = json.loads(podman.run("container", "inspect", ids[0]).stdout)[0]
            state = info["State"]
            assert (state["Running"], state["ExitCode"]) == (False, 0), (name, state)
            # Started without waiting for etcd's healthcheck (podman < 4.6), it retried its claims: no crash loop.
            assert info.get("RestartCount", 0) == 0, (name, info.get("RestartCount"))
    finally:
        client.close()


# -- the compose stack on PostgreSQL ------------------------------------------------------------------------------

POSTGRES_COMPOSE_FILE = REPO / "docker-compose.postgres.yml"
POSTGRES_COMPOSE_OVERRIDE = REPO / "tests" / "ops" / "compose.postgres.podman.yml"
POSTGRES_IMAGE_FILES = REPO / "tests" / "ops" / "postgres-image"
POSTGRES_PORT = 5432  # docker-compose.postgres.yml's (listening on 127.0.0.1 with the override)
PORTS_WAIT_S = 120.0
"""A guard, not a budget: sockets the previous stack closed (TIME_WAIT, 60 s) keep its ports from binding."""


POSTGRES_IMAGE_REPOSITORY = "localhost/idmint-test-postgres"


def postgres_image(podman: Podman, base_image: str, workdir: Path) -> str:
    """PostgreSQL on the Debian base: Debian's postgresql package (no cluster made by its scripts) and the
    entrypoint in tests/ops/postgres-image/ (what the postgres image's does with POSTGRES_*). Kept between runs as
    the base image is, under a tag naming its recipe (the Containerfile, the entrypoint and the base image's own
    tag): built once per recipe, one builder at a time; images of other recipes are removed. Returns its tag."""
    entrypoint = (POSTGRES_IMAGE_FILES / "entrypoint.sh").read_bytes()
    recipe = (
        f"FROM {base_image}\n"
        f"RUN printf 'deb {apt_mirror()} {SUITE} main\\n' > /etc/apt/sources.list \\\n"
        " && mkdir -p /etc/postgresql-common \\\n"
        " && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \\\n"
        " && printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \\\n"
        " && apt-get update \\\n"
        " && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql \\\n"
        " && rm -rf /var/lib/apt/lists/*\n"
        "COPY entrypoint.sh /usr/local/bin/postgres-entrypoint\n"
        "RUN chmod 755 /usr/local/bin/postgres-entrypoint\n"
        'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]\n'
    )
    tag = f"{POSTGRES_IMAGE_REPOSITORY}:{hashlib.sha256(recipe.encode() + entrypoint).hexdigest()[:16]}"
    with open(podman.root / "postgres-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not podman.image_exists(tag):
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / "entrypoint.sh").write_bytes(entrypoint)
            (workdir / "Containerfile").write_text(recipe)
            build_image(podman, tag, workdir, dockerfile=workdir / "Containerfile")
        for other in podman.run(
            "images",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "--filter",
            f"reference={POSTGRES_IMAGE_REPOSITORY}",
            check=False,
        ).stdout.split():
            if other != tag:
                podman.run("rmi", other, check=False)
    return tag


@pytest.fixture
def postgres_compose_stack(
    podman: Podman, base_image: str, idmint_image: Image, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """docker-compose.postgres.yml + tests/ops/compose.postgres.podman.yml brought up with podman-compose
    (PostgreSQL, three replicas), torn down with ``down -v`` (the PostgreSQL image is kept: :func:`postgres_image`)."""
    project = f"idmint-test-pg-{SESSION}"
    postgres_tag = postgres_image(podman, base_image, tmp_path / "postgres-image")
    env = {**podman.env, "IDMINT_TEST_IMAGE": idmint_image.tag, "IDMINT_TEST_POSTGRES_IMAGE": postgres_tag}
    base = [podman_compose(), "--project-name", project, "-f", str(POSTGRES_COMPOSE_FILE)]
    base += ["-f", str(POSTGRES_COMPOSE_OVERRIDE)]

    def compose(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
        )

    with open(podman.root / "compose.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compose stack at a time on this machine (its ports are fixed)
        # The etcd stack's replicas held the same ports a moment ago: wait out their closing connections.
        deadline = time.monotonic() + PORTS_WAIT_S
        while busy := [port for port in (POSTGRES_PORT, *COMPOSE_REPLICAS.values()) if not port_free(port)]:
            if time.monotonic() > deadline:
                pytest.fail(f"ports needed by the compose stack are in use on 127.0.0.1: {busy}", pytrace=False)
            time.sleep(0.5)
        try:
            up = compose("up", "-d", "postgres", *COMPOSE_REPLICAS)
            assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
            yield {"compose": compose, "project": project, "log": tmp_path / "compose.log"}
        finally:
            label = f"label=io.podman.compose.project={project}"
            down = compose("down", "-v", "-t", str(GRACE_S))
            leftover = podman.run("ps", "-aq", "--filter", label, check=False).stdout.split()
            if leftover:
                podman.run("rm", "-f", "-v", "-t", "0", *leftover, check=False)
            for volume in podman.run("volume", "ls", "-q", "--filter", label, check=False).stdout.split():
                podman.run("volume", "rm", "-f", volume, check=False)
            assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
            assert not leftover, f"podman-compose down left containers: {leftover}"


def test_compose_on_postgres_brings_up_three_replicas_that_never_repeat_an_id(
    postgres_compose_stack: dict[str, Any],
) -> None:
    compose = postgres_compose_stack["compose"]

    def logs() -> str:
        done = compose("logs", timeout=60)
        postgres_compose_stack["log"].write_text(done.stdout + done.stderr)  # whole, beside the test's tmp_path
        return (done.stdout + done.stderr)[-6000:]

    with httpx.Client(timeout=10) as client:
        for name, port in COMPOSE_REPLICAS.items():  # a fresh fleet waits one TTL (10 s): the lost-row rule
            wait_for(
                f"{name} ready on :{port}",
                lambda port=port: client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200,
                120,
                logs,
            )
        for port in COMPOSE_REPLICAS.values():
            assert client.get(f"http://127.0.0.1:{port}/v1/fleet").json()["backend"] == "postgres"
            backend = client.get(f"http://127.0.0.1:{port}/readyz").json()["backend"]
            assert backend["database"] == "postgresql://idmint@postgres:5432/idmint", backend
        held: dict[str, list[int]] = {}
        for port in COMPOSE_REPLICAS.values():
            for entry in client.get(f"http://127.0.0.1:{port}/v1/schemes").json()["schemes"]:
                held.setdefault(entry["name"], []).extend(entry["node"].get("identities", []))
        for name in ("eight-byte", "snowflake", "hlc-ulid", "siq", "muid"):
            assert len(held[name]) == len(set(held[name])) == 3, (name, held[name])
            seen: list[str] = []
            for port in COMPOSE_REPLICAS.values():
                response = client.get(f"http://127.0.0.1:{port}/v1/ids/{name}", params={"count": 1000})
                assert response.status_code == 200, (port, response.text, logs())
                seen += response.json()["ids"]
            assert len(set(seen)) == len(seen) == 3000, name
        assert "postgresql://idmint:" not in logs()  # the URL carries no password, and none is printed
