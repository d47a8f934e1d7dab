"""Templates: the issue's example, the uniqueness rule proved by round trips over random accepted templates, the
column-wise renderer against the scalar one, parsing back (check digits included) and one table of hostile
templates, each a 422 naming its rule."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.errors import InvalidIdError, InvalidOptionError, TimeRangeError
from app.sequences.checkdigit import ALGORITHMS, luhn
from app.sequences.template import SCALAR_RUN_MAX, TEMPLATE_CHARS_MAX, Template
from app.storage.sequences import MAX_VALUE

INVOICE = "INV-{yyyy}{mm}{dd}-{seq:06}{check}"


def test_the_issues_example() -> None:
    template = Template.compile(INVOICE, "daily", "luhn")
    day = date(2026, 11, 27)
    text = template.render(day, 123)
    assert text == "INV-20261127-000123" + luhn("20261127000123")
    assert template.parse_text(text) == (day, 123)
    assert template.render(day, 1_234_567) == "INV-20261127-1234567" + luhn("202611271234567")
    bound = template.bind(day)
    assert bound.texts(998, 3) == [template.render(day, n) for n in (998, 999, 1000)]
    assert template.bind(day) is bound  # remembered for the period


@pytest.mark.parametrize(
    ("source", "reset", "check", "day", "n", "text"),
    [
        ("{seq}", "never", None, None, 0, "0"),
        ("{seq}", "never", None, None, MAX_VALUE, str(MAX_VALUE)),
        ("ORD-{seq:08}", "never", None, None, 42, "ORD-00000042"),
        ("FV/{yy}/{mm}/{seq:04}", "monthly", None, date(2026, 11, 1), 7, "FV/26/11/0007"),
        ("{yyyy}-{seq}", "yearly", None, date(2026, 1, 1), 12, "2026-12"),
        ("{seq}{yyyy}", "yearly", None, date(2026, 1, 1), 1, "12026"),  # unpadded, then digits: still one reading
        ("{seq}7", "never", None, None, 12, "127"),
        ("{seq:03}", "never", None, None, 1000, "1000"),  # past the padding: the integer whole
        ("Nº {seq}{check}", "never", "damm", None, 572, "Nº 5724"),  # Wikipedia's Damm example
        ("R{seq}{check}", "never", "mod97", None, 794, "R79444"),  # 79444 is 1 modulo 97
        ("{yyyy}{mm}{dd}{seq:02}{check}", "daily", "mod97", date(2026, 2, 28), 5, "2026022805" + "86"),
        ('a"b\\c{seq}', "never", None, None, 1, 'a"b\\c1'),  # JSON's special characters are literals too
        ("請求-{yyyy}-{seq}", "yearly", None, date(2026, 1, 1), 3, "請求-2026-3"),
    ],
)
def test_render_and_parse(source: str, reset: str, check: str | None, day: date | None, n: int, text: str) -> None:
    template = Template.compile(source, reset, check)
    assert template.render(day, n) == text
    assert template.parse_text(text) == (day, n)
    assert json.loads(b"[" + template.bind(day).encode(n, 1) + b"]") == [text]


def test_mod97_example_digits() -> None:
    assert ALGORITHMS["mod97"].compute("2026022805") == "86"  # python-stdnum agrees


# -- the uniqueness rule ---------------------------------------------------------------------------------------------

LITERAL = st.text(alphabet=st.sampled_from(list("0123456789-/. Axé請")), max_size=3)
SEQ = st.sampled_from(["{seq}", "{seq:01}", "{seq:02}", "{seq:03}", "{seq:06}", "{seq:019}"])
PERIOD_FIELDS = {"never": [], "yearly": ["Y"], "monthly": ["Y", "{mm}"], "daily": ["Y", "{mm}", "{dd}"]}


@st.composite
def accepted_templates(draw: st.DrawFn) -> tuple[Template, str]:
    """A template every rule accepts: the period's fields, one {seq}, maybe {check} after it, literals between."""
    reset = draw(st.sampled_from(sorted(PERIOD_FIELDS)))
    year = draw(st.sampled_from(["{yyyy}", "{yy}"]))
    fields = [year if f == "Y" else f for f in PERIOD_FIELDS[reset]] + [draw(SEQ)]
    fields = draw(st.permutations(fields))
    check = draw(st.sampled_from([None, "luhn", "damm", "mod97"]))
    if check is not None:
        at = draw(st.integers(fields.index(next(f for f in fields if f.startswith("{seq"))) + 1, len(fields)))
        fields.insert(at, "{check}")
    pieces = [draw(LITERAL)]
    for field in fields:
        pieces += [field, draw(LITERAL)]
    return Template.compile("".join(pieces), reset, check), reset


