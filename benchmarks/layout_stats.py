"""The code's layout in figures: modules per folder, the import floors of ``constrained/``, the lines
of documentation, and the repository files one schema-constrained chat request runs through.

    python benchmarks/layout_stats.py            # static figures
    python benchmarks/layout_stats.py --trace    # plus the files a request touches (starts an engine)

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
    mods = {".".join(("radixlm", folder, *p.relative_to(base).with_suffix("").parts)).removesuffix(".__init__"): p
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


def doc_lines() -> dict[str, int]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "benchmarks").rglob("*.md"))]
    return {str(f.relative_to(REPO)): len(f.read_text(encoding="utf-8").splitlines()) for f in files}


def trace_request() -> list[set[str]]:
    """Repository files run in the serving process by the engine's first schema-constrained chat
    request and by a later one (each a set of paths relative to the repository)."""
    from aiohttp.test_utils import TestClient, TestServer
    from radixlm.runtime.engine import Engine
    from radixlm.runtime.server.app import create_app

    seen: set[str] = set()
    recording = threading.Event()

    def profile(frame, event, arg):
        if event == "call" and recording.is_set():
            seen.add(frame.f_code.co_filename)

    def schema(n: int) -> dict:
        props = {f"field_{n}_{i}": {"type": "string", "maxLength": 8} for i in range(3)}
        return {"type": "object", "properties": props, "required": list(props)}

    async def run(client, n: int) -> None:
        body = {"model": "default", "max_tokens": 48, "temperature": 0,
                "messages": [{"role": "user", "content": "Give me a record."}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema(n)}}}
        resp = await client.post("/v1/chat/completions", json=body)
        assert resp.status == 200, await resp.text()

    async def main(engine) -> list[set[str]]:
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


def _in_repo(files: set[str]) -> set[str]:
    out = set()
    for f in files:
        p = Path(f).resolve()
        if p.is_relative_to(REPO) and p.suffix == ".py" and p != Path(__file__).resolve():
            out.add(str(p.relative_to(REPO)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="store_true", help="also trace a schema-constrained chat request")
    args = parser.parse_args()
    print("modules per folder:")
    for folder, n in modules_per_folder().items():
        print(f"  {folder:40s} {n}")
    floors = import_floors()
    deepest = max(floors.values())
    print(f"constrained/: {len(floors)} modules, floors 0..{deepest}; "
          f"root modules {sum(1 for p in (REPO / 'constrained').glob('*.py'))}")
    by_floor = Counter(floors.values())
    print("  modules per floor:", dict(sorted(by_floor.items())))
    lines = doc_lines()
    print(f"documentation lines: {sum(lines.values())}")
    for f, n in lines.items():
        print(f"  {f:40s} {n}")
    if args.trace:
        for label, files in zip(("the first schema request", "a later schema request"), trace_request()):
            groups: dict[str, list[str]] = defaultdict(list)
            for f in sorted(files):
                groups[str(Path(f).parent)].append(Path(f).name)
            print(f"{label}: {len(files)} files in the serving process")
            for folder, names in sorted(groups.items()):
                print(f"  {folder:32s} {len(names):3d}  {' '.join(names)}")


if __name__ == "__main__":
    main()
