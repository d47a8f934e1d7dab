"""pytest plugin: real podman for tests/ops -- the project's Dockerfile built and its image run, compose brought up.

No Docker engine and no container registry are reachable here, so:

* podman is pointed at test-owned configuration through ``CONTAINERS_CONF`` and ``CONTAINERS_STORAGE_CONF`` (files
  written under the cache dir; the machine's /etc/containers is never read for these settings nor edited):
  ``runtime = "runc"`` (crun refuses hybrid cgroup hosts), ``default_ulimits = []`` (the sandbox forbids raising
  rlimits), cgroupfs (no systemd), and image storage under the cache dir.
* The base image is made here: ``debootstrap --variant=minbase`` of Debian ``bookworm`` (python3, venv,
  ca-certificates) from the mirror apt uses on this machine, plus the host's CA bundle and the pip settings that
  decide how pip reaches the package index (index URLs, proxy, certificate), imported with ``podman import``. It is
  cached between runs under a tag derived from its recipe (``localhost/idmint-test-base:<key>``); the project image
  is rebuilt every session and removed afterwards.
* Containers use ``--network host`` and bind 127.0.0.1 (test traffic only ever goes to loopback).

Cache dir: ``$IDMINT_TEST_CACHE`` or ``$XDG_CACHE_HOME/idmint-tests`` (default ``~/.cache/idmint-tests``), then
``podman/``. Delete it to start cold.

Fixtures:

* ``podman`` (session): a :class:`Podman` (``podman.run(*args)``; ``podman.env`` for other tools such as
  podman-compose).
* ``base_image`` (session): the tag of the cached Debian base image.
* ``idmint_image`` (session): an :class:`Image` built from the repository's Dockerfile (``--format docker`` so the
  HEALTHCHECK is kept, ``PYTHON_IMAGE`` = the base image), removed at the end of the session.
* ``containers`` (function): a :class:`ContainerFactory`; every container and volume it made is removed after the
  test, whatever happened.

Every container made here carries the label ``idmint-test-session=<token>``; at interpreter exit any that is left
is removed with ``podman rm -f`` (a last resort when a fixture could not run).
"""

from __future__ import annotations

import atexit
import configparser
import fcntl
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import cache as support_cache
from tests.support.server import free_port

REPO = Path(__file__).resolve().parents[2]
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_RECIPE_VERSION = "1"  # bump when the way the base image is made changes
SESSION_LABEL = "idmint-test-session"
SESSION = secrets.token_hex(4)
STATE_DIR = "/var/lib/idmint"  # the image's IDMINT_STATE_DIR
INSTALL_HINT = "run .ci/install-debian-packages.sh (podman, runc, debootstrap)"
PIP_NETWORK_KEYS = (
    "index-url",
    "extra-index-url",
    "trusted-host",
    "proxy",
    "cert",
    "client-cert",
    "timeout",
    "default-timeout",
    "retries",
)
PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")

REPORT: dict[str, str] = {}
"""Figures shown in the terminal summary (base image reuse, project build time, image size)."""


def cache_dir() -> Path:
    return support_cache.cache_dir("podman")