def first_days(reset: str) -> st.SearchStrategy[date | None]:
    if reset == "never":
        return st.none()
    days = st.dates(date(2000, 1, 1), date(2099, 12, 31))  # {yy}'s window
    if reset == "monthly":
        return days.map(lambda d: d.replace(day=1))
    if reset == "yearly":
        return days.map(lambda d: d.replace(month=1, day=1))
    return days


INTEGERS = st.one_of(
    st.integers(0, 2000),
    st.integers(0, MAX_VALUE),
    st.sampled_from([9, 10, 99, 100, 999, 1000, 999_999, 1_000_000, 10**18, MAX_VALUE]),
)


@settings(max_examples=400, deadline=None)
@given(accepted_templates(), st.data())
def test_parse_inverts_render(compiled: tuple[Template, str], data: st.DataObject) -> None:
    """parse_text(render(p, n)) == (p, n) for every accepted template: render is one-to-one."""
    template, reset = compiled
    day = data.draw(first_days(reset))
    n = data.draw(INTEGERS)
    assert template.parse_text(template.render(day, n)) == (day, n)


@settings(max_examples=400, deadline=None)
@given(accepted_templates(), st.data())
def test_distinct_pairs_render_distinct_texts(compiled: tuple[Template, str], data: st.DataObject) -> None:
    template, reset = compiled
    pair_a = (data.draw(first_days(reset)), data.draw(INTEGERS))
    # the other pair is near: the same period or the same integer, or an integer one digit longer or shorter
    day_b = data.draw(st.one_of(st.just(pair_a[0]), first_days(reset)))
    n_b = data.draw(st.sampled_from([pair_a[1], pair_a[1] // 10, pair_a[1] * 10 + data.draw(st.integers(0, 9))]))
    assume(n_b <= MAX_VALUE and (day_b, n_b) != pair_a)
    assert template.render(*pair_a) != template.render(day_b, n_b)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(LITERAL, st.sampled_from(["{yyyy}", "{yy}", "{mm}", "{dd}", "{check}"]), SEQ), max_size=7),
    st.sampled_from(sorted(PERIOD_FIELDS)),
    st.sampled_from([None, "luhn", "damm", "mod97"]),
    st.data(),
)
def test_any_template_is_refused_or_one_to_one(
    pieces: list[str], reset: str, check: str | None, data: st.DataObject
) -> None:
    try:
        template = Template.compile("".join(pieces), reset, check)
    except InvalidOptionError:
        return
    day = data.draw(first_days(reset))
    for n in data.draw(st.lists(INTEGERS, min_size=1, max_size=5)):
        assert template.parse_text(template.render(day, n)) == (day, n)


# -- runs --------------------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    accepted_templates(),
    st.data(),
    st.integers(1, 3 * SCALAR_RUN_MAX + 300),
    st.sampled_from([1, 1, 2, 7, 1000]),
    st.sampled_from([0, 1, 95, 990, 999_990, 10**18 - 500]),
)
def test_encode_matches_the_texts(
    compiled: tuple[Template, str], data: st.DataObject, count: int, step: int, first: int
) -> None:
    template, reset = compiled
    bound = template.bind(data.draw(first_days(reset)))
    texts = bound.texts(first, count, step)
    assert json.loads(b"[" + bound.encode(first, count, step) + b"]") == texts
    width = max(bound.pad, len(str(first + (count - 1) * step)))
    if len(str(first)) == len(str(first + (count - 1) * step)) or bound.pad >= width:
        assert bound.encode_columns(first, count, step, width) == bound.encode_each(first, count, step)
    assert texts == [bound.render(first + i * step) for i in range(count)]


def test_runs_to_the_last_integer() -> None:
    bound = Template.compile("X{seq:03}{check}", "never", "luhn").bind(None)
    first = MAX_VALUE - 99
    assert json.loads(b"[" + bound.encode(first, 100) + b"]")[-1] == bound.render(MAX_VALUE)
    for bad in [(MAX_VALUE - 98, 100, 1), (-1, 5, 1), (0, 5, 0)]:
        with pytest.raises(ValueError, match="0..2\\*\\*63-1"):
            bound.encode(*bad)
    with pytest.raises(ValueError, match="0..2\\*\\*63-1"):
        bound.render(MAX_VALUE + 1)


