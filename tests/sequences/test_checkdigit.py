"""Check digits: published examples, python-stdnum as the reference, the column-wise forms against the scalar ones,
and the errors each algorithm is known to catch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from stdnum import damm as stdnum_damm
from stdnum import luhn as stdnum_luhn
from stdnum.iso7064 import mod_97_10 as stdnum_mod97

from app.sequences.checkdigit import ALGORITHMS, damm, damm_valid, luhn, luhn_valid, mod97, mod97_valid

DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=40)


@pytest.mark.parametrize(
    ("algorithm", "payload", "check"),
    [
        # Wikipedia, "Luhn algorithm": the account number 7992739871 takes the check digit 3.
        ("luhn", "7992739871", "3"),
        # The test card numbers of the card networks end in a Luhn digit: 4111 1111 1111 1111 (Visa).
        ("luhn", "411111111111111", "1"),
        # Rosetta Code, "Luhn test of credit card numbers": 49927398716 and 1234567812345670 pass.
        ("luhn", "4992739871", "6"),
        ("luhn", "123456781234567", "0"),
        # Wikipedia, "Damm algorithm": 572 takes the check digit 4 (interim digits 9, 7, 4).
        ("damm", "572", "4"),
        # python-stdnum's doctests of stdnum.iso7064.mod_97_10.
        ("mod97", "99991234567890121414", "90"),
        ("mod97", "4354111611551114", "31"),
        ("mod97", "22181321402534321446701611", "35"),
        # Wikipedia, "International Bank Account Number": GB82 WEST 1234 5698 7654 32, moved and turned to digits
        # (W=32 E=14 S=28 T=29, G=16 B=11): 3214282912345698765432 161182, which is 1 modulo 97.
        ("mod97", "32142829123456987654321611", "82"),
        # 794 takes 44: 79444 is 1 modulo 97 (the example usually quoted for ISO 7064; python-stdnum agrees).
        ("mod97", "794", "44"),
    ],
)
def test_published_examples(algorithm: str, payload: str, check: str) -> None:
    scheme = ALGORITHMS[algorithm]
    assert scheme.compute(payload) == check
    assert scheme.valid(payload + check)
    wrong = str((int(check[-1]) + 1) % 10)
    assert not scheme.valid(payload + check[:-1] + wrong)


@pytest.mark.parametrize(
    ("number", "valid"),
    [("79927398713", True), ("49927398716", True), ("49927398717", False), ("1234567812345678", False)],
)
def test_luhn_rosetta_table(number: str, valid: bool) -> None:
    assert luhn_valid(number) is valid


def test_iban_is_one_modulo_97() -> None:
    assert mod97_valid("3214282912345698765432161182")
    assert not mod97_valid("3214282912345698765432161183")


@given(DIGITS)
def test_against_python_stdnum(payload: str) -> None:
    assert luhn(payload) == stdnum_luhn.calc_check_digit(payload)
    assert damm(payload) == stdnum_damm.calc_check_digit(payload)
    assert mod97(payload) == stdnum_mod97.calc_check_digits(payload)
    for name, valid, reference in (
        ("luhn", luhn_valid, stdnum_luhn.is_valid),
        ("damm", damm_valid, stdnum_damm.is_valid),
        ("mod97", mod97_valid, stdnum_mod97.is_valid),
    ):
        if name != "mod97" or len(payload) >= 2:  # ours needs both check digits: stdnum takes "1" as valid
            assert valid(payload) is reference(payload), name
        assert valid(payload + ALGORITHMS[name].compute(payload)), name


@given(st.sampled_from(sorted(ALGORITHMS)), DIGITS, st.data())
def test_single_digit_errors_are_caught(name: str, payload: str, data: st.DataObject) -> None:
    scheme = ALGORITHMS[name]
    number = payload + scheme.compute(payload)
    at = data.draw(st.integers(0, len(number) - 1))
    other = data.draw(st.sampled_from([d for d in "0123456789" if d != number[at]]))
    assert not scheme.valid(number[:at] + other + number[at + 1 :])


@given(st.sampled_from(["damm", "mod97"]), DIGITS, st.data())
def test_adjacent_swaps_are_caught_by_damm_and_mod97(name: str, payload: str, data: st.DataObject) -> None:
    scheme = ALGORITHMS[name]
    number = payload + scheme.compute(payload)
    at = data.draw(st.integers(0, len(number) - 2))
    swapped = number[:at] + number[at + 1] + number[at] + number[at + 2 :]
    if swapped != number:
        assert not scheme.valid(swapped)


@given(
    st.sampled_from(sorted(ALGORITHMS)),
    st.text(alphabet="0123456789", max_size=12),
    st.text(alphabet="0123456789", max_size=6),
    st.lists(st.text(alphabet="0123456789", min_size=1, max_size=19), min_size=1, max_size=20).flatmap(
        lambda rows: st.just([r.zfill(max(len(x) for x in rows)) for r in rows])
    ),
)
def test_columns_match_the_scalar_form(name: str, prefix: str, suffix: str, rows: list[str]) -> None:
    scheme = ALGORITHMS[name]
    middle = np.array([[ord(c) - 48 for c in row] for row in rows], dtype=np.uint8)
    out = scheme.columns(prefix, middle, suffix)
    assert out.shape == (len(rows), scheme.width)
    assert [bytes(r).decode() for r in out] == [scheme.compute(prefix + row + suffix) for row in rows]


@pytest.mark.parametrize("payload", ["12a", "١٢", "１２", "1 2", "-1", "²"])
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_only_ascii_digits_are_read(name: str, payload: str) -> None:
    with pytest.raises(ValueError, match="ASCII decimal digits"):
        ALGORITHMS[name].compute(payload)
    with pytest.raises(ValueError, match="ASCII decimal digits"):
        ALGORITHMS[name].valid(payload)


def test_widths() -> None:
    assert {name: a.width for name, a in ALGORITHMS.items()} == {"luhn": 1, "damm": 1, "mod97": 2}
    assert not luhn_valid("") and not damm_valid("") and not mod97_valid("")
    assert mod97("0") == "98" and len(mod97("1")) == 2
