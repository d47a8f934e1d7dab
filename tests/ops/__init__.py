"""Operations tests: real Prometheus, promtool, hadolint, docker-compose and kubernetes-validate (see
.ci/install-debian-packages.sh) against real idmint servers and the files in deploy/."""
