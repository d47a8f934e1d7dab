"""The OpenAPI document tells the truth about errors: one place that documents every error answer of every route.

Every error idmint sends is JSON ``{"detail": "<rule broken or reason>"}`` (plus ``retry_after`` with a 429 or 503),
from :mod:`app.api.errors`, the front (:mod:`app.api.front`: body limit, API keys, drain). FastAPI's
generated document instead describes 422s as its own ``HTTPValidationError`` (a list) and leaves the other error
codes without a body. :func:`install_openapi` post-processes the generated document once:

* the ``Error`` schema replaces ``HTTPValidationError`` for every 4xx/5xx response without a body of its own;
* every operation documents 500 (an internal error, still JSON); one with a request body 413 (over
  ``IDMINT_MAX_BODY_BYTES``); a stream 429 (the node's stream cap);
* with API keys on, every operation that needs a scope documents 401, 429 and, unless its scope is public, 403.
"""

from __future__ import annotations

from typing import Any

from app.api.access import SCOPE_KEY

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["detail"],
    "properties": {
        "detail": {"type": "string", "description": "The rule broken, or why the request cannot be served now."},
        "retry_after": {"type": "integer", "minimum": 1, "description": "With 429 and 503: seconds to wait."},
    },
}
ERROR_REF = {"$ref": "#/components/schemas/Error"}
FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")

DESCRIPTIONS = {
    "401": "no API key, or one that matches none (WWW-Authenticate: Bearer)",
    "403": "the API key lacks this route's scope",
    "413": "request body over IDMINT_MAX_BODY_BYTES",
    "429": "over a quota (Retry-After)",
    "500": "internal error (a fault of ours, never of the request)",
}


def document_errors(schema: dict[str, Any], keys_on: bool, public_scopes: frozenset[str]) -> dict[str, Any]:
    """Rewrite the error responses of ``schema`` (an OpenAPI document, changed in place and returned)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    for path, operations in schema.get("paths", {}).items():
        for _method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            wanted = ["500"]
            if "requestBody" in operation:
                wanted.append("413")
            if path.endswith("/stream"):
                wanted.append("429")
            scope = operation.get(SCOPE_KEY)  # declared by the route (app.api.access.declare)
            if keys_on and scope is not None:
                wanted += ["401", "429"] + ([] if scope in public_scopes else ["403"])
            for code in wanted:
                responses.setdefault(code, {"description": DESCRIPTIONS[code]})
            for code, response in responses.items():
                if not code.isdigit() or int(code) < 400:
                    continue
                content = response.get("content", {})
                json_schema = content.get("application/json", {}).get("schema", {})
                ref = json_schema.get("$ref", "")
                if not content or not json_schema or ref.endswith(FASTAPI_VALIDATION_SCHEMAS):
                    response["content"] = {"application/json": {"schema": ERROR_REF}}
    for name in FASTAPI_VALIDATION_SCHEMAS:
        components.pop(name, None)
    return schema


def install_openapi(api: Any, keys_on: bool, public_scopes: list[str]) -> None:
    """Make ``api.openapi()`` return the generated document with :func:`document_errors` applied (built once)."""
    generate = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = document_errors(generate(), keys_on, frozenset(public_scopes))
        return api.openapi_schema  # type: ignore[no-any-return]

    api.openapi = openapi