# -- {yy} ------------------------------------------------------------------------------------------------------------


def test_yy_covers_2000_to_2099() -> None:
    template = Template.compile("{yy}-{seq}", "yearly")
    assert template.render(date(2000, 1, 1), 1) == "00-1"
    assert template.render(date(2099, 1, 1), 1) == "99-1"
    assert template.parse_text("26-5") == (date(2026, 1, 1), 5)
    for year in (1999, 2100):
        with pytest.raises(TimeRangeError, match=r"\{yy\} shows the years 2000..2099 only"):
            template.bind(date(year, 1, 1))
    assert Template.compile("{yyyy}-{seq}", "yearly").render(date(2100, 1, 1), 1) == "2100-1"


def test_bound_needs_a_first_day_exactly_when_the_sequence_resets() -> None:
    with pytest.raises(ValueError, match="bound to a period"):
        Template.compile("{yyyy}{seq}", "yearly").bind(None)
    with pytest.raises(ValueError, match="bound to a period"):
        Template.compile("{seq}", "never").bind(date(2026, 1, 1))


# -- parsing back ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "reset", "check", "text", "fragment"),
    [
        (INVOICE, "daily", "luhn", "INV-20261127-000123" + str((int(luhn("20261127000123")) + 1) % 10), "luhn check"),
        (INVOICE, "daily", "luhn", "INV-20261127-000132" + luhn("20261127000123"), "luhn check digit"),
        ("{yyyy}{seq}{check}", "yearly", "damm", "20261" + "0", "damm check digit"),
        ("{seq}{check}", "never", "mod97", "79445", "mod97 check digit"),
        ("INV-{seq}", "never", None, "INV-0123", "written as the template writes it ({seq})"),
        ("INV-{seq:03}", "never", None, "INV-0123", "written as the template writes it ({seq:03})"),
        ("INV-{seq:03}", "never", None, "INV-12", "length must be in 7..23"),
        ("INV-{seq}", "never", None, "INV-" + "9" * 19, "not in 0..2**63-1"),
        ("INV-{seq}", "never", None, "INV-" + "1" * 20, "length must be in"),
        ("INV-{seq}", "never", None, "INV-1" + "x" * 10_000, "length must be in"),
        ("INV-{seq}", "never", None, "inv-12", "characters 1..4 must read 'INV-'"),
        ("INV-{seq}", "never", None, "INV-１２", "must be ASCII digits"),
        ("INV-{seq}", "never", None, "INV-٣", "must be ASCII digits"),
        ("INV-{seq}", "never", None, "INV- 12", "must be ASCII digits"),
        ("{yyyy}{mm}{dd}-{seq}", "daily", None, "20260230-1", "2026-02-30 is no date"),
        ("{yyyy}{mm}-{seq}", "monthly", None, "202613-1", "2026-13-01 is no date"),
        ("{yyyy}{mm}-{seq}", "monthly", None, "2026x1-1", "{mm} at characters 5..6 must be 2 ASCII digits"),
        ("{yyyy}-{seq}", "yearly", None, "0000-1", "0000-01-01 is no date"),
        ("{seq}", "never", None, 123, "must be a string"),
        ("{seq}", "never", None, "", "length must be in 1..19"),
    ],
)
def test_parse_refuses(source: str, reset: str, check: str | None, text: object, fragment: str) -> None:
    with pytest.raises(InvalidIdError) as caught:
        Template.compile(source, reset, check).parse_text(text)
    assert fragment in str(caught.value)


@given(st.sampled_from(sorted(ALGORITHMS)), st.integers(0, 10**9), st.data())
def test_a_mistyped_digit_is_caught_on_parse(check: str, n: int, data: st.DataObject) -> None:
    template = Template.compile("T-{yyyy}{mm}-{seq:06}{check}", "monthly", check)
    text = template.render(date(2026, 11, 1), n)
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    at = data.draw(st.sampled_from(digits))
    typo = data.draw(st.sampled_from([d for d in "0123456789" if d != text[at]]))
    with pytest.raises(InvalidIdError):
        template.parse_text(text[:at] + typo + text[at + 1 :])


