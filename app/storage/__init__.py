"""Storage: every backend idmint keeps state in, one folder each, behind one interface family.

* :mod:`app.storage.lease` -- claims of node identities (:class:`~app.storage.lease.LeaseBackend`), their
  high-water marks, the fleet ID and member tokens; :mod:`app.storage.draw` -- the identity draw every backend uses;
* :mod:`app.storage.sequences` -- sequence records and their store (:class:`~app.storage.sequences.SequenceStore`);
* :mod:`app.storage.embedded` -- one machine: file locks and files under the state directory;
* :mod:`app.storage.etcd` -- any number of replicas: etcd's v3 JSON gateway (its client included).
"""

from __future__ import annotations

from app.metrics import Metrics
from app.settings import Settings
from app.storage.lease import LeaseBackend
from app.storage.sequences import SequenceStore

__all__ = ["make_backend", "make_store"]


def make_backend(settings: Settings, metrics: Metrics | None = None) -> LeaseBackend:
    """etcd when ``settings.etcd_endpoints`` is set, else the embedded file-lock backend."""
    if settings.etcd_endpoints:
        from app.storage.etcd import EtcdBackend

        return EtcdBackend(settings, metrics)
    from app.storage.embedded.lease import EmbeddedBackend

    return EmbeddedBackend(settings.state_dir)


def make_store(settings: Settings) -> SequenceStore:
    """The etcd store when ``settings.etcd_endpoints`` is set, else the embedded one (state directory)."""
    if settings.etcd_endpoints:
        from app.storage.etcd.sequences import EtcdSequenceStore

        return EtcdSequenceStore(settings)
    from app.storage.embedded.sequences import EmbeddedSequenceStore

    return EmbeddedSequenceStore(settings.state_dir, settings.max_sequences)
