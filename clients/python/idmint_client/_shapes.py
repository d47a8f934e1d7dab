"""What an ID looks like: each scheme's token pattern per text form, from ``GET /v1/schemes`` (``token_patterns``).

Every answer is checked against it before any of it is handed out (a batch whole, a stream chunk by chunk of
complete lines), so an answer of ``""``, ``null``, numbers or an HTML page from a server or a proxy is a failure
of that server (moved on from, like a dead one), never IDs. The check is one regex match over a chunk's text; only
a failing chunk is walked line by line to name the first bad line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from idmint_client._repeats import IdentityOrder, Rule
from idmint_client._replicas import Failed

SHOWN_CHARS = 80
"""How much of a bad line an error quotes."""


class IdShape:
    """The token pattern of ``scheme`` in text form ``format`` (full match). :meth:`check_text` and
    :meth:`check_ids` raise Failed naming the first line or ID that does not match."""

    def __init__(
        self,
        scheme: str,
        fmt: str,
        pattern: str | None,
        rising: Mapping[str, Sequence[str]] | None = None,
        per_identity: object = None,
        longest: int = 4096,
    ) -> None:
        self.scheme = scheme
        self.longest = longest
        """The most characters an ID of this form has (``/v1/schemes``' ``max_lengths``): answers are bounded by it."""
        self.format = fmt
        self.rising = rising
        self.order = IdentityOrder.from_json(per_identity)
        """How this form's IDs read as integers and name their issuer (``/v1/schemes``' ``rising_per_identity``),
        None when the form is not listed there."""
        self._per_identity_needs = _needs(per_identity.get("needs") if isinstance(per_identity, dict) else None)
        self.missing: str | None = None
        if pattern is None:
            self.missing = (
                f"/v1/schemes gives no token pattern for {scheme} in format {fmt!r}: its answers cannot be checked"
            )
            return
        try:
            self._one = re.compile(pattern)
            self._lines = re.compile(f"(?:{pattern})(?:\n(?:{pattern}))*")
        except re.error as exc:
            self.missing = f"/v1/schemes gives a token pattern for {scheme} in format {fmt!r} that is no regex: {exc}"

    def rises(self, options: Mapping[str, object]) -> bool:
        """Whether one answer's IDs must strictly rise under ``options`` (``/v1/schemes``' ``rising``: the form is
        there and ``options`` name one of the values each of its options needs)."""
        return self.rising is not None and _satisfied(self.rising, options)

    def rule(self, options: Mapping[str, object]) -> Rule:
        """What an answer under ``options`` is checked for (:mod:`idmint_client._repeats`): rising within the answer
        (:meth:`rises`), and rising per issuing identity across answers when the form is listed in
        ``rising_per_identity`` and ``options`` name what it needs."""
        order = self.order
        if order is not None and not _satisfied(self._per_identity_needs, options):
            order = None
        return Rule(self.scheme, self.rises(options), order)

    def check_text(self, text: str, first_line: int) -> None:
        """``text``: complete lines joined by ``\\n`` (no final newline), the first being line ``first_line``
        (1-based) of the answer."""
        if self.missing is not None:
            raise Failed(self.missing)
        if self._lines.fullmatch(text):
            return
        for number, line in enumerate(text.split("\n"), first_line):
            if not self._one.fullmatch(line):
                raise Failed(f"line {number} is not a {self.scheme} ID ({self.format}): {line[:SHOWN_CHARS]!r}")

    def check_ids(self, ids: Sequence[object]) -> None:
        """A batch answer's ``ids``: every one a string of the pattern."""
        if self.missing is not None:
            raise Failed(self.missing)
        texts: list[str] = []
        for number, one in enumerate(ids, 1):
            if not isinstance(one, str) or "\n" in one:
                raise Failed(f"ID {number} is not a {self.scheme} ID ({self.format}): {str(one)[:SHOWN_CHARS]!r}")
            texts.append(one)
        if self._lines.fullmatch("\n".join(texts)):
            return
        for number, one in enumerate(texts, 1):
            if not self._one.fullmatch(one):
                raise Failed(f"ID {number} is not a {self.scheme} ID ({self.format}): {one[:SHOWN_CHARS]!r}")


def missing_shape(scheme: str, fmt: str | None) -> IdShape:
    """A shape that fails every answer (the catalogue has no pattern for this scheme and format)."""
    return IdShape(scheme, fmt or "canonical", None)


def _needs(data: object) -> dict[str, tuple[str, ...]]:
    """A ``needs`` member (option -> values); anything unreadable reads as a need no request meets."""
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        return {"": ()}
    return {str(k): tuple(str(x) for x in v) for k, v in data.items()}


def _satisfied(needs: Mapping[str, Sequence[str]], options: Mapping[str, object]) -> bool:
    return all(name in options and str(options[name]) in values for name, values in needs.items())
