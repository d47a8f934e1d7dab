"""etcd's v3 JSON gateway over httpx, shared by the lease layer (:mod:`app.lease.etcd`) and the etcd sequence
store (:mod:`app.sequences.store.etcd`): :mod:`~app.etcd.client` (the client, transaction pieces, the one table
from etcd's error codes to ours) and :mod:`~app.etcd.calls` (one call bounded in time, its errors mapped)."""
