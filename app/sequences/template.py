"""Templates: how a sequence's integers read as business numbers (``INV-{yyyy}{mm}{dd}-{seq:06}{check}``).

A template is literal text and fields in braces:

    field        renders                                                          width (characters)
    {yyyy}       the period's year                                                4
    {yy}         the period's year within 2000..2099, its last two digits         2
    {mm}         the period's month, 01..12                                       2
    {dd}         the period's day, 01..31                                         2
    {seq}        the integer in decimal, no leading zeros                         1 or more
    {seq:0N}     the integer zero padded to N digits (N in 1..19); longer integers are written whole   N or more
    {check}      the check digit(s) over every ASCII digit before it in the text  1 (luhn, damm) or 2 (mod97)

The date fields show the **period's** first day (:mod:`app.sequences.period`), never the time of issue: a daily
sequence's ``2026-11-27`` numbers all read ``20261127``, whenever in that day they were issued.

The rules (each broken rule is an InvalidOptionError, HTTP 422, naming it):

1. **Length and characters.** At most :data:`TEMPLATE_CHARS_MAX` (128) characters, in Unicode normalization form
   NFC. A literal character is any printable character (:meth:`str.isprintable`: no control, format, bidi or
   line-separator characters; the ASCII space is allowed) except ``{`` and ``}``, and except **digits other than
   ASCII 0-9** (anything :meth:`str.isnumeric` holds: ``٣``, fullwidth ``３``, ``²``, ``½``...). Why: a check digit
   covers every decimal digit before it, and parsing reads ASCII digits; a digit of another script would look like
   part of the number to a reader, but be neither checked nor parsed as one. Non-ASCII letters and symbols
   (``Nº``, ``Rechnung``, ``請求``) are allowed: they are never digits.
2. **Braces.** ``{`` opens a field and ``}`` closes it; there are no literal braces (no ``{{`` escape: no business
   number needs them, and one meaning per character keeps parsing simple). An unclosed ``{``, a ``}`` closing
   nothing and a ``{`` inside a field are refused. Field names are exact and lowercase (``{YYYY}`` and ``{ seq }``
   are unknown fields); ``{seq:0N}`` is written with ASCII digits, one leading ``0`` and N in 1..19
   (``{seq:099}``, ``{seq:6}``, ``{seq:006}``, ``{seq:٠٦}`` are refused).
3. **Fields.** ``{seq}`` exactly once; every other field at most once; one year field (``{yyyy}`` or ``{yy}``,
   not both); ``{check}`` only with a ``check_digit`` setting (and a ``check_digit`` only with ``{check}``), and
   after ``{seq}`` (a check digit must cover the number).
4. **The period's fields.** The date fields present must name the period, and only the period:

       reset     must contain                           may not contain
       never     -                                      {yyyy} {yy} {mm} {dd}   (it has no period to show)
       yearly    {yyyy} or {yy}                          {mm} {dd}               (always 01: no information)
       monthly   {yyyy} or {yy}, and {mm}                {dd}
       daily     {yyyy} or {yy}, {mm} and {dd}           -

**Why a template accepted by these rules never renders two (period, integer) pairs as one text** (the rule the
issue asks for, and :func:`Template.parse_text` is its proof by construction: it recovers the pair from any text
rendered, and hypothesis checks ``parse_text(render(p, n)) == (p, n)`` over random accepted templates):

- every field but ``{seq}`` has a fixed width, and literals have fixed lengths: so the text before ``{seq}`` has a
  fixed length ``P`` and the text after it a fixed length ``Q``, whatever the period and integer; the integer's
  digits are exactly ``text[P:len(text)-Q]``, wherever they sit (after literal digits, before ``{yyyy}``...);
- ``{seq}`` and ``{seq:0N}`` write each integer in exactly one way (``n -> str(n).zfill(N)`` is one-to-one: under
  ``10**N`` it is N digits, from there on the integer's own digits, with no leading zero), so those digits give
  the integer back;
- the date fields, read at their fixed places, give the period back: rule 4 makes them name it whole (a daily
  period needs its day, month and year), and ``{yy}`` is read as 2000..2099 only (see below);
- the check digits are a function of the rest: they add no ambiguity (and a text whose check fails is refused).

So "two numeric fields side by side" (``{yyyy}{mm}``, ``{seq}{yyyy}``), "``{seq}`` followed by literal digits"
(``{seq}7``) and "``{seq:03}`` past 999" (lengths vary) are all accepted: they are unambiguous by the argument
above, and parsing reads them back. What would be ambiguous (two variable-width fields, a period without its
fields, a two-digit year over more than a century) is refused by rules 3 and 4 and the ``{yy}`` window.

**{yy} and centuries.** A two-digit year repeats every 100 years, so ``{yy}`` means the years 2000..2099 only: it
renders ``26`` for 2026 and parses ``26`` as 2026; a period outside those years (a node whose clock reads 1999, or
the year 2100) cannot render and is a :class:`~app.errors.TimeRangeError` (503: this node's clock, or a sequence
that outlived its template: change the template to ``{yyyy}``). Refusing ``{yy}`` outright would refuse the usual
``FV/26/11/0001``; reading it in a sliding window would let 2026 and 2126 meet; a fixed window, stated, does neither.

Rendering (:class:`Bound`, a template bound to one period): the text is ``pre + digits + mid + check + post`` with
``pre``, ``mid`` and ``post`` fixed for the period, so a run of integers is rendered column-wise (numpy), as
:mod:`app.sequences.text` writes plain integers, check digits included (:mod:`app.sequences.checkdigit`'s column
forms); runs of up to :data:`SCALAR_RUN_MAX` integers are rendered one by one with ``str``.

May import: :mod:`app.errors`, :mod:`app.sequences.checkdigit`, :mod:`app.sequences.period` and the integer bound
of :mod:`app.storage.sequences`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from datetime import date
from typing import Literal

import numpy as np

from app.errors import InvalidIdError, InvalidOptionError, TimeRangeError
from app.sequences.checkdigit import ALGORITHMS, CheckDigit
from app.sequences.period import RESETS, Reset, check_reset
from app.storage.sequences import MAX_VALUE

TEMPLATE_CHARS_MAX = 128
"""The longest template, in characters (a 10,000-character template is refused before it is read)."""
SEQ_WIDTH_MAX = len(str(MAX_VALUE))
"""The widest ``{seq:0N}``: 19, the digits of 2**63-1."""
YY_FIRST_YEAR = 2000
YY_LAST_YEAR = 2099
"""``{yy}`` renders and reads the years 2000..2099 only."""
SCALAR_RUN_MAX = 16
"""Runs up to this many integers are rendered one by one (numpy's fixed cost is higher); see bench_templates.py."""
TEXT_CHARS_MAX = TEMPLATE_CHARS_MAX + SEQ_WIDTH_MAX + 2
"""No rendered text is longer (the fields are at most as wide as their names in braces, but for the integer)."""

FieldName = Literal["yyyy", "yy", "mm", "dd", "seq", "check"]
DATE_WIDTHS: dict[str, int] = {"yyyy": 4, "yy": 2, "mm": 2, "dd": 2}
FIELDS_TEXT = "{yyyy} {yy} {mm} {dd} {seq} {seq:0N} {check}"
_SEQ_PADDED = re.compile(r"seq:0([1-9][0-9]?)", re.ASCII)
_ASCII_DIGITS = re.compile(r"[0-9]+", re.ASCII)
ZERO = ord("0")
DIGIT = object()
"""A place of a template that holds some ASCII digit (a field), in :meth:`Template.keeps_distinct_from`."""
ASCII_DIGITS = "0123456789"
_POWERS_OF_TEN = np.asarray([10**k for k in range(SEQ_WIDTH_MAX - 1, -1, -1)], dtype=np.int64)
"""10**18 .. 10**0: the divisors that cut an integer into its decimal digits, most significant first."""
QUOTE = ord('"')
COMMA = ord(",")

REQUIRED: dict[str, tuple[str, ...]] = {
    "never": (),
    "yearly": ("year",),
    "monthly": ("year", "mm"),
    "daily": ("year", "mm", "dd"),
}
"""The period fields a template of each reset must contain ("year" is {yyyy} or {yy})."""
REFUSED: dict[str, tuple[str, ...]] = {
    "never": ("yyyy", "yy", "mm", "dd"),
    "yearly": ("mm", "dd"),
    "monthly": ("dd",),
    "daily": (),
}
"""The date fields a template of each reset may not contain (no period, or always 01)."""
RESET_NOUN = {"yearly": "year", "monthly": "month", "daily": "day"}


@dataclass(frozen=True)
class Token:
    """One piece of a template: ``kind`` is ``literal`` (``text`` holds it) or a field name; ``width`` is the
    rendered width (the padding N of ``{seq:0N}``, 1 for ``{seq}``; a literal's length)."""

    kind: Literal["literal", "yyyy", "yy", "mm", "dd", "seq", "check"]
    text: str
    width: int


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _char_problem(ch: str) -> str | None:
    if ch == "}":
        return "'}' closes no field (a template has no literal braces)"
    if not ch.isprintable():
        return f"{_describe(ch)} is not printable (control, format and separator characters are refused)"
    if ch.isnumeric() and not ("0" <= ch <= "9"):
        return (
            f"{_describe(ch)} is a digit other than ASCII 0-9 (check digits and parsing read ASCII digits only, "
            f"so other digits are refused)"
        )
    return None


def _describe(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed character')}"


def _tokens(source: str) -> list[Token]:
    """The template's tokens, adjacent literal characters joined. Raises InvalidOptionError naming the rule."""
    tokens: list[Token] = []
    literal: list[str] = []

    def flush() -> None:
        if literal:
            text = "".join(literal)
            tokens.append(Token("literal", text, len(text)))
            literal.clear()

    i = 0
    while i < len(source):
        ch = source[i]
        if ch != "{":
            problem = _char_problem(ch)
            if problem is not None:
                raise InvalidOptionError(f"template: character {i + 1}: {problem}")
            literal.append(ch)
            i += 1
            continue
        close = source.find("}", i + 1)
        nested = source.find("{", i + 1)
        if close < 0:
            raise InvalidOptionError(f"template: character {i + 1}: '{{' opens a field that is never closed by '}}'")
        if 0 <= nested < close:
            raise InvalidOptionError(
                f"template: character {nested + 1}: '{{' inside a field (fields do not nest, and a template has no "
                f"literal braces)"
            )
        flush()
        tokens.append(_field(source[i + 1 : close], i))
        i = close + 1
    flush()
    return tokens


def _field(name: str, at: int) -> Token:
    if name in ("yyyy", "yy", "mm", "dd"):
        return Token(name, "", DATE_WIDTHS[name])  # type: ignore[arg-type]
    if name == "seq":
        return Token("seq", "", 1)
    if name == "check":
        return Token("check", "", 0)  # its width comes with the algorithm
    padded = _SEQ_PADDED.fullmatch(name)
    if padded is not None and int(padded.group(1)) <= SEQ_WIDTH_MAX:
        return Token("seq", "", int(padded.group(1)))
    if name.startswith("seq:"):
        raise InvalidOptionError(
            f"template: character {at + 1}: {{{_shown(name)[1:-1]}}}: a padded number is written {{seq:0N}} with "
            f"ASCII digits, N in 1..{SEQ_WIDTH_MAX} without leading zeros (such as {{seq:06}})"
        )
    raise InvalidOptionError(
        f"template: character {at + 1}: unknown field {{{_shown(name)[1:-1]}}}; the fields are {FIELDS_TEXT}"
    )


class Template:
    """A template checked against a sequence's ``reset`` and ``check_digit`` (:meth:`compile`); see the module.

    ``bind(first_day)`` gives the :class:`Bound` template of one period (remembered for the last period);
    ``render(first_day, n)`` one text; ``parse_text(text)`` -> (first day or None, integer).
    """

    def __init__(self, source: str, reset: Reset, check: CheckDigit | None, tokens: list[Token]) -> None:
        self.source = source
        self.reset = reset
        self.check = check
        self.tokens = tuple(tokens)
        seq_at = next(i for i, t in enumerate(tokens) if t.kind == "seq")
        self.seq_at = seq_at
        self.pad = tokens[seq_at].width
        self.pre_len = sum(self._width(t) for t in tokens[:seq_at])
        self.post_len = sum(self._width(t) for t in tokens[seq_at + 1 :])
        self._bound: Bound | None = None

    def _width(self, token: Token) -> int:
        if token.kind == "check":
            return self.check.width if self.check is not None else 0
        return token.width

    def __repr__(self) -> str:
        return f"Template({self.source!r}, reset={self.reset!r}, check={self.check.name if self.check else None})"

    @classmethod
    def compile(cls, source: object, reset: str = "never", check_digit: str | None = None) -> Template:
        """Check ``source`` against every rule of the module for a sequence of ``reset`` and ``check_digit``
        (luhn, damm, mod97 or None). Raises InvalidOptionError naming the first rule broken."""
        reset = check_reset(reset)
        if not isinstance(source, str):
            raise InvalidOptionError(f"template must be a string, got {type(source).__name__}")
        if len(source) > TEMPLATE_CHARS_MAX:
            raise InvalidOptionError(
                f"template must be at most {TEMPLATE_CHARS_MAX} characters long, got {len(source)}"
            )
        if not unicodedata.is_normalized("NFC", source):
            raise InvalidOptionError(
                "template must be in Unicode normalization form NFC (composed characters, as most keyboards type "
                "them), so that a number typed back matches it"
            )
        check: CheckDigit | None = None
        if check_digit is not None:
            check = ALGORITHMS.get(check_digit) if isinstance(check_digit, str) else None
            if check is None:
                raise InvalidOptionError(
                    f"check_digit must be one of {', '.join(ALGORITHMS)}, got {_shown(str(check_digit))}"
                )
        tokens = _tokens(source)
        kinds = [t.kind for t in tokens if t.kind != "literal"]
        for kind in dict.fromkeys(kinds):
            if kinds.count(kind) > 1:
                shown = "{seq}" if kind == "seq" else f"{{{kind}}}"
                raise InvalidOptionError(f"template: {shown} may appear only once")
        if "seq" not in kinds:
            raise InvalidOptionError("template must contain the number: {seq} or {seq:0N}, once")
        if "yyyy" in kinds and "yy" in kinds:
            raise InvalidOptionError("template: one year field only, {yyyy} or {yy}")
        if "check" in kinds:
            if check is None:
                raise InvalidOptionError(
                    "template: {check} needs the check_digit setting (luhn, damm or mod97) to say which check digit"
                )
            if kinds.index("check") < kinds.index("seq"):
                raise InvalidOptionError(
                    "template: {check} must come after {seq}: a check digit covers the digits before it, the number's "
                    "among them"
                )
        elif check is not None:
            raise InvalidOptionError(f"check_digit {check.name} needs a {{check}} field in the template to appear")
        _check_period_fields(set(kinds), reset)
        return cls(source, reset, check, tokens)

    # -- rendering ------------------------------------------------------------------------------------------------
    def bind(self, first_day: date | None) -> Bound:
        """This template with the period beginning ``first_day`` written in (None for ``never``).

        Raises TimeRangeError when ``{yy}`` cannot show the period's year (outside 2000..2099)."""
        bound = self._bound
        if bound is not None and bound.first_day == first_day:
            return bound
        bound = self._bound = Bound(self, first_day)
        return bound

    def render(self, first_day: date | None, n: int) -> str:
        """The text of integer ``n`` (0..2**63-1) in the period beginning ``first_day``."""
        return self.bind(first_day).render(n)

    # -- parsing --------------------------------------------------------------------------------------------------
    def parse_text(self, text: object) -> tuple[date | None, int]:
        """(the period's first day, the integer) of a text this template rendered; None for ``never``.

        Raises InvalidIdError naming the rule when ``text`` is not one: a literal or a field that does not match,
        a date that does not exist, an integer past 2**63-1 or written otherwise than the template writes it
        (leading zeros), or a check digit that does not match.
        """
        if not isinstance(text, str):
            raise InvalidIdError(f"a number to parse must be a string, got {type(text).__name__}")
        fixed = self.pre_len + self.post_len
        if not fixed + max(self.pad, 1) <= len(text) <= fixed + SEQ_WIDTH_MAX:
            raise InvalidIdError(
                f"{_shown(text)} is not a number of template {self.source!r}: its length must be in "
                f"{fixed + self.pad}..{fixed + SEQ_WIDTH_MAX} characters, got {len(text)}"
            )
        fields: dict[str, str] = {}
        check_at = -1
        pos = 0
        for i, token in enumerate(self.tokens):
            if i == self.seq_at:
                pos = len(text) - self.post_len
                continue
            width = self._width(token)
            piece = text[pos : pos + width]
            if token.kind == "literal":
                if piece != token.text:
                    raise InvalidIdError(
                        f"{_shown(text)} is not a number of template {self.source!r}: characters {pos + 1}.."
                        f"{pos + width} must read {token.text!r}, got {piece!r}"
                    )
            elif _ASCII_DIGITS.fullmatch(piece) is None:
                raise InvalidIdError(
                    f"{_shown(text)} is not a number of template {self.source!r}: {{{token.kind}}} at characters "
                    f"{pos + 1}..{pos + width} must be {width} ASCII digits, got {piece!r}"
                )
            else:
                fields[token.kind] = piece
                if token.kind == "check":
                    check_at = pos
            pos += width
        digits = text[self.pre_len : len(text) - self.post_len]
        if _ASCII_DIGITS.fullmatch(digits) is None:
            raise InvalidIdError(
                f"{_shown(text)} is not a number of template {self.source!r}: the number at characters "
                f"{self.pre_len + 1}..{len(text) - self.post_len} must be ASCII digits, got {digits!r}"
            )
        n = int(digits)
        if n > MAX_VALUE or digits != f"{n:0{self.pad}d}":
            raise InvalidIdError(
                f"{_shown(text)} is not a number of template {self.source!r}: its number {digits!r} is not in "
                f"0..2**63-1 written as the template writes it ({'{seq}' if self.pad == 1 else f'{{seq:0{self.pad}}}'})"
            )
        first_day = self._first_day(fields, text)
        if self.check is not None:
            payload = "".join(re.findall(r"[0-9]", text[:check_at], re.ASCII))
            if not self.check.valid(payload + fields["check"]):
                raise InvalidIdError(
                    f"{_shown(text)}: its {self.check.name} check digit {fields['check']} does not match the digits "
                    f"before it (expected {self.check.compute(payload)}): a digit was mistyped or swapped"
                )
        if Bound(self, first_day).render(n) != text:  # MOD 97-10's 00 and 01 pass its check, yet are never written
            raise InvalidIdError(
                f"{_shown(text)} is not a number of template {self.source!r}: number {n} of period {first_day} is "
                f"written {Bound(self, first_day).render(n)!r}"
            )
        return first_day, n

    def keeps_distinct_from(self, old: Template) -> bool:
        """Whether this template may replace ``old`` on a sequence (PATCH): no text it renders equals a text
        ``old`` rendered for another (period, integer). Sufficient tests, else False (refuse):

        - the same pieces, but for ``{seq}``'s padding and a check digit algorithm of the same width: the integer
          and the period sit at the same places in both, so equal texts are the same pair;
        - or the texts cannot meet: at some place counted from the start (before both ``{seq}``, and the first
          digits of the integers, which are at least the padding) or from the end, the two templates hold
          characters that cannot be equal (two different literals, or a digit field against a literal that is
          not a digit).

        Raises ValueError when the resets differ (a sequence's reset never changes)."""
        if self.reset != old.reset:
            raise ValueError(f"templates of a {old.reset} and a {self.reset} sequence are never compared")
        if self._skeleton() == old._skeleton():
            return True
        return any(
            not _may_meet(a, b)
            for mine, theirs in ((self._head(), old._head()), (self._tail(), old._tail()))
            for a, b in zip(mine, theirs, strict=False)
        )

    def _skeleton(self) -> tuple[tuple[str, str, int], ...]:
        """The pieces with ``{seq}``'s padding left out and ``{check}`` as its width."""
        return tuple((t.kind, t.text, 0 if t.kind == "seq" else self._width(t)) for t in self.tokens)

    def _head(self) -> list[str | object]:
        """What each place from the start holds, up to the integer's first ``pad`` digits: a literal character, or
        DIGIT (any ASCII digit)."""
        return self._places(self.tokens[: self.seq_at]) + [DIGIT] * self.pad

    def _tail(self) -> list[str | object]:
        """The same from the end, backwards, up to the integer's last ``pad`` digits."""
        return self._places(self.tokens[self.seq_at + 1 :])[::-1] + [DIGIT] * self.pad

    def _places(self, tokens: tuple[Token, ...]) -> list[str | object]:
        places: list[str | object] = []
        for token in tokens:
            places += list(token.text) if token.kind == "literal" else [DIGIT] * self._width(token)
        return places

    def _first_day(self, fields: dict[str, str], text: str) -> date | None:
        if self.reset == "never":
            return None
        year = int(fields["yyyy"]) if "yyyy" in fields else YY_FIRST_YEAR + int(fields["yy"])
        month = int(fields.get("mm", "1"))
        day = int(fields.get("dd", "1"))
        try:
            return date(year, month, day)
        except ValueError:
            raise InvalidIdError(
                f"{_shown(text)}: its period {year:04d}-{month:02d}-{day:02d} is no date of the calendar"
            ) from None


def _may_meet(a: str | object, b: str | object) -> bool:
    """Whether two places (a literal character, or DIGIT) can hold the same character."""
    if a is DIGIT:
        return b is DIGIT or (isinstance(b, str) and b in ASCII_DIGITS)
    if b is DIGIT:
        return isinstance(a, str) and a in ASCII_DIGITS
    return a == b


def _check_period_fields(kinds: set[str], reset: Reset) -> None:
    for field in REFUSED[reset]:
        if field in kinds:
            if reset == "never":
                raise InvalidOptionError(
                    f"template: {{{field}}} shows the period's date, and a sequence that never resets has no period "
                    f"(set reset to daily, monthly or yearly)"
                )
            raise InvalidOptionError(
                f"template: a {reset} template may not contain {{{field}}}: it shows the period's first day, so it "
                f"would always read 01"
            )
    present = kinds | ({"year"} if kinds & {"yyyy", "yy"} else set())
    missing = [f for f in REQUIRED[reset] if f not in present]
    if missing:
        named = {"year": "year ({yyyy} or {yy})", "mm": "month ({mm})", "dd": "day ({dd})"}
        needs = [named[f] for f in REQUIRED[reset]]
        listed = needs[0] if len(needs) == 1 else ", ".join(needs[:-1]) + " and " + needs[-1]
        raise InvalidOptionError(
            f"template: a {reset} template must contain its period's {listed}, or two {RESET_NOUN[reset]}s would "
            f"render the same numbers; missing {', '.join(named[f] for f in missing)}"
        )


class Bound:
    """A template with one period's date written in: ``pre + digits + mid + check + post`` (see the module).

    ``render(n)`` one text; ``texts(first, count, step)`` the texts of ``first, first+step, ...`` (count of them);
    ``encode(first, count, step)`` the same as JSON strings joined by commas (``b'"A-1","A-2"'``), column-wise for
    long runs. Integers must be in 0..2**63-1 (ValueError otherwise).
    """

    __slots__ = ("first_day", "pad", "check", "pre", "mid", "post", "pre_digits", "mid_digits", "_head", "_tail")

    def __init__(self, template: Template, first_day: date | None) -> None:
        if (template.reset == "never") != (first_day is None):
            raise ValueError(f"a {template.reset} template is bound to a period's first day (None for never only)")
        self.first_day = first_day
        self.pad = template.pad
        self.check = template.check
        values = _date_values(template, first_day)
        parts: list[list[str]] = [[], [], []]
        part = 0
        for token in template.tokens:
            if token.kind == "seq" or token.kind == "check":
                part += 1
            elif token.kind == "literal":
                parts[part].append(token.text)
            else:
                parts[part].append(values[token.kind])
        if template.check is None:
            parts[1] += parts[2]
            parts[2] = []
        self.pre, self.mid, self.post = ("".join(p) for p in parts)
        self.pre_digits = "".join(re.findall(r"[0-9]", self.pre, re.ASCII))
        self.mid_digits = "".join(re.findall(r"[0-9]", self.mid, re.ASCII))
        self._head = ('"' + json.dumps(self.pre, ensure_ascii=False)[1:-1]).encode()
        self._tail = (json.dumps(self.mid, ensure_ascii=False)[1:-1], json.dumps(self.post, ensure_ascii=False)[1:-1])

    def render(self, n: int) -> str:
        if not 0 <= n <= MAX_VALUE:
            raise ValueError(f"a sequence's integers are in 0..2**63-1, got {n}")
        digits = f"{n:0{self.pad}d}"
        if self.check is None:
            return self.pre + digits + self.mid
        return self.pre + digits + self.mid + self.check.compute(self.pre_digits + digits + self.mid_digits) + self.post

    def texts(self, first: int, count: int, step: int = 1) -> list[str]:
        _check_run(first, count, step)
        return [self.render(n) for n in range(first, first + count * step, step)]

    def encode(self, first: int, count: int, step: int = 1) -> bytes:
        """The texts of ``first, first+step, ...`` (``count`` of them) as JSON strings, comma separated."""
        _check_run(first, count, step)
        if count <= SCALAR_RUN_MAX:
            return self.encode_each(first, count, step)
        parts = []
        last = first + (count - 1) * step
        while first <= last:  # one block per width of the integer's digits
            width = max(self.pad, len(str(first)))
            widest = 10**width - 1
            n = min(count, (min(last, widest) - first) // step + 1)
            if n <= SCALAR_RUN_MAX:
                parts.append(self.encode_each(first, n, step))
            else:
                parts.append(self.encode_columns(first, n, step, width))
            first += n * step
            count -= n
        return b",".join(parts)

    def encode_each(self, first: int, count: int, step: int) -> bytes:
        """:meth:`encode`'s texts one by one (``str`` and the scalar check digit): for short runs."""
        mid, post = self._tail
        pre_digits, mid_digits, check, pad = self.pre_digits, self.mid_digits, self.check, self.pad
        head = self._head.decode()
        out = []
        for n in range(first, first + count * step, step):
            digits = f"{n:0{pad}d}"
            if check is None:
                out.append(f'{head}{digits}{mid}"')
            else:
                out.append(f'{head}{digits}{mid}{check.compute(pre_digits + digits + mid_digits)}{post}"')
        return ",".join(out).encode()

    def encode_columns(self, first: int, count: int, step: int, width: int) -> bytes:
        """:meth:`encode`'s texts column-wise (numpy) for ``count`` integers from ``first`` by ``step`` that all
        take ``width`` digits (the caller cuts runs where the width changes)."""
        mid, post = (t.encode() for t in self._tail)
        head = self._head
        check_width = self.check.width if self.check is not None else 0
        row = len(head) + width + len(mid) + check_width + len(post) + 2  # '"' and ','
        out = np.empty((count, row), dtype=np.uint8)
        out[:, : len(head)] = np.frombuffer(head, dtype=np.uint8)
        values = np.arange(count, dtype=np.int64) * step + first  # last <= 2**63-1: no overflow
        digits = (values[:, None] // _POWERS_OF_TEN[SEQ_WIDTH_MAX - width :] % 10).astype(np.uint8)
        at = len(head)
        out[:, at : at + width] = digits + ZERO
        at += width
        out[:, at : at + len(mid)] = np.frombuffer(mid, dtype=np.uint8)
        at += len(mid)
        if self.check is not None:
            out[:, at : at + check_width] = self.check.columns(self.pre_digits, digits, self.mid_digits)
            at += check_width
        out[:, at : at + len(post)] = np.frombuffer(post, dtype=np.uint8)
        out[:, row - 2] = QUOTE
        out[:, row - 1] = COMMA
        return out.tobytes()[:-1]


def _check_run(first: int, count: int, step: int) -> None:
    if count < 0 or step < 1 or first < 0 or (count and first + (count - 1) * step > MAX_VALUE):
        raise ValueError(
            f"a run's integers are in 0..2**63-1 with step >= 1, got first {first}, count {count}, step {step}"
        )


def _date_values(template: Template, first_day: date | None) -> dict[str, str]:
    if first_day is None:
        return {}
    year = first_day.year
    values = {"yyyy": f"{year:04d}", "mm": f"{first_day.month:02d}", "dd": f"{first_day.day:02d}"}
    if any(t.kind == "yy" for t in template.tokens):
        if not YY_FIRST_YEAR <= year <= YY_LAST_YEAR:
            raise TimeRangeError(
                f"template {template.source!r}: {{yy}} shows the years {YY_FIRST_YEAR}..{YY_LAST_YEAR} only, and this "
                f"period is in {year} (this node's clock, or a sequence that outlived its template: use {{yyyy}})",
                retry_after=60,
            )
        values["yy"] = f"{year % 100:02d}"
    return values


__all__ = ["RESETS", "SCALAR_RUN_MAX", "TEMPLATE_CHARS_MAX", "Bound", "Template", "Token"]
