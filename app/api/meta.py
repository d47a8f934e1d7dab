"""Scheme catalogue, health, readiness and metrics."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from app.api.deps import NodeDep, SettingsDep
from app.schemes import schemes

router = APIRouter(tags=["node"])


def scheme_catalogue(node: Any, settings: Any) -> list[dict[str, Any]]:
    out = []
    for name, scheme in schemes().items():
        issuer = node.issuers[name]
        entry: dict[str, Any] = {
            "name": name,
            "bits": scheme.packed_bytes * 8 if name != "siq" else 112,
            "packed_bytes": scheme.packed_bytes,
            "layout": [{"name": f.name, "bits": f.bits, "description": f.description} for f in scheme.layout],
            "formats": list(scheme.formats),
            "canonical_format": scheme.formats[0],
            "timestamp_precision": {3: "ms", 6: "us"}.get(scheme.timestamp_digits, "s"),
            "reference": scheme.reference,
            "limits": {"max_count": settings.max_count, "max_stream_count": settings.max_stream_count},
            "node": issuer.describe(),
        }
        if scheme.identity is not None:
            entry["identity"] = {"kind": scheme.identity.kind, "minimum": scheme.identity.minimum,
                                 "maximum": scheme.identity.maximum}
        if name == "eight-byte":
            entry["limits"]["ids_per_ms_per_generator_id"] = 64
            entry["node"]["cluster_id"] = settings.cluster_id
            entry["options"] = {"mode": ["spread", "time_sequential"]}
        elif name == "siq":
            from app.schemes.siq import QUALIFIERS, domain_hash

            entry["node"]["domain"] = settings.siq_domain
            entry["node"]["domain_hash"] = domain_hash(settings.siq_domain)
            entry["options"] = {"type": sorted(QUALIFIERS)}
        elif name == "hlc-ulid":
            entry["options"] = {"after": "an HLC-ULID; returned IDs sort after it"}
        elif name == "wiji":
            gen = issuer.generator
            if gen is not None:
                entry["node"]["random_part"] = f"{gen.random_part:013x}"
        out.append(entry)
    return out


@router.get("/v1/schemes")
async def list_schemes(node: NodeDep, settings: SettingsDep) -> dict[str, Any]:
    """Each scheme's bit layout, text forms, limits, and this node's identity for it."""
    return {"schemes": scheme_catalogue(node, settings), "backend": node.backend.status()}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive (says nothing about leases: see /readyz)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "some scheme cannot issue; the body says why"}})
async def readyz(node: NodeDep) -> Response:
    """200 only when every scheme can issue right now; otherwise 503 naming why, per scheme."""
    ready, detail = node.readiness()
    body = {"status": "ready" if ready else "not ready", "schemes": detail, "backend": node.backend.status()}
    headers = {} if ready else {"Retry-After": "1"}
    return Response(json.dumps(body), status_code=200 if ready else 503, media_type="application/json",
                    headers=headers)


@router.get("/metrics", include_in_schema=False)
async def metrics(node: NodeDep) -> Response:
    body, content_type = node.metrics.render()
    return Response(body, media_type=content_type)
