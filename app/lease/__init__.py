"""Lease backends: where node identities come from. See :mod:`app.lease.base` for the interface."""

from __future__ import annotations

from app.lease.base import Claim, LeaseBackend, Owner
from app.metrics import Metrics
from app.pool import IdentityPool
from app.settings import Settings

__all__ = ["Claim", "Owner", "IdentityPool", "LeaseBackend", "make_backend"]


def make_backend(settings: Settings, metrics: Metrics | None = None) -> LeaseBackend:
    """etcd when ``settings.etcd_endpoints`` is set, else the embedded file-lock backend."""
    if settings.etcd_endpoints:
        from app.lease.etcd import EtcdBackend

        return EtcdBackend(settings, metrics)
    from app.lease.embedded import EmbeddedBackend

    return EmbeddedBackend(settings.state_dir)
