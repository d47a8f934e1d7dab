"""The run's bytecode priming (tests/support/bytecode.py): pytest's rewritten-module cache written once on the
controller, then read, not rewritten, by every worker."""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

from tests.support.bytecode import prime_rewrites, rewritten_modules


def test_primed_modules_are_the_rewritten_code_and_written_once(pytestconfig: pytest.Config, tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "deep").mkdir(parents=True)
    (tests / "test_a.py").write_text("def test_a():\n    x = 1\n    assert x == 2\n")
    (tests / "deep" / "test_b.py").write_text("def test_b():\n    assert [1] == [1]\n")
    (tests / "deep" / "helper.py").write_text("VALUE = 1\n")  # not a test module: imported as is

    paths = rewritten_modules(pytestconfig, [tests])
    assert {tests / "test_a.py", tests / "deep" / "test_b.py"} <= set(paths)
    assert tests / "deep" / "helper.py" not in paths

    assert prime_rewrites(pytestconfig, [tests / "test_a.py", tests / "deep" / "test_b.py"], processes=1) == 2
    pyc = tests / "__pycache__" / ("test_a" + rewrite.PYC_TAIL)
    data = pyc.read_bytes()
    code = marshal.loads(data[16:])
    test_a = next(c for c in code.co_consts if getattr(c, "co_name", "") == "test_a")
    assert any(name.startswith("@py_") for name in test_a.co_names), "the cached code has pytest's rewritten asserts"

    # Fresh caches are kept; an edited source is rewritten again.
    assert prime_rewrites(pytestconfig, [tests / "test_a.py", tests / "deep" / "test_b.py"], processes=1) == 0
    (tests / "test_a.py").write_text("def test_a():\n    assert 3 == 3\n")
    assert prime_rewrites(pytestconfig, [tests / "test_a.py"], processes=1) == 1
    assert pyc.read_bytes() != data
