"""Imports run one way: no circle between modules of ``app`` (house style, habit 12).

Every ``import app...`` / ``from app... import ...`` in every module counts, wherever it sits (module level, inside a
function, under ``if TYPE_CHECKING``): a lazy import hides a circle from the interpreter, not from a reader. An
edge goes to the module named (``from app.storage.etcd import keys`` -> ``app.storage.etcd.keys``), not to the parent
packages Python also initialises. The cycles are the strongly connected components of that graph; there must be none
(a big scheme is a package whose modules import one way: codec, then generator, then scheme).

Layers: every module of ``app`` sits below the issuing core (``app/issuing/``), in it, or above it, and imports
never run from a lower layer to a higher one (:func:`test_the_issuing_core_sits_between_storage_and_the_api`).
"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"


def _modules() -> dict[str, Path]:
    found = {}
    for path in APP.rglob("*.py"):
        parts = list(path.relative_to(APP.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The app modules ``path`` imports anywhere in its body."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in modules else node.module)
    return {name for name in out if name in modules}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_cycle_between_app_modules() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    cycles = [sorted(c) for c in _cycles(graph)]
    assert not cycles, f"import cycles between app modules: {cycles}"


def test_cycle_finder_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]


def test_settings_sit_below_the_api() -> None:
    modules = _modules()
    assert not {m for m in _imports(modules["app.settings"], modules) if m.startswith("app.api")}


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


ISSUING = ("app.issuing",)
BELOW_ISSUING = (
    "app.errors",
    "app.times",
    "app.tasks",
    "app.logs",
    "app.settings",
    "app.bounds",
    "app.sql_functions",
    "app.decoding",
    "app.metrics",
    "app.schemes",
    "app.storage",
    "app.ledger",
    "app.sequences",
)
ABOVE_ISSUING = ("app.api", "app.public", "app.main", "app.serving", "app.cli")


def test_the_issuing_core_sits_between_storage_and_the_api() -> None:
    """``app/issuing/`` (the identity holder and its keeper, the issuers, the node, the fleet guard) imports the layers
    below it (the schemes and their identity pool, storage, the claim ledger, metrics, settings) and nothing above it
    (the API, public IDs, the app factory, the connection layer, the CLI); nothing below it imports it. The claim
    ledger is one of those below: the node is given it at construction and the holders tell it of their claims, so it
    knows nothing of the node."""
    modules = _modules()
    wrong = sorted(
        f"{name} -> {imported}"
        for name, path in modules.items()
        for imported in _imports(path, modules)
        if (_within(name, ISSUING) and _within(imported, ABOVE_ISSUING))
        or (_within(name, BELOW_ISSUING) and _within(imported, ISSUING))
    )
    assert not wrong, wrong


def test_every_module_of_app_is_on_a_layer() -> None:
    """A new top-level module of ``app`` is placed on purpose: below the issuing core, in it, or above it."""
    placed = (*BELOW_ISSUING, *ISSUING, *ABOVE_ISSUING)
    assert sorted(name for name in _modules() if name != "app" and not _within(name, placed)) == []


BACKEND_PACKAGES = ("app.storage.embedded", "app.storage.etcd", "app.storage.postgres", "psycopg", "psycopg_pool")


def test_nothing_outside_app_storage_imports_a_backend_or_its_client_library() -> None:
    """The node, the API, the CLI, the ledger and the sequences ask ``Storage`` and its capabilities; only
    ``app/storage/`` knows a backend's modules, the etcd client, psycopg or its pool."""
    found = []
    for name, path in sorted(_modules().items()):
        if name == "app.storage" or name.startswith("app.storage."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            found += [
                f"{name}: {imported}"
                for imported in names
                if any(imported == p or imported.startswith(p + ".") for p in BACKEND_PACKAGES)
            ]
    assert not found, found


def test_starting_the_app_imports_no_http_client() -> None:
    """``idmint serve`` starts by importing :mod:`app.main`: the HTTP client (httpx, and with it rich, pygments,
    click's CLI) is imported only where a node asks a peer fleet or an etcd, not on every start."""
    import subprocess
    import sys

    probe = "import sys, app.main, app.cli; print(sorted(m for m in ('httpx', 'rich') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
