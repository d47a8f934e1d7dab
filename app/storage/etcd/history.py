"""What the etcd store is now, for :class:`~app.storage.history.HistoryGuard`: the cluster ID of every response's
header (``etcdutl snapshot restore`` makes a new cluster, with a new ID, unless given the old cluster's name,
token and peer URLs exactly) and the store revision (only grows while the cluster keeps its history: a restored
snapshot starts at the snapshot's revision, below what nodes saw after it was taken)."""

from __future__ import annotations

from app.errors import BackendUnavailableError
from app.storage.etcd import keys
from app.storage.etcd.calls import Calls
from app.storage.etcd.client import b64
from app.storage.history import HISTORY_RECORD
from app.storage.lease import Facts


async def read_facts(calls: Calls, namespace: str) -> Facts:
    """The facts now (one range request of the history record, keys only: its header carries both). Raises
    NotReadyError when etcd cannot be used now."""
    key = keys.record_key(namespace, HISTORY_RECORD).encode()
    async with calls.bounded("reading the storage's history") as client:
        data = await client.call("/v3/kv/range", {"key": b64(key), "keys_only": True})
    header = data.get("header", {})
    try:
        cluster_id = str(int(header["cluster_id"]))
        revision = int(header["revision"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendUnavailableError(f"etcd answered without a cluster ID and revision: {exc!r}") from exc
    return Facts({"cluster_id": cluster_id}, revision, "revision")
