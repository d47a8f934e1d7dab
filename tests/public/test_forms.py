"""Public forms (app/public/forms.py): every scheme, form and key round-trips; the public texts keep no order and
no per-day count; a wrong secret is refused; the key file's rules."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import ConfigError
from app.public.forms import SEQUENCE_FAMILY, Public
from app.public.keys import PublicKeys, load_key_file
from app.schemes import schemes
from app.schemes.base import Scheme
from app.schemes.typeid import TypeId
from tests.public.support import OTHER_SECRET, SECRET_1, SECRET_2, key_file

MS_2026 = 1_780_000_000_000
DAY_MS = 86_400_000
UUIDV7_FLAGS = 7 << 76 | 0b10 << 62


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    return {
        "one": key_file(d / "one.toml", (1, SECRET_1)),
        "two": key_file(d / "two.toml", (1, SECRET_1), (2, SECRET_2)),
        "other": key_file(d / "other.toml", (1, OTHER_SECRET)),
    }


def public(path: Path) -> Public:
    return Public(PublicKeys(path), schemes())


def texts_of(p: Public, scheme: Scheme, values: list[int], prefix: str = "") -> list[str]:
    batch = type("B", (), {"prefix": prefix})()
    return p.lines(p.ring(), scheme, values, batch).decode().splitlines()


def uuidv7(ts: int, rand_a: int, rand_b: int) -> int:
    return ts << 80 | UUIDV7_FLAGS | rand_a << 64 | rand_b


times = st.integers(0, (1 << 44) - 1)
uuidv7s = st.builds(uuidv7, times, st.integers(0, (1 << 12) - 1), st.integers(0, (1 << 62) - 1))
ulids = st.builds(lambda t, r: t << 80 | r, times, st.integers(0, (1 << 80) - 1))
int64s = st.integers(0, (1 << 64) - 1)
int63s = st.integers(0, (1 << 63) - 1)
VALUES = {"uuidv7": uuidv7s, "ulid": ulids, "typeid": uuidv7s, "eight-byte": int64s, "snowflake": int63s}


@pytest.mark.parametrize("which", ["one", "two"])
@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_scheme_round_trips_under_every_key(files: dict[str, Path], which: str, name: str) -> None:
    p = public(files[which])
    scheme = schemes()[name]
    key_id = 2 if which == "two" else 1

    @settings(max_examples=60, deadline=None)
    @given(st.lists(VALUES[name], min_size=1, max_size=20), st.sampled_from(["", "user", "a_b"]))
    def check(values: list[int], prefix: str) -> None:
        texts = texts_of(p, scheme, values, prefix)
        assert len(texts) == len(values)
        for text, value, found in zip(texts, values, p.reveal(texts), strict=True):
            assert not isinstance(found, str), (text, found)
            got_scheme, got, got_key = found
            assert got_scheme is not None and got_scheme.name == name
            assert got == value and got_key == key_id
            if name == "typeid":
                assert isinstance(got, TypeId) and got.prefix == prefix
                assert text.startswith(f"{prefix}_" if prefix else "")

    check()


@settings(max_examples=200, deadline=None)
@given(st.lists(int63s, min_size=1, max_size=20))
def test_sequence_integers_round_trip(values: list[int]) -> None:
    p = _two()
    texts = p.sequence_lines(p.ring(), values).decode().splitlines()
    assert all(len(t) == 18 for t in texts)
    assert [f for f in p.reveal(texts)] == [(None, v, 2) for v in values]


_cache: dict[str, Public] = {}


def _two() -> Public:
    if "two" not in _cache:
        import tempfile

        d = Path(tempfile.mkdtemp())
        _cache["two"] = public(key_file(d / "k.toml", (1, SECRET_1), (2, SECRET_2)))
    return _cache["two"]


def test_shapes_of_the_public_forms(files: dict[str, Path]) -> None:
    p = public(files["two"])
    u = texts_of(p, schemes()["uuidv7"], [uuidv7(MS_2026, 5, 7)])[0]
    assert len(u) == 36 and u[14] == "4" and u[19] in "89ab" and u[12] == "2"  # v4, variant 10, key 2 in the clear
    ulid = texts_of(p, schemes()["ulid"], [MS_2026 << 80 | 99])[0]
    assert len(ulid) == 26 and ulid[0] in "GHJKMNPQ"
    t = texts_of(p, schemes()["typeid"], [uuidv7(MS_2026, 5, 7)], "user")[0]
    assert t.startswith("user_") and len(t) == 31
    e = texts_of(p, schemes()["eight-byte"], [12345])[0]
    assert len(e) == 18 and e[-1] == "2"


def test_texts_no_key_opens_are_refused(files: dict[str, Path]) -> None:
    p = public(files["one"])
    for text in [
        "",
        "x",
        "0" * 18,
        "Z" * 18,
        "00000000-0000-4000-8000-000000000000",
        "G" * 26,
        "user_" + "0" * 26,
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",
    ]:
        assert isinstance(p.reveal([text])[0], str), text


def test_a_different_secret_under_the_same_key_id_refuses_64_bit_texts(files: dict[str, Path]) -> None:
    """Encode under one secret, reveal under another with the same id: at least 99.9 % refused (expected: all
    but 3 in 2**21)."""
    mine, theirs = public(files["one"]), public(files["other"])
    rng = random.Random(7)
    values = [rng.getrandbits(64) for _ in range(20_000)]
    texts = texts_of(mine, schemes()["eight-byte"], values)
    opened = sum(1 for f in theirs.reveal(texts) if not isinstance(f, str))
    assert opened / len(texts) <= 0.001
    print(
        f"wrong secret: {opened} of {len(texts)} 64-bit texts opened ({100 * (1 - opened / len(texts)):.3f} % refused)"
    )


def test_a_different_secret_reads_a_128_bit_text_as_a_wrong_time(files: dict[str, Path]) -> None:
    """The UUID form has no check: a wrong secret reveals an ID, but at another time (docs/public-ids.md)."""
    mine, theirs = public(files["one"]), public(files["other"])
    value = uuidv7(MS_2026, 1, 2)
    text = texts_of(mine, schemes()["uuidv7"], [value])[0]
    found = theirs.reveal([text])[0]
    assert not isinstance(found, str) and found[1] != value and found[1] & ((1 << 80) - 1) == value & ((1 << 80) - 1)


def _spearman(xs: list[str]) -> float:
    n = len(xs)
    order = sorted(range(n), key=lambda i: xs[i])
    rank = [0] * n
    for r, i in enumerate(order):
        rank[i] = r
    d2 = sum((i - rank[i]) ** 2 for i in range(n))
    return 1 - 6 * d2 / (n * (n * n - 1))


def _chi_square(counts: list[list[int]]) -> float:
    rows = [sum(r) for r in counts]
    cols = [sum(c) for c in zip(*counts, strict=True)]
    total = sum(rows)
    return sum(
        (counts[i][j] - rows[i] * cols[j] / total) ** 2 / (rows[i] * cols[j] / total)
        for i in range(len(rows))
        for j in range(len(cols))
        if cols[j]
    )


# chi-square critical values at p = 0.001 (df = bins - 1 for two rows)
CHI2_CRITICAL_0_001 = {15: 37.70, 31: 61.10}


def _issued_in_order(name: str, start_ms: int, n: int, rng: random.Random) -> list[int]:
    """``n`` IDs of ``name`` as its generator issues them, one every 8.64 s from ``start_ms``."""
    step = DAY_MS // n
    if name in ("uuidv7", "typeid"):
        return [uuidv7(start_ms + i * step, rng.getrandbits(12), rng.getrandbits(62)) for i in range(n)]
    if name == "ulid":
        return [(start_ms + i * step) << 80 | rng.getrandbits(80) for i in range(n)]
    if name == "snowflake":  # Twitter's layout: ms since its epoch << 22 | worker << 12 | sequence
        return [(start_ms - 1288834974657 + i * step) << 22 | 7 << 12 for i in range(n)]
    if name == "eight-byte":
        return [(start_ms + i * step) << 16 | 3 << 6 for i in range(n)]
    return list(range(start_ms % 1000 + 1, start_ms % 1000 + 1 + n))  # a sequence


@pytest.mark.parametrize("name", ["uuidv7", "ulid", "typeid", "snowflake", "eight-byte", "sequence"])
def test_public_texts_keep_no_order_and_no_per_day_count(files: dict[str, Path], name: str) -> None:
    p = public(files["one"])
    rng = random.Random(name)
    n = 10_000

    def texts(values: list[int]) -> list[str]:
        if name == "sequence":
            return p.sequence_lines(p.ring(), values).decode().splitlines()
        return texts_of(p, schemes()[name], values)

    day1 = texts(_issued_in_order(name, MS_2026, n, rng))
    rho = _spearman(day1)
    assert abs(rho) <= 0.05, rho
    day2 = texts(
        _issued_in_order(name, MS_2026 + DAY_MS, n, rng) if name != "sequence" else list(range(n + 1, 2 * n + 1))
    )

    # The first character after any fixed part: hex for the UUID form, base32 otherwise.
    def bucket(text: str) -> int:
        if name in ("uuidv7",):
            return int(text[0], 16)
        return "0123456789ABCDEFGHJKMNPQRSTVWXYZ".index(text[-26 if name in ("ulid", "typeid") else 0].upper()) % (
            8 if name == "ulid" else 32
        )

    bins = 16 if name == "uuidv7" else 8 if name in ("ulid", "typeid") else 32
    counts = [[0] * bins, [0] * bins]
    for row, day in enumerate((day1, day2)):
        for text in day:
            counts[row][bucket(text) % bins] += 1
    chi2 = _chi_square(counts)
    df = bins - 1
    critical = CHI2_CRITICAL_0_001.get(df, 24.32)  # df 7: 24.32
    assert chi2 < critical, (chi2, counts)
    spread = sum(1 for c in counts[0] if c)
    assert spread == bins  # every prefix is used within one day
    print(f"{name}: Spearman {rho:+.4f}, chi-square day1 vs day2 {chi2:.1f} (df {df}, critical {critical})")


def test_sequence_family_is_its_own(files: dict[str, Path]) -> None:
    """A sequence integer's text never reveals as a scheme's ID, nor a scheme's as a sequence's."""
    p = public(files["one"])
    seq = p.sequence_lines(p.ring(), [42]).decode().split()[0]
    eight = texts_of(p, schemes()["eight-byte"], [42])[0]
    assert seq != eight
    assert p.reveal([seq])[0] == (None, 42, 1)
    found = p.reveal([eight])[0]
    assert not isinstance(found, str) and found[0] is not None and found[0].name == "eight-byte"
    assert SEQUENCE_FAMILY not in {s.public_split.family for s in schemes().values() if s.public_split}


# -- the key file -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("[[key]]\nid = 1\nsecret = 'zz'\n", "line 1 .*secret must be 64 hex digits.*got 2 characters"),
        (
            '[[key]]\nid = 1\nsecret = "' + "1" * 64 + '"\n\n[[key]]\nid = 16\nsecret = "' + "2" * 64 + '"\n',
            "line 5 .*id must be a whole number in 1..15, got 16",
        ),
        (
            '[[key]]\nid = 1\nsecret = "' + "1" * 64 + '"\n[[key]]\nid = 1\nsecret = "' + "2" * 64 + '"\n',
            "line 4 .*id 1 appears twice",
        ),
        ("[[key]]\nid = 1\nsecret = \n", "not TOML: .*line 3"),
        ("", "no \\[\\[key\\]\\] table"),
        ('[[key]]\nid = 1\nsecret = "' + "1" * 64 + '"\nname = "x"\n', "unknown member 'name'"),
        ('[[key]]\nsecret = "' + "1" * 64 + '"\n', "id must be a whole number in 1..15, got none"),
    ],
)
def test_malformed_key_files_name_the_line_and_rule(tmp_path: Path, text: str, rule: str) -> None:
    path = tmp_path / "k.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rule) as caught:
        load_key_file(path)
    assert "2" * 64 not in str(caught.value) and "1" * 64 not in str(caught.value)


def test_a_bad_secret_is_never_echoed(tmp_path: Path) -> None:
    secret = "g" + "1" * 63  # one character off: must not be shown
    path = tmp_path / "k.toml"
    path.write_text(f'[[key]]\nid = 3\nsecret = "{secret}"\n')
    with pytest.raises(ConfigError) as caught:
        load_key_file(path)
    assert secret not in str(caught.value) and "1" * 20 not in str(caught.value)


def test_the_highest_id_masks(files: dict[str, Path]) -> None:
    ring = load_key_file(files["two"])
    assert ring.current.id == 2 and sorted(ring.by_id) == [1, 2]
    assert "secret" not in repr(ring.current) and SECRET_2 not in repr(ring)