# -- hostile templates -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "reset", "check", "fragment"),
    [
        ("{nope}", "never", None, "unknown field {nope}; the fields are {yyyy} {yy} {mm} {dd} {seq} {seq:0N} {check}"),
        ("{YYYY}-{seq}", "yearly", None, "unknown field {YYYY}"),
        ("{ seq }", "never", None, "unknown field { seq }"),
        ("{}", "never", None, "unknown field {}"),
        ("{seq" + "x" * 100 + "}", "never", None, "unknown field"),
        ("{seq}" + "x" * 10_000, "never", None, f"at most {TEMPLATE_CHARS_MAX} characters long, got 10005"),
        ("x" * (TEMPLATE_CHARS_MAX + 1), "never", None, "at most 128 characters"),
        ("{seq:099}", "never", None, "N in 1..19"),
        ("{seq:020}", "never", None, "N in 1..19"),
        ("{seq:00}", "never", None, "N in 1..19"),
        ("{seq:6}", "never", None, "written {seq:0N}"),
        ("{seq:006}", "never", None, "without leading zeros"),
        ("{seq:0٦}", "never", None, "with ASCII digits"),
        ("{seq:٠٦}", "never", None, "with ASCII digits"),
        ("{seq:0６}", "never", None, "with ASCII digits"),
        ("{seq:-6}", "never", None, "written {seq:0N}"),
        ("INV-{seq", "never", None, "character 5: '{' opens a field that is never closed"),
        ("INV-{seq}}", "never", None, "character 10: '}' closes no field"),
        ("INV}-{seq}", "never", None, "character 4: '}' closes no field (a template has no literal braces)"),
        ("{{seq}}", "never", None, "character 2: '{' inside a field"),
        ("{se{q}}", "never", None, "'{' inside a field"),
        ("INV３-{seq}", "never", None, "U+FF13 FULLWIDTH DIGIT THREE is a digit other than ASCII 0-9"),
        ("INV٣-{seq}", "never", None, "U+0663 ARABIC-INDIC DIGIT THREE is a digit other than ASCII 0-9"),
        ("INV²-{seq}", "never", None, "U+00B2 SUPERSCRIPT TWO is a digit other than ASCII 0-9"),
        ("½{seq}", "never", None, "VULGAR FRACTION ONE HALF is a digit other than ASCII 0-9"),
        ("Ⅻ{seq}", "never", None, "ROMAN NUMERAL TWELVE is a digit other than ASCII 0-9"),
        ("INV\x00{seq}", "never", None, "character 4: U+0000 unnamed character is not printable"),
        ("INV\n{seq}", "never", None, "is not printable"),
        ("INV\t{seq}", "never", None, "is not printable"),
        ("INV\u202e{seq}", "never", None, "U+202E RIGHT-TO-LEFT OVERRIDE is not printable"),
        ("INV\u200b{seq}", "never", None, "ZERO WIDTH SPACE is not printable"),
        ("INV\u2028{seq}", "never", None, "LINE SEPARATOR is not printable"),
        ("INV\u00a0{seq}", "never", None, "NO-BREAK SPACE is not printable"),
        ("INV\ud800{seq}", "never", None, "is not printable"),
        ("Re\u0301{seq}", "never", None, "normalization form NFC"),
        ("INV-", "never", None, "must contain the number: {seq} or {seq:0N}, once"),
        ("", "never", None, "must contain the number"),
        ("{seq}-{seq:03}", "never", None, "{seq} may appear only once"),
        ("{yyyy}{yyyy}{seq}", "yearly", None, "{yyyy} may appear only once"),
        ("{yyyy}{yy}{seq}", "yearly", None, "one year field only"),
        ("{seq}{check}{check}", "never", "luhn", "{check} may appear only once"),
        ("{seq}{check}", "never", None, "{check} needs the check_digit setting"),
        ("{seq}", "never", "luhn", "check_digit luhn needs a {check} field"),
        ("{check}{seq}", "never", "damm", "{check} must come after {seq}"),
        ("{seq}{check}", "never", "verhoeff", "check_digit must be one of luhn, damm, mod97"),
        (
            "{yyyy}{mm}-{seq}",
            "daily",
            None,
            "a daily template must contain its period's year ({yyyy} or {yy}), month ({mm}) and day",
        ),
        ("{yyyy}{mm}-{seq}", "daily", None, "missing day ({dd})"),
        ("{mm}{dd}-{seq}", "daily", None, "missing year ({yyyy} or {yy})"),
        ("{yyyy}-{seq}", "monthly", None, "missing month ({mm})"),
        ("INV-{seq}", "yearly", None, "two years would render the same numbers"),
        ("{yyyy}{mm}{dd}-{seq}", "monthly", None, "a monthly template may not contain {dd}"),
        ("{yyyy}{mm}-{seq}", "yearly", None, "a yearly template may not contain {mm}"),
        ("{yyyy}-{seq}", "never", None, "a sequence that never resets has no period"),
        ("{dd}-{seq}", "never", None, "has no period"),
        (None, "never", None, "template must be a string, got NoneType"),
        (["{seq}"], "never", None, "template must be a string, got list"),
        ("{seq}", "weekly", None, "reset must be one of never, daily, monthly, yearly"),
    ],
)
def test_hostile_templates(source: object, reset: str, check: str | None, fragment: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        Template.compile(source, reset, check)
    assert fragment in str(caught.value)
    assert len(str(caught.value)) < 400  # the message never echoes a long template back


@pytest.mark.parametrize("source", ["Nº{seq}", "Rechnung Ü-{seq}", "請求{seq}", "{seq} €", "#{seq}", "a/b?c&d=%{seq}"])
def test_printable_non_digit_literals_are_accepted(source: str) -> None:
    template = Template.compile(source)
    assert template.parse_text(template.render(None, 42)) == (None, 42)


# -- the design note's examples --------------------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "sequences-business.md"


def doc_examples() -> list[list[str]]:
    """The rows of the examples table in docs/sequences-business.md (between its ``examples`` markers)."""
    text = DOC.read_text()
    table = text[text.index("<!-- examples:") : text.index("<!-- /examples -->")].splitlines()[3:]
    return [[cell.strip().strip("`") for cell in row.strip().strip("|").split("|")] for row in table if row.strip()]


def test_the_design_notes_examples_render_as_printed() -> None:
    rows = doc_examples()
    assert len(rows) >= 5
    for source, reset, check, period, integer, text in rows:
        day = None if period == "none" else date.fromisoformat(period)
        template = Template.compile(source, reset, None if check == "none" else check)
        assert template.render(day, int(integer)) == text, source
        assert template.parse_text(text) == (day, int(integer))


# -- replacing a template (PATCH) ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "check_old", "check_new", "distinct"),
    [
        ("INV-{seq:06}", "INV-{seq:08}", None, None, True),  # the integer sits where it sat: equal texts, equal pairs
        ("INV-{seq}{check}", "INV-{seq}{check}", "luhn", "damm", True),
        ("INV-{seq}", "ORD-{seq}", None, None, True),
        ("INV-{seq}", "INV-{seq}-B", None, None, True),  # old texts end in a digit, new ones in B
        ("INV-{seq}", "INV-{seq:04}X", None, None, True),
        ("INV-{seq}", "INV-{seq}7", None, None, False),  # INV-57: old 57 or new 5
        ("{seq}", "{seq}{check}", None, "luhn", False),
        ("A{seq}{check}", "A{seq}{check}", "luhn", "mod97", False),
        ("INV-{seq}", "INV{seq}", None, None, True),  # the fourth character: '-' in old texts, a digit in new ones
        ("{seq}", "1{seq}", None, None, False),  # 15: old 15 or new 5
    ],
)
def test_keeps_distinct_from(old: str, new: str, check_old: str | None, check_new: str | None, distinct: bool) -> None:
    old_template = Template.compile(old, "never", check_old)
    assert Template.compile(new, "never", check_new).keeps_distinct_from(old_template) is distinct


