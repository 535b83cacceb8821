"""The package map of docs/DESIGN.md, enforced: which package may import which, no import cycles
between packages, torch only where tensors live, and absolute imports everywhere.

Every ``import`` statement counts, also those inside functions (a lazy import is still a
dependency).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

REPO = Path(__file__).resolve().parents[2]
ROOT_FOLDERS = ("radixlm", "radix_cache", "constrained", "lang", "runtime", "kernels")
RUNTIME_PARTS = ("router", "server", "engine", "scheduler", "model", "chat_formats", "tokenizer",
                 "checkpoints", "testing")

# unit -> the units it may import (docs/DESIGN.md draws the same picture)
ALLOWED: dict[str, set[str]] = {
    "radixlm.cli": {"radixlm", "runtime", "runtime.router", "runtime.server", "runtime.engine",
                    "runtime.checkpoints"},  # hub ids resolved before the replicas start
    "radixlm": set(),  # the facade names its exports lazily, by string
    "lang": {"runtime", "runtime.chat_formats", "runtime.tokenizer"},  # the engine comes in as an object
    "runtime.server": {"radixlm", "runtime", "runtime.chat_formats", "constrained"},  # engine: an object
    "runtime.router": {"runtime", "runtime.server", "radix_cache", "torch"},  # top floor; torch: GPU count
    "runtime.engine": {"runtime", "runtime.scheduler", "runtime.model", "runtime.tokenizer",
                       "runtime.checkpoints", "constrained"},
    "runtime.model": {"runtime", "runtime.scheduler", "kernels", "torch"},
    "runtime.scheduler": {"runtime", "radix_cache"},
    "runtime.chat_formats": {"constrained"},  # HTTP-free: never the server or the engine
    "runtime.tokenizer": set(),
    "runtime.checkpoints": set(),
    "runtime.testing": {"runtime.checkpoints"},  # test and benchmark checkpoints: never imported by serving code
    "runtime": set(),
    "constrained": {"torch"},
    "constrained.testing": {"constrained", "torch"},
    "kernels": {"torch"},
    "kernels.testing": {"kernels", "torch"},
    "radix_cache": set(),
}


CLI_MODULES = ("__main__", "launch_server", "startup", "flags")  # radixlm/'s CLI modules


def unit_of(module: str) -> str | None:
    """The package unit of a module name (None for modules outside radixlm and torch)."""
    parts = module.split(".")
    if parts[0] == "torch":
        return "torch"
    if parts[0] != "radixlm":
        return None
    if len(parts) == 1:
        return "radixlm"
    if parts[1] in CLI_MODULES:
        return "radixlm.cli"
    if parts[1] == "runtime":
        return f"runtime.{parts[2]}" if len(parts) > 2 and parts[2] in RUNTIME_PARTS else "runtime"
    if len(parts) > 2 and parts[2] == "testing":
        return f"{parts[1]}.testing"
    return parts[1]


def package_modules() -> dict[str, Path]:
    """Installed module name -> source file, for every module of the root folders."""
    out = {}
    for folder in ROOT_FOLDERS:
        base = REPO / folder
        prefix = ["radixlm"] if folder == "radixlm" else ["radixlm", folder]
        for path in base.rglob("*.py"):
            parts = [*prefix, *path.relative_to(base).with_suffix("").parts]
            out[".".join(parts).removesuffix(".__init__")] = path
    return out


def import_edges() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the modules that import it (relative imports raise)."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module, path in package_modules().items():
        src = unit_of(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path.relative_to(REPO)}:{node.lineno}: relative import; use radixlm.…")
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                dst = unit_of(name)
                if dst is not None and dst != src:
                    edges[src][dst].append(module)
    return edges


def test_imports_follow_the_package_map():
    bad = [f"{src} -> {dst} (in {', '.join(sorted(set(mods)))})"
           for src, targets in import_edges().items() for dst, mods in targets.items()
           if dst not in ALLOWED[src]]
    assert not bad, "imports outside docs/DESIGN.md's map:\n" + "\n".join(bad)


def test_serving_code_never_imports_the_testing_package():
    """``runtime/testing/`` builds test and benchmark checkpoints; no package of the served code (the
    testing packages aside) may import it, lazily or not."""
    bad = [f"{src} (in {', '.join(sorted(set(mods)))})" for src, dsts in import_edges().items()
           for dst, mods in dsts.items() if dst == "runtime.testing" and not src.endswith(".testing")]
    assert not bad, "serving code imports radixlm.runtime.testing: " + "; ".join(bad)
    assert "runtime.testing" not in set().union(*(v for k, v in ALLOWED.items() if not k.endswith(".testing")))


def test_no_import_cycles_between_packages():
    graph = {src: set(t) - {"torch"} for src, t in import_edges().items()}
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


# What serving code outside constrained/ may import of it: the package's public names, and the grammar IR
# (the builder that tool-call formats write their grammars with).
CONSTRAINED_API = ("radixlm.constrained", "radixlm.constrained.ir", "radixlm.constrained.ir.builder")


def test_other_packages_use_constrained_through_its_api():
    bad = []
    for module, path in package_modules().items():
        if unit_of(module) in ("constrained", "constrained.testing"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            bad += [f"{module}: {n}" for n in names
                    if n.startswith("radixlm.constrained") and n not in CONSTRAINED_API]
    assert not bad, "imports of constrained/ internals:\n" + "\n".join(bad)


def test_the_checker_sees_a_forbidden_edge():
    assert unit_of("radixlm.runtime.scheduler.req") == "runtime.scheduler"
    assert unit_of("radixlm.runtime.sampling_params") == "runtime"
    assert unit_of("radixlm.kernels.testing.random_batch") == "kernels.testing"
    assert "torch" not in ALLOWED["runtime.scheduler"] and "runtime.model" not in ALLOWED["runtime.scheduler"]
    assert unit_of("radixlm.runtime.chat_formats.reasoning.base") == "runtime.chat_formats"
    assert not {"runtime.server", "runtime.engine"} & ALLOWED["runtime.chat_formats"], "chat formats are HTTP-free"
    assert import_edges()["runtime.engine"]["runtime.scheduler"], "the engine imports the scheduler"


@pytest.mark.parametrize("package", ["radixlm.runtime.scheduler", "radixlm.radix_cache", "radixlm.runtime.server_args",
                                     "radixlm.runtime.sampling_params", "radixlm"])
def test_light_packages_do_not_import_torch(package):
    code = f"import sys, {package}; assert 'torch' not in sys.modules, 'torch imported by {package}'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _constrained_node(module: str) -> str:
    """A module's node in ``constrained/``'s floor count: a root module, or a sub-package whole."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 3 else module


