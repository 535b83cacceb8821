"""The code's layout in figures: modules per folder, the import floors of ``constrained/`` and
``runtime/server/``, the lines of documentation, and the repository files one schema-constrained chat
request runs through.

    python benchmarks/layout_stats.py            # static figures
    python benchmarks/layout_stats.py --trace    # plus the files a request touches (starts an engine)
    python benchmarks/layout_stats.py --trace --write-design   # and regenerate docs/DESIGN.md's request table

The trace serves the embedded tiny model in process (aiohttp's test client), sends one chat
request with a JSON schema, then a second with another schema, and records every repository file
whose code runs in the serving process (all threads) during each; compiles run in worker processes,
which the trace does not see (their files are listed by ``--trace`` as the compile job's imports).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("radixlm", "radix_cache", "constrained", "lang", "runtime", "kernels")


def modules_per_folder() -> dict[str, int]:
    """Python modules (``__init__`` included) directly in each package folder."""
    counts: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            key = str(path.parent.relative_to(REPO))
            counts[key] = counts.get(key, 0) + 1
    return counts


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def import_floors(folder: str = "constrained") -> dict[str, int]:
    """Module -> floor: 0 if it imports no other module of the folder, else 1 + the highest floor
    of those it imports (every import statement counts, lazy ones too)."""
    base = REPO / folder
    package = "radixlm." + folder.replace("/", ".")
    mods = {".".join((package, *p.relative_to(base).with_suffix("").parts)).removesuffix(".__init__"): p
            for p in base.rglob("*.py")}
    deps = {m: {i for i in _imports(p) if i in mods and i != m and not m.startswith(i + ".")}
            for m, p in mods.items()}
    floors: dict[str, int] = {}

    def floor(m: str, stack: tuple[str, ...] = ()) -> int:
        if m not in floors:
            if m in stack:  # a cycle (through a package __init__): count it once
                return 0
            floors[m] = 1 + max((floor(d, (*stack, m)) for d in deps[m]), default=-1)
        return floors[m]

    for m in mods:
        floor(m)
    return floors


def node_floors(folder: str = "constrained") -> dict[str, int]:
    """The same floors with each sub-package counted as one node (its modules' imports merged):
    how deep the folder's root reads, its sub-packages' inner chains aside."""
    base = REPO / folder
    prefix = "radixlm." + folder.replace("/", ".") + "."

    def node(module: str) -> str:
        rest = module.removeprefix(prefix).split(".")
        return rest[0] if (base / rest[0]).is_dir() else rest[0]

    deps: dict[str, set[str]] = defaultdict(set)
    for path in base.rglob("*.py"):
        rel = path.relative_to(base).with_suffix("").parts
        src = rel[0]
        deps[src]
        for i in _imports(path):
            if i.startswith(prefix):
                dst = node(i)
                if dst != src and ((base / dst).is_dir() or (base / f"{dst}.py").exists()):
                    deps[src].add(dst)
    floors: dict[str, int] = {}

    def floor(n: str, stack: tuple[str, ...] = ()) -> int:
        if n not in floors:
            if n in stack:
                return 0
            floors[n] = 1 + max((floor(d, (*stack, n)) for d in deps[n]), default=-1)
        return floors[n]

    for n in list(deps):
        floor(n)
    return floors


def doc_lines() -> dict[str, int]:
    """Lines of each Markdown file the documentation target counts: README.md and every ``*.md``
    under ``docs/`` and ``benchmarks/``."""
    files = [REPO / "README.md"]
    for folder in ("docs", "benchmarks"):
        files += sorted((REPO / folder).rglob("*.md"))
    return {str(f.relative_to(REPO)): len(f.read_text(encoding="utf-8").splitlines()) for f in files}


class Trace(NamedTuple):
    """What one request ran in the serving process: repository files and their functions
    (``path:qualified name``), both relative to the repository."""

    files: frozenset[str]
    functions: frozenset[str]


def trace_request() -> list[Trace]:
    """The engine's first schema-constrained chat request and a later one, each traced over every
    thread of the serving process, once the grammar backend's start-up is over."""
    from aiohttp.test_utils import TestClient, TestServer
    from radixlm.runtime.server import create_app

    from radixlm import Engine

    seen: set[tuple[str, str]] = set()
    recording = threading.Event()

    def profile(frame, event, arg):
        if event == "call" and recording.is_set():
            seen.add((frame.f_code.co_filename, frame.f_code.co_qualname))

    def schema(n: int) -> dict:
        props = {f"field_{n}_{i}": {"type": "string", "maxLength": 8} for i in range(3)}
        return {"type": "object", "properties": props, "required": list(props)}

    async def run(client, n: int) -> None:
        body = {"model": "default", "max_tokens": 48, "temperature": 0,
                "messages": [{"role": "user", "content": "Give me a record."}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema(n)}}}
        resp = await client.post("/v1/chat/completions", json=body)
        assert resp.status == 200, await resp.text()

    async def main(engine) -> list[Trace]:
        while engine.get_stats()["grammar_backend"]["state"] == "starting":
            await asyncio.sleep(0.05)
        client = TestClient(TestServer(create_app(engine)))
        await client.start_server()
        out = []
        try:
            for n in (0, 1):  # the engine's first constrained request, then a later one
                seen.clear()
                recording.set()
                await run(client, n)
                recording.clear()
                out.append(_in_repo(seen))
        finally:
            await client.close()
        return out

    threading.setprofile(profile)  # before the engine starts, so its threads run under it too
    sys.setprofile(profile)
    try:
        with Engine(max_total_tokens=4096) as engine:
            return asyncio.run(main(engine))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def _in_repo(calls: set[tuple[str, str]]) -> Trace:
    files, functions = set(), set()
    for filename, qualname in calls:
        p = Path(filename).resolve()
        if p.is_relative_to(REPO) and p.suffix == ".py" and p != Path(__file__).resolve():
            rel = str(p.relative_to(REPO))
            files.add(rel)
            functions.add(f"{rel}:{qualname}")
    return Trace(frozenset(files), frozenset(functions))


