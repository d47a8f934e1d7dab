"""Sequence storage: the interface, its rules and its test double (:mod:`~app.sequences.store.base`), the
state-directory store (:mod:`~app.sequences.store.embedded`) and the etcd store (:mod:`~app.sequences.store.etcd`),
chosen by :func:`make_store` from the same settings as :func:`app.lease.make_backend`."""

from __future__ import annotations

from app.sequences.store.base import SequenceStore
from app.settings import Settings

__all__ = ["SequenceStore", "make_store"]


def make_store(settings: Settings) -> SequenceStore:
    """The etcd store when ``settings.etcd_endpoints`` is set, else the embedded one (state directory)."""
    if settings.etcd_endpoints:
        from app.sequences.store.etcd import EtcdSequenceStore

        return EtcdSequenceStore(settings)
    from app.sequences.store.embedded import EmbeddedSequenceStore

    return EmbeddedSequenceStore(settings.state_dir, settings.max_sequences)
