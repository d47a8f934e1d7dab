"""The decode page's time for 1,000 pasted lines, in a real browser (Debian's Chromium through Playwright) against
a real idmint server, and the server's share of it.

Each round takes 1,000 log-like lines (one fresh ID of each scheme in turn, as tests/e2e's 1,000-line test does)
and, alternated in the round:

* **paste**: the text is put in the page's input as a paste leaves it (its value set, then the ``input`` event of
  type ``insertFromPaste`` the page listens to) and the time is taken until the table holds its 1,000 rows
  (``#results`` done): the page's whole answer, ``POST /v1/decode`` and rendering (a paste is decoded at once);
* **fill**: the same through Playwright's ``fill`` (Chromium's text insertion, as typing: it costs Chromium itself
  seconds for 1,000 lines in any textarea, a bare one too, and the page then waits its 250 ms typing pause);
* **POST**: the same text POSTed to ``/v1/decode`` directly (the server's share).

Medians and extremes are printed. Goal: the paste under 1 s on the project's machine.

Usage: python bench/bench_decode_page.py [--rounds 7] [--lines 1000]
Needs: the dev extras (Playwright) and /usr/bin/chromium (.ci/install-debian-packages.sh). Nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.schemes import schemes  # noqa: E402
from tests.e2e.harness import launch_browser, run_server  # noqa: E402

ROWS_SHOWN = (
    "n => document.querySelector('#results').dataset.state === 'done'"
    " && document.querySelectorAll('#id-table-body tr[data-line]').length === n"
)
GUARD_MS = 300_000
IDLE = "() => document.querySelector('#results').dataset.state !== 'loading'"
PASTE = (
    "(input, text) => { input.value = text;"
    " input.dispatchEvent(new InputEvent('input', {bubbles: true, inputType: 'insertFromPaste'})); }"
)


def lines_of(base: str, count: int) -> str:
    names = tuple(schemes())
    per = -(-count // len(names))
    ids = {}
    for name in names:
        with urllib.request.urlopen(f"{base}/v1/ids/{name}?count={per}", timeout=60) as response:
            ids[name] = json.load(response)["ids"]
    return "\n".join(f"{i:04d} ERROR order {ids[names[i % len(names)]][i // len(names)]} failed" for i in range(count))


def post_decode(base: str, text: str) -> float:
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(
        f"{base}/v1/decode", data=body, headers={"content-type": "application/json"}, method="POST"
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--lines", type=int, default=1000)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    runs: dict[str, list[float]] = {"paste": [], "fill": [], "POST": []}
    with tempfile.TemporaryDirectory() as state, run_server(Path(state), Path(state) / "server.log") as server:
        with sync_playwright() as playwright:
            browser = launch_browser(playwright)
            try:
                page = browser.new_page(base_url=server.url)
                page.goto("/decode")
                page.wait_for_selector("#layout-list details", timeout=GUARD_MS)
                box = page.get_by_label("IDs, log lines or ticket text")
                for n in range(args.rounds):
                    text = lines_of(server.url, args.lines)
                    runs["POST"].append(post_decode(server.url, text))
                    for how in ("paste", "fill"):
                        box.fill("")
                        page.wait_for_function(IDLE, timeout=GUARD_MS)
                        started = time.perf_counter()
                        if how == "paste":
                            box.evaluate(PASTE, text)
                        else:
                            box.fill(text)
                        page.wait_for_function(ROWS_SHOWN, arg=args.lines, timeout=GUARD_MS)
                        runs[how].append(time.perf_counter() - started)
                    print(f"round {n + 1}: " + ", ".join(f"{how} {times[-1]:.3f} s" for how, times in runs.items()))
            finally:
                browser.close()
    print(f"{args.lines} lines, {args.rounds} rounds:")
    for how, times in runs.items():
        print(f"  {how:5}: median {statistics.median(times):.3f} s (min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