DESIGN = REPO / "docs" / "DESIGN.md"
TABLE_START = "<!-- request-trace: generated by `python benchmarks/layout_stats.py --trace --write-design` -->"
TABLE_END = "<!-- request-trace: end -->"


def trace_table(first: Trace, later: Trace) -> str:
    """DESIGN.md's request table: the later request's files by folder, and both requests' counts."""
    folders: dict[str, list[str]] = defaultdict(list)
    for f in sorted(later.files):
        folders[str(Path(f).parent)].append(Path(f).stem)
    calls = Counter(str(Path(fn.split(":")[0]).parent) for fn in later.functions)
    rows = ["| folder | files | functions | the files |", "|---|---:|---:|---|"]
    rows += [f"| `{folder}/` | {len(names)} | {calls[folder]} | {', '.join(names)} |"
             for folder, names in sorted(folders.items())]
    return "\n".join([
        TABLE_START,
        f"A later schema request: **{len(later.files)} files, {len(later.functions)} functions**; "
        f"the engine's first one: {len(first.files)} files, {len(first.functions)} functions.",
        "", *rows, TABLE_END])


def design_table() -> str:
    """The request table as DESIGN.md holds it (between its markers)."""
    text = DESIGN.read_text(encoding="utf-8")
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"{DESIGN} lacks the request table's markers {TABLE_START!r} ... {TABLE_END!r}")
    return TABLE_START + text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0] + TABLE_END


def write_design(table: str) -> None:
    text = DESIGN.read_text(encoding="utf-8")
    DESIGN.write_text(text.replace(design_table(), table), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="store_true", help="also trace a schema-constrained chat request")
    parser.add_argument("--write-design", action="store_true",
                        help="with --trace: rewrite docs/DESIGN.md's request table from the trace")
    args = parser.parse_args()
    per_folder = modules_per_folder()
    print(f"source modules: {sum(per_folder.values())} (tests, csrc/ and static assets aside); per folder:")
    for folder, n in per_folder.items():
        print(f"  {folder:40s} {n}")
    floors = import_floors()
    deepest = max(floors.values())
    print(f"constrained/: {len(floors)} modules, floors 0..{deepest}; "
          f"root modules {sum(1 for p in (REPO / 'constrained').glob('*.py'))}")
    by_floor = Counter(floors.values())
    print("  modules per floor:", dict(sorted(by_floor.items())))
    nodes = node_floors()
    print(f"  with each sub-package one node: {len(nodes)} nodes, floors 0..{max(nodes.values())}:",
          ", ".join(f"{n}={f}" for n, f in sorted(nodes.items(), key=lambda kv: (kv[1], kv[0]))))
    server = import_floors("runtime/server")
    print(f"runtime/server/: {len(server)} modules, floors 0..{max(server.values())} module by module;",
          "modules per floor:", dict(sorted(Counter(server.values()).items())))
    nodes = node_floors("runtime/server")
    print(f"  with each folder one node: floors 0..{max(nodes.values())}:",
          ", ".join(f"{n}={f}" for n, f in sorted(nodes.items(), key=lambda kv: (kv[1], kv[0]))))
    lines = doc_lines()
    print(f"documentation lines (README.md, docs/**/*.md, benchmarks/**/*.md): {sum(lines.values())}")
    for f, n in lines.items():
        print(f"  {f:40s} {n}")
    if args.trace:
        first, later = trace_request()
        for label, trace in (("the first schema request", first), ("a later schema request", later)):
            groups: dict[str, list[str]] = defaultdict(list)
            for f in sorted(trace.files):
                groups[str(Path(f).parent)].append(Path(f).name)
            print(f"{label}: {len(trace.files)} files, {len(trace.functions)} functions in the serving process")
            for folder, names in sorted(groups.items()):
                print(f"  {folder:32s} {len(names):3d}  {' '.join(names)}")
        if args.write_design:
            write_design(trace_table(first, later))
            print(f"rewrote the request table of {DESIGN.relative_to(REPO)}")
    elif args.write_design:
        parser.error("--write-design needs --trace")


if __name__ == "__main__":
    main()