def test_keeps_distinct_needs_one_reset() -> None:
    with pytest.raises(ValueError, match="never compared"):
        Template.compile("{yyyy}{seq}", "yearly").keeps_distinct_from(Template.compile("{seq}"))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_replacement_accepted_never_renders_an_old_text(data: st.DataObject) -> None:
    old, reset = data.draw(accepted_templates())
    new, new_reset = data.draw(accepted_templates().filter(lambda c: c[1] == reset))
    if not new.keeps_distinct_from(old):
        return
    for _ in range(5):
        day, n = data.draw(first_days(reset)), data.draw(INTEGERS)
        text = new.render(day, n)
        try:
            parsed = old.parse_text(text)
        except InvalidIdError:
            continue
        assert parsed == (day, n), (old.source, new.source, text)


def test_parse_accepts_only_what_render_writes() -> None:
    template = Template.compile("R{seq}{check}", "never", "mod97")
    n = next(n for n in range(1000) if template.render(None, n)[-2:] in ("97", "98"))
    text = template.render(None, n)
    other = text[:-2] + ("00" if text[-2:] == "97" else "01")  # the same remainder modulo 97
    assert ALGORITHMS["mod97"].valid(other[1:])
    with pytest.raises(InvalidIdError, match="is written"):
        template.parse_text(other)
