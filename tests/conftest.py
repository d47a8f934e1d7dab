"""Shared fixtures. Plugins under tests/support start the real parts tests need (etcd, Prometheus, browsers)."""

pytest_plugins = ["tests.support.etcd", "tests.support.prometheus", "tests.support.podman"]
