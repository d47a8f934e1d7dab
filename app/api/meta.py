"""Scheme catalogue, health, readiness and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.access import declare
from app.api.deps import NodeDep, SettingsDep
from app.errors import InvalidOptionError
from app.issuing.fleet import FLEET_HEADER
from app.schemes._patterns import max_lengths, rising_per_identity, token_patterns
from app.schemes.base import Scheme, SchemeOption
from app.times import rfc3339

if TYPE_CHECKING:
    from app.issuing.node import Node

router = APIRouter(tags=["node"])

MEMBER_LOOKUP_TIMEOUT_S = 1.0
"""How long ``/v1/fleet/members/{token}`` waits for the backend."""


def _options(options: tuple[SchemeOption, ...]) -> dict[str, Any]:
    return {
        o.name: {"description": o.description, **({"choices": list(o.choices)} if o.choices else {})} for o in options
    }


UNIT_NAMES = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us"), (1, "ns"))
"""Named time units, ns each, largest first."""


def timestamp_precision(unit_ns: float) -> str:
    """A scheme's time unit (its ``native_unit_ns``) as ``/v1/schemes`` names it: ``s``, ``ms`` or ``us``, a
    multiple of one (``10 ms``: the sonyflake layout) or a fraction of a second (``1/65536 s``: SIQ)."""
    for size, name in UNIT_NAMES:
        if unit_ns >= size and unit_ns % size == 0:
            count = int(unit_ns // size)
            return name if count == 1 else f"{count} {name}"
    per_second = UNIT_NAMES[0][0] / unit_ns
    return f"1/{per_second:.0f} s" if per_second.is_integer() else f"{unit_ns:g} ns"


def bounds_entry(scheme: Scheme) -> dict[str, Any]:
    """What ``GET /v1/bounds/{scheme}`` takes: the parameters of the reading that sorts by time (``params``), the
    scheme's own parameters a user may set (``options``: name -> description), the column types (``storages``, the
    first the default) and the answer's ``note``; or empty storages and the ``refused`` reason when the scheme's IDs
    do not sort by time."""
    try:
        order = scheme.time_order(scheme.time_order_options)
    except InvalidOptionError as exc:
        return {"params": {}, "options": {}, "storages": [], "refused": str(exc)}
    described = {o.name: o.description for o in (*scheme.options, *scheme.decode_options)}
    takes = {name: described.get(name, "") for name in scheme.time_order_takes if name not in scheme.time_order_options}
    return {
        "params": dict(scheme.time_order_options),
        "options": takes,
        "storages": list(order.storages),
        "note": order.note,
    }


def scheme_entry(scheme: Scheme, settings: Any) -> dict[str, Any]:
    """What ``/v1/schemes`` says about ``scheme`` on any node: layout, forms, options, and what the decode page
    shows (title, example, field captions)."""
    entry: dict[str, Any] = {
        "name": scheme.name,
        "title": scheme.title,
        "example": scheme.example,
        "bits": scheme.packed_bytes * 8,
        "packed_bytes": scheme.packed_bytes,
        "layout": [{"name": f.name, "bits": f.bits, "description": f.description} for f in scheme.layout],
        "captions": dict(scheme.captions),
        "formats": list(scheme.formats),
        "canonical_format": scheme.formats[0],
        "rising": {form: {k: list(v) for k, v in needs.items()} for form, needs in scheme.rising_formats.items()},
        "token_patterns": token_patterns(scheme.name),
        "rising_per_identity": rising_per_identity(scheme),
        "max_lengths": max_lengths(scheme.name),
        "timestamp_precision": timestamp_precision(scheme.native_unit_ns),
        "id_space_end": rfc3339(scheme.id_space_end_ns(), 3),
        "reference": scheme.reference,
        "limits": {"max_count": settings.max_count, "max_stream_count": settings.max_stream_count},
    }
    if scheme.options:
        entry["options"] = _options(scheme.options)
    if scheme.decode_options:
        entry["decode_options"] = _options(scheme.decode_options)
    if scheme.shares_generator_with:
        entry["shares_generator_with"] = scheme.shares_generator_with
    if scheme.public_split is not None:  # format=public is served (docs/public-ids.md)
        entry["public"] = settings.public_id_keys_file is not None
    entry["uniqueness"] = {
        "rests_on": "leased identity" if scheme.uniqueness == "identity" else "random bits",
        "sliced_by_region": scheme.uniqueness == "identity",
        "note": scheme.uniqueness_note,
    }
    pool = None if scheme.shares_generator_with else scheme.identity_pool(settings)
    if pool is not None:
        first, last = pool.slice
        entry["identity"] = {
            "kind": pool.kind,
            "minimum": pool.space[0],
            "maximum": pool.space[1],
            "region": settings.region if pool.sliced else None,
            "regions": settings.regions if pool.sliced else None,
            "slice": [first, last],
            "size": last - first + 1,
        }
    entry["bounds"] = bounds_entry(scheme)
    extra = dict(scheme.describe(settings))
    entry["limits"].update(extra.pop("limits", {}))
    entry.update(extra)
    return entry


async def scheme_catalogue(node: Node, settings: Any) -> list[dict[str, Any]]:
    """Every scheme of the node (as configured), with this node's state for it ("node") and, for a leased
    identity, how many identities of the region's slice the fleet holds now ("held"; null when the backend cannot
    tell within :data:`~app.issuing.node.HELD_COUNT_TIMEOUT_S`)."""
    out = []
    held = await node.held_counts()
    for name, scheme in node.schemes.items():
        entry = scheme_entry(scheme, settings)
        issuer = node.issuers.get(name)
        if issuer is not None:
            entry["node"] = {**issuer.describe(), **scheme.node_info(settings, issuer.generator)}
        if "identity" in entry:
            entry["identity"]["held"] = held.get(name)
        out.append(entry)
    return out


@router.get("/v1/schemes")
async def list_schemes(node: NodeDep, settings: SettingsDep) -> dict[str, Any]:
    """Each scheme's bit layout, text forms, options, limits, the decode page's titles, examples and field
    captions, what its uniqueness rests on, and this node's identity for it (with its region's slice)."""
    return {"schemes": await scheme_catalogue(node, settings), "backend": node.storage.status()}


@router.get("/v1/fleet")
async def fleet(node: NodeDep, request: Request) -> dict[str, Any]:
    """This node's fleet: ``{"fleet_id", "region", "regions", "backend", "schemes": {name: {"kind", "slice",
    "pool", "group", "group_in_id"}}}`` for each scheme whose uniqueness rests on a leased identity. Other fleets'
    nodes (``IDMINT_PEER_FLEETS``) and the Python client compare it with their own; ``fleet_id`` is null while the
    backend has not told it (etcd unreachable since start)."""
    node.fleet.poke(request.headers.get(FLEET_HEADER))
    return node.fleet.document()  # the fleet ID is read by the guard's task, never on a request's time


@router.get("/v1/fleet/members/{token}")
async def fleet_member(token: str, node: NodeDep) -> dict[str, Any]:
    """Whether ``token`` (another server's ``/v1/fleet`` ``member``) is live in this node's lease backend:
    ``{"member": token, "live": true|false|null}`` (null: the backend cannot tell now). Two servers showing one
    fleet ID are one fleet only when each confirms the other; a copied state directory or a restored etcd snapshot
    carries the fleet ID but not the members."""
    token = token[:64]
    live = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(MEMBER_LOOKUP_TIMEOUT_S):
            live = await node.backend.has_member(token)
    return {"member": token, "live": live}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive (says nothing about leases: see /readyz)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "some scheme cannot issue; the body says why"}})
async def readyz(node: NodeDep, request: Request) -> Response:
    """200 only when every scheme can issue right now; otherwise 503 naming why, per scheme (``"status":
    "draining"`` once ``POST /v1/admin/drain`` began)."""
    ready, detail = node.readiness()
    status = "ready" if ready else "not ready"
    drain = getattr(request.app.state, "drain", None)
    if drain is not None and drain.draining:
        ready, status = False, "draining"
    body = {"status": status, "schemes": detail, "backend": node.storage.status()}
    if node.fleet.peers:
        body["peer_fleets"] = node.fleet.peer_status()
    headers = {} if ready else {"Retry-After": "1"}
    return Response(
        json.dumps(body, separators=(",", ":")),
        status_code=200 if ready else 503,
        media_type="application/json",
        headers=headers,
    )


@router.get("/metrics", include_in_schema=False, openapi_extra=declare("metrics"))
async def metrics(node: NodeDep) -> Response:
    body, content_type = node.metrics.render()
    return Response(body, media_type=content_type)
