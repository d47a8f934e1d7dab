"""The blocking client is generated from the asyncio one (``clients/python/scripts/unasync.py``): the committed
``_client.py`` is exactly what the script makes of ``_async_client.py``, so the two clients cannot drift apart."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.server import REPO

SCRIPT = REPO / "clients" / "python" / "scripts" / "unasync.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_sync_client_is_what_the_async_one_generates() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr


def test_check_fails_naming_the_difference_when_the_sync_file_was_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load_script()
    source = tmp_path / "_async_client.py"
    source.write_text("async def f(c: AsyncClient) -> None:\n    async with c:\n        await c.aclose()\n")
    target = tmp_path / "_client.py"
    monkeypatch.setattr(script, "FILES", {source: target})
    assert script.main([]) == 0
    assert "def f(c: Client) -> None:\n    with c:\n        c.close()\n" in target.read_text()
    assert script.main(["--check"]) == 0
    target.write_text(target.read_text().replace("c.close()", "c.close(); print('edited')"))
    assert script.main(["--check"]) == 1
    assert "edited" in capsys.readouterr().out


def test_substitutions_take_whole_words_only() -> None:
    script = load_script()
    assert script.unasync("await self._aclose_all(); await h.aclose()") == "self._aclose_all(); h.close()"
    assert script.unasync("httpx.AsyncClient, MyAsyncClientish") == "httpx.Client, MyAsyncClientish"
