"""Fake servers for the client's tests (httpx.MockTransport handlers and their pieces): the catalogue a real server
publishes (its formats and token patterns, from the app's own registry) and IDs of the right shape."""

from __future__ import annotations

import httpx

from app.schemes import schemes
from app.schemes._patterns import max_lengths, rising_per_identity, token_patterns


def catalogue() -> dict[str, object]:
    """``GET /v1/schemes`` as a real server answers it (names, formats, token patterns, rising forms)."""
    return {
        "schemes": [
            {
                "name": s.name,
                "formats": list(s.formats),
                "canonical_format": s.formats[0],
                "token_patterns": token_patterns(s.name),
                "max_lengths": max_lengths(s.name),
                "rising": {form: {k: list(v) for k, v in needs.items()} for form, needs in s.rising_formats.items()},
                "rising_per_identity": rising_per_identity(s),
                "limits": {"max_count": 100_000, "max_stream_count": 100_000_000},
            }
            for s in schemes().values()
        ]
    }


def catalogue_answer(request: httpx.Request) -> httpx.Response | None:
    """The catalogue for a request of ``/v1/schemes`` (and 404 for ``/v1/fleet``: a server without fleets, used as
    such); None for any other path."""
    if request.url.path == "/v1/schemes":
        return httpx.Response(200, json=catalogue())
    if request.url.path == "/v1/fleet":
        return httpx.Response(404, json={"detail": "Not Found"})
    return None


def fake_id(host: str, number: int) -> str:
    """A base32 ID of 128 bits (wiji, ulid, hlc-ulid canonical form) naming the host (``a.invalid``: ``1...``)
    and a number: ``fake_id("b.invalid", 7) == "2000000000000000000000007"`` padded to 26 characters."""
    return f"{ord(host[0]) - ord('a') + 1}{number:025d}"


def batch(request: httpx.Request, ids: list[str]) -> dict[str, object]:
    """A batch answer to ``request`` (``/v1/ids/{scheme}``) as a real server labels it: its scheme, its format
    (canonical when none was asked), its IDs."""
    scheme = request.url.path.split("/")[3]
    fmt = request.url.params.get("format") or schemes()[scheme].formats[0]
    return {"scheme": scheme, "format": fmt, "ids": ids}
