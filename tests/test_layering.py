"""The package layering rule, checked on the source: every import of every module (at module
level, inside functions, and under TYPE_CHECKING) is an edge; serving never reaches the compiler,
the artifacts package is a leaf, and no modules import each other in a circle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import zerolayer

ROOT = Path(zerolayer.__file__).parent
SERVING = (
    "engines",
    "replicas",
    "gateway",
    "tokenfix",
    "chunker",
    "store",
    "conversations",
    "files",
    "batches",
    "artifacts",
    "billing",
)
# the only modules outside the compiler that may call it: the launcher's one entry, and the CLI
# the launcher and a cluster's prepare step build missing artifacts; the CLI runs the compiler
COMPILER_CALLERS = (
    "zerolayer.serve.launcher",
    "zerolayer.serve.builds",
    "zerolayer.cluster.prepare",
    "zerolayer.cli",
)


def _module(path: Path) -> str:
    parts = ["zerolayer", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    return (ROOT / rel).with_suffix(".py").exists() or (ROOT / rel / "__init__.py").exists()


def _edges(path: Path) -> set[str]:
    """The zerolayer modules a file imports (a name imported from a package is its submodule
    when one exists by that name)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("zerolayer")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("zerolayer"):
            base = node.module or ""
            subs = {f"{base}.{a.name}" for a in node.names if _exists(f"{base}.{a.name}")}
            out |= subs or {base}
            if len(subs) < len(node.names):
                out.add(base)
    return out


def _graph() -> dict[str, set[str]]:
    return {_module(p): _edges(p) for p in ROOT.rglob("*.py")}


DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def parse_table(text: str) -> dict[str, set[str]]:
    """The "may import" table of docs/architecture.md: package -> the packages it may import.
    A row's packages are its backticked names outside parentheses; its allowance is "nothing",
    "everything", or "layer N" / "layers A-B" and backticked package names."""
    section = text.split("## Packages and the layering rule", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            names = re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cells[1]))
            rows.append((int(cells[0]), names, cells[2]))
    layer = {name: n for n, names, _ in rows for name in names}
    table: dict[str, set[str]] = {}
    for _n, names, allowed in rows:
        may: set[str] = set()
        if allowed == "everything":
            may = set(layer)
        elif allowed != "nothing":
            for lo, hi in re.findall(r"layers? (\d+)(?:-(\d+))?", allowed):
                may |= {p for p, n in layer.items() if int(lo) <= n <= int(hi or lo)}
            may |= set(re.findall(r"`([a-z_]+)`", allowed))
        for name in names:
            table[name] = may - {name}
    return table


def _package(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def violations(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    """Every import of one package by another that the table does not allow."""
    return sorted(
        f"{mod} imports {dep}"
        for mod, deps in graph.items()
        for dep in deps
        if _package(mod)
        and _package(dep)
        and _package(dep) != _package(mod)
        and _package(dep) not in table.get(_package(mod), set())
    )


def test_packages_import_only_what_the_table_allows() -> None:
    graph = _graph()
    table = parse_table(DOC.read_text())
    assert {_package(m) for m in graph} - {""} == set(table), "each package needs a row"
    assert violations(graph, table) == []


def test_the_table_reads_as_written() -> None:
    table = parse_table(DOC.read_text())
    assert table["errors"] == set()
    layer_1 = {"artifacts", "protocol", "toolcalls"}
    assert table["config"] == {"errors", "ray_private", *layer_1}
    assert table["billing"] == {"errors", "ray_private", *layer_1, "config", "store"}
    assert "replicas" not in table["gateway"] and "store" in table["gateway"]
    assert "collapse" in table["serve"] and "serve" not in table["serve"]


def test_a_planted_import_is_refused() -> None:
    """An edge the table does not list fails, the same layer included (gateway -> replicas)."""
    table = parse_table(DOC.read_text())
    graph = {
        "zerolayer.gateway.live": {"zerolayer.replicas.live", "zerolayer.store.keyspace"},
        "zerolayer.billing.ledger": {"zerolayer.store.keyspace"},
        "zerolayer.store.keys": {"zerolayer.gateway.http"},
    }
    assert violations(graph, table) == [
        "zerolayer.gateway.live imports zerolayer.replicas.live",
        "zerolayer.store.keys imports zerolayer.gateway.http",
    ]


def test_the_walker_sees_known_imports() -> None:
    graph = _graph()
    assert "zerolayer.protocol" in graph["zerolayer.gateway.pipeline"]
    assert "zerolayer.collapse.missing" in graph["zerolayer.collapse"]
    assert "zerolayer.engines.torch_engine.kernels" in graph["zerolayer.engines.torch_engine.model"]


def test_serving_never_imports_the_compiler() -> None:
    bad = [
        f"{mod} imports {dep}"
        for mod, deps in _graph().items()
        for dep in deps
        if dep.startswith("zerolayer.collapse")
        and not mod.startswith("zerolayer.collapse")
        and (mod.split(".")[1] in SERVING or mod not in COMPILER_CALLERS)
    ]
    assert bad == []


def test_artifacts_is_a_leaf() -> None:
    allowed = ("zerolayer.artifacts", "zerolayer.errors")
    bad = [
        f"{mod} imports {dep}"
        for mod, deps in _graph().items()
        if mod.startswith("zerolayer.artifacts")
        for dep in deps
        if not dep.startswith(allowed)
    ]
    assert bad == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