def _constrained_imports() -> dict[str, set[str]]:
    """``constrained/`` module -> the ``radixlm.constrained`` modules it imports (every statement,
    lazy ones too; ``from package import module`` names the module)."""
    modules = {m: p for m, p in package_modules().items() if m.startswith("radixlm.constrained")}
    out: dict[str, set[str]] = {}
    for module, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                          for a in node.names}
        out[module] = {m for m in found if m in modules and m != module}
    return out



def _floors(graph: Mapping[str, set[str]], nodes: Iterable[str], where: str) -> dict[str, int]:
    """Each node's import floor: 0 if it imports no other node, else one more than the highest it
    imports; a cycle fails, naming its path."""
    floors: dict[str, int] = {}

    def floor(node: str, path: tuple[str, ...]) -> int:
        if node in path:
            raise AssertionError(f"import cycle in {where}: " + " -> ".join((*path, node)))
        if node not in floors:
            floors[node] = 1 + max((floor(n, (*path, node)) for n in graph.get(node, ())), default=-1)
        return floors[node]

    for node in sorted(nodes):
        floor(node, ())
    return floors

def test_constrained_keeps_its_layout():
    """``constrained/``: at most 8 root modules (the public nouns and the service), at most 8 import
    floors above the bottom one (a node's floor: 0 if it imports no other node, else one more than
    the highest it imports; nodes are root modules and sub-packages whole, and they form no
    cycle), and the matcher imports no front end (``json_schema``, ``pattern``, ``ir``)."""
    imports = _constrained_imports()
    roots = sorted(p.name for p in (REPO / "constrained").glob("*.py"))
    assert len(roots) <= 8, roots
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in imports.items():
        node = _constrained_node(module)
        graph[node] |= {_constrained_node(t) for t in targets} - {node}
    floors = _floors(graph, graph, "constrained/")
    assert max(floors.values()) <= 8, sorted(floors.items(), key=lambda kv: -kv[1])
    front_ends = ("radixlm.constrained.json_schema", "radixlm.constrained.pattern", "radixlm.constrained.ir")
    for module in ("radixlm.constrained.grammar", "radixlm.constrained.matcher"):
        bad = [m for m in imports.get(module, ()) if m.startswith(front_ends)]
        assert not bad, f"{module} imports a front end: {bad}"


