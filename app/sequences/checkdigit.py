"""Check digits over decimal digits: Luhn, Damm, and ISO 7064 MOD 97-10.

A sequence's template may end a number with ``{check}``: a check digit (two for MOD 97-10) computed over every
decimal digit (ASCII ``0``-``9``; a template holds no other kind, see :mod:`app.sequences.template`) that comes
before it in the rendered text. Three algorithms, by the name a sequence's ``check_digit`` setting takes::

    name    width  algorithm                                        detects
    luhn    1      Luhn (ISO/IEC 7812-1 annex B, "mod 10")           every single-digit error, most adjacent swaps
    damm    1      Damm (H. M. Damm 2004; Wikipedia's table)         every single-digit error and adjacent swap
    mod97   2      ISO 7064 MOD 97-10 (the IBAN's check digits)       every single-digit error and adjacent swap

Each comes as a pair: ``compute(payload) -> check text`` and ``valid(payload + check) -> bool``, the second
being what a number read back is checked with; :data:`ALGORITHMS` maps the names to :class:`CheckDigit` records
that also carry the column-wise (numpy) form a template renders long runs with. The scalar and column-wise forms
are tested against each other, against published examples and against python-stdnum (``stdnum.luhn``,
``stdnum.damm``, ``stdnum.iso7064.mod_97_10``), which the implementation follows.

Pure functions: no I/O. A payload that is not ASCII decimal digits is a ValueError naming the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

CheckDigitName = Literal["luhn", "damm", "mod97"]
CHECK_DIGIT_NAMES: tuple[CheckDigitName, ...] = ("luhn", "damm", "mod97")

ZERO = ord("0")
Digits = npt.NDArray[np.uint8]
"""A column block of digit *values* (0..9), one row per number, most significant column first."""

LUHN_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)
"""Luhn: a doubled digit's contribution (2d, its two digits summed when 2d > 9)."""
_LUHN_DOUBLED = np.asarray(LUHN_DOUBLED, dtype=np.int64)

DAMM_TABLE = (
    (0, 3, 1, 7, 5, 9, 8, 6, 4, 2),
    (7, 0, 9, 2, 1, 5, 4, 8, 6, 3),
    (4, 2, 0, 6, 8, 7, 1, 3, 5, 9),
    (1, 7, 5, 0, 9, 8, 3, 4, 2, 6),
    (6, 1, 2, 3, 0, 4, 5, 9, 7, 8),
    (3, 6, 7, 4, 2, 0, 9, 5, 8, 1),
    (5, 8, 6, 9, 7, 2, 0, 1, 3, 4),
    (8, 9, 4, 5, 3, 6, 2, 0, 1, 7),
    (9, 4, 3, 8, 6, 1, 7, 2, 0, 5),
    (2, 5, 8, 1, 4, 3, 6, 7, 9, 0),
)
"""Damm's totally anti-symmetric quasigroup of order 10 as Wikipedia ("Damm algorithm") and python-stdnum print it:
the interim digit is ``DAMM_TABLE[interim][digit]``, starting at 0; the check digit is the final interim digit."""

MOD97 = 97
MOD97_RADIX = 10
_TENS_ONES = np.asarray([10, 1], dtype=np.int64)


def _digit_values(payload: str) -> list[int]:
    if not (payload.isascii() and (payload.isdigit() or not payload)):
        raise ValueError(f"a check digit is computed over ASCII decimal digits only, got {payload[:40]!r}")
    return [ord(c) - ZERO for c in payload]


# -- Luhn ------------------------------------------------------------------------------------------------------------


def _luhn_sum(values: list[int], check_appended: bool) -> int:
    """Luhn's weighted sum: counting from the right, starting at 0 with the check digit's place, every odd place is
    doubled (``check_appended`` False: the payload's last digit is place 1)."""
    total = 0
    doubled = not check_appended
    for d in reversed(values):
        total += LUHN_DOUBLED[d] if doubled else d
        doubled = not doubled
    return total


def luhn(payload: str) -> str:
    """The Luhn check digit of ``payload`` (ASCII digits), one character: ``luhn("7992739871") == "3"``."""
    return str(-_luhn_sum(_digit_values(payload), False) % 10)


def luhn_valid(number: str) -> bool:
    """Whether ``number`` (payload and its Luhn check digit, ASCII digits) passes Luhn's check."""
    return bool(number) and _luhn_sum(_digit_values(number), True) % 10 == 0


