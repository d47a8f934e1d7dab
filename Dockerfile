# idmint container image: one `idmint serve` process per container (scale with replicas, not workers).
#
#   docker build -t idmint:local .
#   docker run --rm -p 8000:8000 -e IDMINT_ETCD_ENDPOINTS=http://etcd:2379 idmint:local
#
# Settings are IDMINT_* environment variables (app/settings.py; docs/settings.md, docs/operations.md). The ones that matter
# most in a container:
#   IDMINT_HOST / IDMINT_PORT   bind address and port (image default 0.0.0.0:8000)
#   IDMINT_WORKERS              uvicorn worker processes (image default 1; >1 switches Prometheus multiprocess mode)
#   IDMINT_ETCD_ENDPOINTS       comma-separated etcd URLs; unset = embedded backend in IDMINT_STATE_DIR (one host)
#   IDMINT_POSTGRES_URL         PostgreSQL instead of etcd (a libpq URI; a secret: never printed; docs/storage.md)
#   IDMINT_ETCD_NAMESPACE, IDMINT_LEASE_TTL, IDMINT_LEASE_SAFETY_MARGIN, IDMINT_CLUSTER_ID
#   IDMINT_ETCD_USER / IDMINT_ETCD_PASSWORD, IDMINT_ETCD_CA_CERT / _CERT_CERT / _CERT_KEY   etcd auth and TLS
#   IDMINT_EIGHT_BYTE_GENERATORS  generator IDs per replica (each caps at 64 IDs/ms)
#   IDMINT_MAX_CLOCK_WAIT       seconds to wait for the clock to pass a claimed high-water mark
#   IDMINT_LOG_FORMAT=text|json, IDMINT_LOG_LEVEL, IDMINT_ACCESS_LOG=true|false (default false)
#   IDMINT_STATE_DIR            embedded backend state (image default /var/lib/idmint)
# Lint: hadolint Dockerfile. tests/ops/test_podman.py builds this file with podman (--format docker) on a Debian
# base passed as PYTHON_IMAGE and runs the image: see the README, "Container, compose and Kubernetes".

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/idmint
# Dependencies in their own layer: exactly the pins of requirements.lock, each file checked against its SHA-256
# (scripts/lock.sh makes the lock from pyproject.toml), so the image runs what CI tested; rebuilt only when the lock
# changes.
COPY requirements.lock ./
RUN /opt/idmint/bin/pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock
# The application itself (changes often, installs in seconds, no dependency resolution).
COPY pyproject.toml README.md ./
COPY app ./app
RUN /opt/idmint/bin/pip install --no-cache-dir --no-deps .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="idmint" \
      org.opencontainers.image.description="ID-issuing service: Muid, eight-byte, HLC-ULID, SIQ and Wiji IDs over HTTP" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 idmint \
    && useradd --system --uid 10001 --gid idmint --home-dir /var/lib/idmint --create-home \
        --shell /usr/sbin/nologin idmint
COPY --from=build /opt/idmint /opt/idmint
ENV PATH=/opt/idmint/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    IDMINT_HOST=0.0.0.0 \
    IDMINT_PORT=8000 \
    IDMINT_WORKERS=1 \
    IDMINT_STATE_DIR=/var/lib/idmint \
    IDMINT_LOG_FORMAT=json \
    IDMINT_ACCESS_LOG=false
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /var/lib/idmint
# The state directory (embedded backend: identity locks and high-water marks) outlives the container: mount a volume
# there so a restarted container resumes above its marks. The rest of the filesystem can be read-only.
VOLUME ["/var/lib/idmint"]
EXPOSE 8000
# Liveness only (/healthz); readiness (/readyz, 503 while a scheme holds no identity) is for the load balancer.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('IDMINT_PORT', '8000'), timeout=2)"]
CMD ["idmint", "serve"]