def test_constrained_modules_stand_on_few_floors():
    """``constrained/`` module by module (as ``benchmarks/layout_stats.py`` counts them): at most 8
    import floors (0 .. 7; a module's floor is 0 if it imports no other module of the folder, else
    one more than the highest it imports, every import statement counting, a package's own
    ``__init__`` aside) and no import cycle; the JSON Schema front end in at most 10 modules."""
    floors = _floors(deps := _folder_imports("radixlm.constrained"), deps, "constrained/")
    assert max(floors.values()) <= 7, sorted(floors.items(), key=lambda kv: -kv[1])[:10]
    front_end = sorted((REPO / "constrained" / "json_schema").glob("*.py"))
    assert len(front_end) <= 10, [p.name for p in front_end]


def test_design_names_every_module():
    """docs/DESIGN.md's module tables stay true: every module of the root folders is named there."""
    design = (REPO / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    missing = sorted(module for module, path in package_modules().items()
                     if path.stem != "__init__" and f"`{path.stem}`" not in design)
    assert not missing, "modules docs/DESIGN.md does not name: " + ", ".join(missing)


SERVER = "radixlm.runtime.server"
SERVER_PROTOCOLS = ("openai", "responses", "anthropic", "ollama", "native", "dashboard")
# node of runtime/server/ -> the nodes it may import (besides itself): the transport at the bottom, the one chat
# pipeline on it, the protocols on both (never on one another), the app wiring them all
SERVER_ALLOWED: dict[str, set[str]] = {
    "metrics": set(),
    "transport": {"metrics"},
    "chat": {"transport", "metrics"},
    **{p: {"chat", "transport", "metrics"} for p in SERVER_PROTOCOLS},
    "app": {"transport", "metrics", "chat", *SERVER_PROTOCOLS},
    "__init__": {"app", "transport"},
}


def _server_node(module: str) -> str:
    """A ``runtime/server/`` module's node: its folder, or the root module itself (the package: ``__init__``)."""
    rest = module.removeprefix(SERVER).lstrip(".")
    return rest.split(".")[0] or "__init__"


def _folder_imports(package: str) -> dict[str, set[str]]:
    """``package``'s module -> the modules of ``package`` it imports (every statement)."""
    modules = {m: p for m, p in package_modules().items() if m == package or m.startswith(package + ".")}
    out: dict[str, set[str]] = {}
    for module, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        out[module] = {m for m in found if m in modules and m != module and not module.startswith(m + ".")}
    return out


def test_server_is_laid_out_by_protocol():
    """``runtime/server/``: every module belongs to a known node; a protocol imports the chat pipeline and the
    transport, never another protocol; ``chat/`` imports no protocol and ``transport/`` neither; at most 30
    modules (the dashboard's included) standing on at most 6 floors, of nodes and of modules alike (a
    floor: 0 for what imports nothing else of the folder, else one more than the highest it imports)."""
    imports = _folder_imports(SERVER)
    assert len(imports) <= 30, sorted(imports)
    unknown = sorted({_server_node(m) for m in imports} - set(SERVER_ALLOWED))
    assert not unknown, f"runtime/server/ nodes the layering does not know: {unknown}"
    graph: dict[str, set[str]] = defaultdict(set)
    bad = []
    for module, targets in imports.items():
        node = _server_node(module)
        for target in targets:
            dst = _server_node(target)
            if dst != node:
                graph[node].add(dst)
                if dst not in SERVER_ALLOWED[node]:
                    bad.append(f"{module} -> {target}")
    assert not bad, "runtime/server/ imports across its layers:\n" + "\n".join(sorted(bad))
    floors = _floors(graph, SERVER_ALLOWED, "runtime/server/")
    assert max(floors.values()) <= 5, floors
    module_floors = _floors(imports, imports, "runtime/server/")
    assert max(module_floors.values()) <= 5, f"runtime/server/ on more than 6 module floors: {module_floors}"