def find_binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        pytest.fail(f"{name} is not installed: {INSTALL_HINT}", pytrace=False)
    return found


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` in one step (other test sessions may be reading it)."""
    scratch = path.with_name(f".{path.name}.{SESSION}")
    scratch.write_text(text)
    scratch.replace(path)


class Podman:
    """The podman CLI with this test suite's own containers.conf and storage.conf."""

    def __init__(self, root: Path) -> None:
        self.binary = find_binary("podman")
        find_binary("runc")
        self.root = root
        conf = root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        self.containers_conf = conf / "containers.conf"
        self.storage_conf = conf / "storage.conf"
        _write_atomically(
            self.containers_conf,
            (
                "# Written by tests/support/podman.py for the test suite's podman (CONTAINERS_CONF).\n"
                "[containers]\n"
                "default_ulimits = []\n"
                "[engine]\n"
                'runtime = "runc"\n'
                'cgroup_manager = "cgroupfs"\n'
                'events_logger = "file"\n'
            ),
        )
        _write_atomically(
            self.storage_conf,
            (
                "# Written by tests/support/podman.py for the test suite's podman (CONTAINERS_STORAGE_CONF).\n"
                "[storage]\n"
                'driver = "overlay"\n'
                f'graphroot = "{root / "storage"}"\n'
                f'runroot = "{root / "run"}"\n'
            ),
        )
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
        }

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 120,
        input_bytes: bytes | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``podman ARGS``; raises with podman's output when ``check`` and it fails."""
        done = subprocess.run(
            [self.binary, *args],
            env=self.env,
            capture_output=True,
            timeout=timeout,
            input=input_bytes,
            cwd=cwd,
            check=False,
        )
        result = subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"podman {' '.join(args[:3])} ... failed ({result.returncode}):\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result

    def image_exists(self, tag: str) -> bool:
        return self.run("image", "exists", tag, check=False).returncode == 0

    def image_size(self, tag: str) -> int:
        return int(self.run("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())

    def remove_session_leftovers(self) -> None:
        """Remove every container of this test session (``podman rm -f``), then its volumes."""
        label = f"label={SESSION_LABEL}={SESSION}"
        ids = self.run("ps", "-aq", "--filter", label, check=False).stdout.split()
        if ids:
            self.run("rm", "-f", "-v", "-t", "0", *ids, check=False)
        vols = self.run("volume", "ls", "-q", "--filter", label, check=False).stdout.split()
        if vols:
            self.run("volume", "rm", "-f", *vols, check=False)


# -- base image ------------------------------------------------------------------------------------------------


def apt_mirror(suite: str = SUITE) -> str:
    """The Debian archive URI apt uses on this machine for ``suite`` (sources.list or deb822 .sources)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                entries = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, flags=re.MULTILINE))
                if suite in entries.get("Suites", "").split() and "deb" in entries.get("Types", "").split():
                    return entries["URIs"].split()[0]
        else:
            for line in text.splitlines():
                parts = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
                if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
                    return parts[1]
    return DEFAULT_MIRROR


def host_pip_settings() -> dict[str, str]:
    """The pip settings that decide how pip reaches the package index here (``pip config list``: files and PIP_*
    environment), without local-path sources (file:// indexes, find-links, constraints) that only exist here."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
    )
    settings: dict[str, str] = {}
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"[\w:]+\.([\w-]+)='(.*)'", line.strip())
        if match is None or match.group(1) not in PIP_NETWORK_KEYS:
            continue
        key, value = match.groups()
        key = "timeout" if key == "default-timeout" else key
        if key in ("index-url", "extra-index-url"):
            value = " ".join(url for url in value.split() if url.startswith(("http://", "https://")))
            if not value:
                continue
        settings[key] = value
    return settings


def host_ca_bundle() -> Path:
    for candidate in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    pytest.fail("no CA bundle found (SSL_CERT_FILE, /etc/ssl/certs/ca-certificates.crt)", pytrace=False)


@dataclass(frozen=True)
class BaseRecipe:
    """Everything the base image is made from; its hash is the cache key."""

    suite: str
    packages: tuple[str, ...]
    mirror: str
    pip_conf: str
    files: dict[str, bytes]  # path in the image -> content (CA bundle, pip certificate)
    env: dict[str, str]  # image ENV (proxy variables)

    @classmethod
    def from_host(cls) -> BaseRecipe:
        pip = host_pip_settings()
        files = {"/etc/ssl/certs/ca-certificates.crt": host_ca_bundle().read_bytes()}
        for key in ("cert", "client-cert"):
            if key in pip and Path(pip[key]).is_file():
                files[pip[key]] = Path(pip[key]).read_bytes()
        parser = configparser.ConfigParser(interpolation=None)
        parser["global"] = {**pip, "disable-pip-version-check": "true"}
        out = io.StringIO()
        parser.write(out)
        env = {name: os.environ[name] for name in PROXY_VARIABLES if os.environ.get(name)}
        return cls(SUITE, BASE_PACKAGES, apt_mirror(), out.getvalue(), files, env)

    @property
    def key(self) -> str:
        digest = hashlib.sha256()
        digest.update(
            json.dumps(
                [
                    BASE_RECIPE_VERSION,
                    self.suite,
                    sorted(self.packages),
                    self.mirror,
                    self.pip_conf,
                    sorted(self.env.items()),
                ]
            ).encode()
        )
        for path, content in sorted(self.files.items()):
            digest.update(path.encode() + b"\0" + hashlib.sha256(content).digest())
        return digest.hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"localhost/idmint-test-base:{self.suite}-{self.key}"


def build_base_image(podman: Podman, recipe: BaseRecipe) -> None:
    """debootstrap the recipe's Debian into a scratch dir, add its files, ``podman import`` it as ``recipe.tag``."""
    debootstrap = find_binary("debootstrap")
    scratch = podman.root / f"debootstrap-{SESSION}"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        done = subprocess.run(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(scratch),
                recipe.mirror,
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*"):
            for path in scratch.glob(pattern):
                path.unlink()
        for image_path, content in recipe.files.items():
            target = scratch / image_path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        (scratch / "etc" / "pip.conf").write_text(recipe.pip_conf)
        changes = ["--change", 'CMD ["python3"]']
        for name, value in recipe.env.items():
            changes += ["--change", f"ENV {name}={value}"]
        tar = subprocess.Popen(["tar", "-C", str(scratch), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            imported = subprocess.run(
                [podman.binary, "import", *changes, "-", recipe.tag],
                stdin=tar.stdout,
                env=podman.env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise RuntimeError(f"podman import failed: {imported.stderr[-3000:]}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # Base images of earlier recipes are no longer used.
    for line in podman.run(
        "images",
        "--format",
        "{{.Repository}}:{{.Tag}}",
        "--filter",
        "reference=localhost/idmint-test-base",
        check=False,
    ).stdout.split():
        if line != recipe.tag:
            podman.run("rmi", line, check=False)


def ensure_base_image(podman: Podman) -> str:
    """The cached base image's tag, built first when missing (one builder at a time: a lock file)."""
    recipe = BaseRecipe.from_host()
    with open(podman.root / "base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if podman.image_exists(recipe.tag):
            REPORT["base image"] = f"{recipe.tag} (cached)"
        else:
            started = time.monotonic()
            build_base_image(podman, recipe)
            REPORT["base image"] = f"{recipe.tag} (built in {time.monotonic() - started:.0f} s)"
    return recipe.tag


# -- project image ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    tag: str
    size: int  # bytes, as ``podman image inspect`` reports it
    build_seconds: float


def build_image(
    podman: Podman,
    tag: str,
    context: Path,
    *,
    dockerfile: Path | None = None,
    build_args: dict[str, str] | None = None,
    timeout: float = 900,
) -> None:
    """``podman build --format docker`` with no layer cache (``--layers=false``), nothing pulled, host network."""
    args = ["build", "--format", "docker", "--layers=false", "--pull=never", "--network", "host", "-t", tag]
    if dockerfile is not None:
        args += ["-f", str(dockerfile)]
    for name, value in (build_args or {}).items():
        args += ["--build-arg", f"{name}={value}"]
    podman.run(*args, str(context), timeout=timeout)


# -- containers ------------------------------------------------------------------------------------------------


@dataclass
class Container:
    """A container started by :class:`ContainerFactory`; idmint's HTTP API on 127.0.0.1:``port``."""

    podman: Podman
    name: str
    port: int
    client: httpx.Client = field(repr=False, default_factory=lambda: httpx.Client(timeout=30))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.client.get(f"{self.base_url}{path}", params=params)

    def logs(self) -> str:
        done = self.podman.run("logs", self.name, check=False)
        return done.stdout + done.stderr

    def inspect(self) -> dict[str, Any]:
        return dict(json.loads(self.podman.run("container", "inspect", self.name).stdout)[0])

    def running(self) -> bool:
        return bool(self.inspect()["State"]["Running"])

    def exec(self, *command: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in the container as the image's user."""
        return self.podman.run("exec", self.name, *command, check=check)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until /readyz answers 200; fails with the container's log when it exits or the time is up."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if not self.running():
                raise AssertionError(f"container {self.name} exited:\n{self.logs()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"container {self.name} not ready within {timeout:g} s:\n{self.logs()[-4000:]}")
            time.sleep(0.2)

    def stop(self, grace_seconds: int) -> float:
        """``podman stop -t grace`` (SIGTERM, SIGKILL after the grace period); returns the seconds it took."""
        started = time.monotonic()
        self.podman.run("stop", "-t", str(grace_seconds), self.name, timeout=grace_seconds + 60)
        return time.monotonic() - started


class ContainerFactory:
    """Starts containers of an image (``--network host``, idmint bound to 127.0.0.1 on a free port) and volumes;
    :meth:`cleanup` removes all of them."""

    def __init__(self, podman: Podman, image: str) -> None:
        self.podman = podman
        self.image = image
        self.containers: list[Container] = []
        self.volumes: list[str] = []

    def volume(self) -> str:
        name = f"idmint-test-{SESSION}-{secrets.token_hex(3)}"
        self.podman.run("volume", "create", "--label", f"{SESSION_LABEL}={SESSION}", name)
        self.volumes.append(name)
        return name

    def start(
        self,
        *,
        env: dict[str, str] | None = None,
        port: int | None = None,
        image: str | None = None,
        args: tuple[str, ...] = (),
        command: tuple[str, ...] = (),
        ready: bool = True,
    ) -> Container:
        port = port or free_port()
        name = f"idmint-test-{SESSION}-{secrets.token_hex(3)}"
        env_args: list[str] = []
        for key, value in {"IDMINT_HOST": "127.0.0.1", "IDMINT_PORT": str(port), **(env or {})}.items():
            env_args += ["-e", f"{key}={value}"]
        container = Container(self.podman, name, port)
        self.containers.append(container)
        self.podman.run(
            "run",
            "-d",
            "--name",
            name,
            "--label",
            f"{SESSION_LABEL}={SESSION}",
            "--network",
            "host",
            *env_args,
            *args,
            image or self.image,
            *command,
        )
        if ready:
            container.wait_ready()
        return container

    def cleanup(self) -> None:
        for container in self.containers:
            container.client.close()
            self.podman.run("rm", "-f", "-v", "-t", "0", container.name, check=False)
        for volume in self.volumes:
            self.podman.run("volume", "rm", "-f", volume, check=False)


_PODMAN: list[Podman] = []


@atexit.register
def _remove_leftovers() -> None:
    for podman in _PODMAN:
        podman.remove_session_leftovers()


# -- fixtures --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def podman() -> Podman:
    instance = Podman(cache_dir())
    _PODMAN.append(instance)
    return instance


@pytest.fixture(scope="session")
def base_image(podman: Podman) -> str:
    return ensure_base_image(podman)


@pytest.fixture(scope="session")
def idmint_image(podman: Podman, base_image: str) -> Iterator[Image]:
    tag = f"localhost/idmint-test:{SESSION}"
    started = time.monotonic()
    try:
        build_image(podman, tag, REPO, build_args={"PYTHON_IMAGE": base_image})
        image = Image(tag, podman.image_size(tag), time.monotonic() - started)
        REPORT["idmint image"] = (
            f"{tag}: built in {image.build_seconds:.0f} s, "
            f"{image.size / 1e6:.0f} MB ({image.size} bytes, podman image inspect)"
        )
        yield image
    finally:
        podman.remove_session_leftovers()
        podman.run("rmi", "-f", tag, check=False)


@pytest.fixture
def containers(podman: Podman, idmint_image: Image) -> Iterator[ContainerFactory]:
    factory = ContainerFactory(podman, idmint_image.tag)
    try:
        yield factory
    finally:
        factory.cleanup()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if REPORT:
        terminalreporter.section("container images (tests/support/podman.py)")
        for name, text in REPORT.items():
            terminalreporter.write_line(f"{name}: {text}")