def _luhn_columns(prefix: str, middle: Digits, suffix: str) -> Digits:
    """Column-wise :func:`luhn` of ``prefix + row + suffix`` for each row of ``middle``."""
    width = middle.shape[1]
    constant = _luhn_sum(_digit_values(prefix + "0" * width + suffix), False)
    places = len(suffix) + width - np.arange(width)  # 1 = the payload's last digit (doubled)
    doubled = places % 2 == 1
    total: npt.NDArray[np.int64] = _LUHN_DOUBLED[middle[:, doubled]].sum(axis=1) + middle[:, ~doubled].sum(axis=1)
    return ((-(total + constant) % 10) + ZERO).astype(np.uint8).reshape(-1, 1)


# -- Damm ------------------------------------------------------------------------------------------------------------


def _damm_interim(values: list[int], interim: int = 0) -> int:
    for d in values:
        interim = DAMM_TABLE[interim][d]
    return interim


def damm(payload: str) -> str:
    """The Damm check digit of ``payload`` (ASCII digits), one character: ``damm("572") == "4"``."""
    return str(_damm_interim(_digit_values(payload)))


def damm_valid(number: str) -> bool:
    """Whether ``number`` (payload and its Damm check digit) passes Damm's check (the final interim digit is 0)."""
    return bool(number) and _damm_interim(_digit_values(number)) == 0


def _damm_columns(prefix: str, middle: Digits, suffix: str) -> Digits:
    table = np.asarray(DAMM_TABLE, dtype=np.uint8)
    interim = np.full(middle.shape[0], _damm_interim(_digit_values(prefix)), dtype=np.uint8)
    for col in range(middle.shape[1]):
        interim = table[interim, middle[:, col]]
    after = np.asarray([_damm_interim(_digit_values(suffix), start) for start in range(10)], dtype=np.uint8)
    return (after[interim] + ZERO).astype(np.uint8).reshape(-1, 1)


# -- ISO 7064 MOD 97-10 ----------------------------------------------------------------------------------------------


def mod97(payload: str) -> str:
    """The two ISO 7064 MOD 97-10 check digits of ``payload`` (ASCII digits): ``98 - (payload * 100 mod 97)``, zero
    padded, so that ``payload + check`` is 1 modulo 97 (the IBAN's rule). ``mod97("794") == "44"``."""
    _digit_values(payload)
    value = int(payload) if payload else 0
    return f"{MOD97 + 1 - value * MOD97_RADIX**2 % MOD97:02d}"


def mod97_valid(number: str) -> bool:
    """Whether ``number`` (payload and its two MOD 97-10 check digits) is 1 modulo 97."""
    _digit_values(number)
    return len(number) >= 2 and int(number) % MOD97 == 1


def _mod97_columns(prefix: str, middle: Digits, suffix: str) -> Digits:
    width = middle.shape[1]
    weights = np.asarray([pow(MOD97_RADIX, width - 1 - col, MOD97) for col in range(width)], dtype=np.int64)
    remainder = (middle @ weights) % MOD97  # each row's value modulo 97 (at most 19 x 9 x 96: no overflow)
    head = (int(prefix) if prefix else 0) * pow(MOD97_RADIX, width + len(suffix), MOD97)
    tail = int(suffix) if suffix else 0
    value = (remainder * pow(MOD97_RADIX, len(suffix), MOD97) + head + tail) % MOD97
    check = MOD97 + 1 - value * MOD97_RADIX**2 % MOD97
    return (check[:, None] // _TENS_ONES % 10 + ZERO).astype(np.uint8)


# -- the table -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckDigit:
    """One algorithm: its ``name``, the ``width`` of its check text (digits), and its three forms.

    ``compute(payload) -> check text``; ``valid(payload + check) -> bool``; ``columns(prefix, middle, suffix)``:
    the check texts of ``prefix + row + suffix`` for every row of ``middle`` (digit values, shape (n, w)) as an
    (n, width) array of ASCII digits.
    """

    name: CheckDigitName
    width: int
    compute: Callable[[str], str]
    valid: Callable[[str], bool]
    columns: Callable[[str, Digits, str], Digits]


ALGORITHMS: dict[str, CheckDigit] = {
    "luhn": CheckDigit("luhn", 1, luhn, luhn_valid, _luhn_columns),
    "damm": CheckDigit("damm", 1, damm, damm_valid, _damm_columns),
    "mod97": CheckDigit("mod97", 2, mod97, mod97_valid, _mod97_columns),
}
