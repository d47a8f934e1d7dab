"""Scheme catalogue, health, readiness and metrics."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from app.api.deps import NodeDep, SettingsDep
from app.schemes._patterns import token_patterns
from app.schemes.base import Scheme, SchemeOption

router = APIRouter(tags=["node"])


def _options(options: tuple[SchemeOption, ...]) -> dict[str, Any]:
    return {
        o.name: {"description": o.description, **({"choices": list(o.choices)} if o.choices else {})} for o in options
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
        "token_patterns": token_patterns(scheme.name),
        "timestamp_precision": {3: "ms", 6: "us"}.get(scheme.timestamp_digits, "s"),
        "reference": scheme.reference,
        "limits": {"max_count": settings.max_count, "max_stream_count": settings.max_stream_count},
    }
    if scheme.options:
        entry["options"] = _options(scheme.options)
    if scheme.decode_options:
        entry["decode_options"] = _options(scheme.decode_options)
    if scheme.shares_generator_with:
        entry["shares_generator_with"] = scheme.shares_generator_with
    if scheme.identity is not None:
        entry["identity"] = {
            "kind": scheme.identity.kind,
            "minimum": scheme.identity.minimum,
            "maximum": scheme.identity.maximum,
        }
    extra = dict(scheme.describe(settings))
    entry["limits"].update(extra.pop("limits", {}))
    entry.update(extra)
    return entry


def scheme_catalogue(node: Any, settings: Any) -> list[dict[str, Any]]:
    """Every scheme of the node (as configured), with this node's state for it ("node")."""
    out = []
    for name, scheme in node.schemes.items():
        entry = scheme_entry(scheme, settings)
        issuer = node.issuers.get(name)
        if issuer is not None:
            entry["node"] = {**issuer.describe(), **scheme.node_info(settings, issuer.generator)}
        out.append(entry)
    return out


@router.get("/v1/schemes")
async def list_schemes(node: NodeDep, settings: SettingsDep) -> dict[str, Any]:
    """Each scheme's bit layout, text forms, options, limits, the decode page's titles, examples and field
    captions, and this node's identity for it."""
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
    return Response(json.dumps(body), status_code=200 if ready else 503, media_type="application/json", headers=headers)


@router.get("/metrics", include_in_schema=False)
async def metrics(node: NodeDep) -> Response:
    body, content_type = node.metrics.render()
    return Response(body, media_type=content_type)
