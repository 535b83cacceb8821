"""Resident memory of a loaded model: radixlm (float32, int8, GGUF) and llama.cpp on the same file.

Each system runs in its own fresh process: it loads the model with a KV cache of ``--context``
tokens, prefills one ``--prompt-tokens`` prompt and decodes ``--new-tokens`` (or runs the agent
workload of ``bench_gguf_llamacpp.py``, ``--workload agent``), then reports its
resident set (``VmRSS``) and its peak (``VmHWM``). Both systems see the same context, so the
figures compare weights plus runtime, not cache sizes.

radixlm's figures are taken once its grammar backend's start (``--grammar-warmup``: the tables,
the compile workers, the warm-up compile) has finished. Its compile workers are child processes:
the table adds their plain RSS and their private pages (``/proc/PID/smaps_rollup``), and the total,
the figure to compare between systems: the engine's RSS plus the workers' private pages, so a page
a worker shares with the engine (the interpreter, the libraries) counts once. The tree's PSS is
printed too; it splits library pages with every unrelated process that maps them, so it drops
when other Python processes run on the machine.
"idle" is taken once the engine has been idle long enough to hand the request's freed heap pages
back (``Engine.get_stats()["idle_memory_releases"]``; llama.cpp: the same as after the request).

    python3 benchmarks/bench_memory.py --model-path ~/.cache/radixlm/real-Qwen2.5-0.5B-seed0-v2 \\
        --systems radixlm,radixlm-int8
    python3 benchmarks/bench_memory.py --model-path model.gguf --systems radixlm,llama.cpp
    python3 benchmarks/bench_memory.py --model-path model.gguf --systems radixlm,llama.cpp --workload agent
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, sys
args = json.loads(sys.argv[1])

import os, time

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) // 1024
    return -1

# Every descendant of ``pid`` (compile workers), from /proc/*/stat's parent ids.
def children(pid):
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open(f"/proc/{name}/stat").read()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out

# Rss, Pss and Private (its own pages: Private_Clean + Private_Dirty) of one process, MB (0 if gone).
def rollup(pid):
    found = {"Rss": 0.0, "Pss": 0.0, "Private": 0.0}
    try:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            key, _, rest = line.partition(":")
            key = "Private" if key.startswith("Private_") else key
            if key in found:
                found[key] += int(rest.split()[0]) / 1024
    except OSError:
        pass
    return found

# This process's RSS and its tree's: the children, their RSS and private pages; total = this RSS
# plus the children's private pages (each page once); pss = the tree's PSS.
def tree():
    kids = [rollup(p) for p in children(os.getpid())]
    me = rollup(os.getpid())
    private = sum(k["Private"] for k in kids)
    return {"rss": status("VmRSS"), "children": len(kids), "children_rss": round(sum(k["Rss"] for k in kids)),
            "children_private": round(private), "total": round(me["Rss"] + private),
            "pss": round(me["Pss"] + sum(k["Pss"] for k in kids))}

# Wait (polling, bounded) until the engine's step loop has released the request's freed memory.
def idle_release(engine, limit_s):
    for _ in range(int(limit_s / 0.1)):
        if engine.get_stats().get("idle_memory_releases", 1) > 0:  # an engine without them: now
            return
        time.sleep(0.1)

# Wait (polling, bounded) until the grammar backend's start, warm-up included, is over.
def grammar_ready(engine, limit_s):
    for _ in range(int(limit_s / 0.1)):
        state = engine.get_stats()["grammar_backend"]["state"]
        if state != "starting":
            return state
        time.sleep(0.1)
    return "starting"

ids = list(range(1000, 1000 + args["prompt_tokens"]))
agent = args["workload"] == "agent"
if agent:  # the agent workload's prompts (benchmarks/suites/workloads.py), tokenized as radixlm does
    sys.path.insert(0, args["bench_dir"])
    from suites.workloads import agent_prompts
if args["system"] == "llama.cpp":
    if agent:  # its best configuration: the shared prefix once, 64 parallel sequences, one unified KV
        from pathlib import Path
        from radixlm.runtime.tokenizer.tokenizer import Tokenizer
        from suites.llamacpp_batched import LlamaCppParallel
        prompts = agent_prompts(Tokenizer.from_gguf(args["model_path"]), args["agent_requests"])
        par = LlamaCppParallel("llama.cpp", Path(args["model_path"]), sweep=(args["agent_requests"],),
                               n_ctx=args["context"])
        loaded, grammar = tree(), "-"
        par.generate(prompts, args["new_tokens"])
    else:
        from llama_cpp import Llama
        llm = Llama(model_path=args["model_path"], n_ctx=args["context"], n_batch=512, verbose=False)
        loaded, grammar = tree(), "-"
        llm.eval(ids)
        for _ in range(args["new_tokens"]):
            llm.eval([llm.sample(temp=0)])
    after = idle = tree()
else:
    from radixlm import Engine
    quant = "int8" if args["system"] == "radixlm-int8" else None
    engine = Engine(model_path=args["model_path"], quantization=quant, max_total_tokens=args["context"],
                    log_level="error", grammar_warmup=args["grammar_warmup"])
    grammar = grammar_ready(engine, args["timeout_s"])
    loaded = tree()
    inputs = agent_prompts(engine.tokenizer, args["agent_requests"]) if agent else ids
    engine.generate(input_ids=inputs, sampling_params={"max_new_tokens": args["new_tokens"], "ignore_eos": True})
    after = tree()
    idle_release(engine, 60)
    idle = tree()
print(json.dumps({"loaded_mb": loaded["rss"], "rss_mb": after["rss"], "peak_mb": status("VmHWM"),
                  "grammar": grammar, "workers": after["children"], "workers_rss_mb": after["children_rss"],
                  "workers_private_mb": after["children_private"], "loaded_total_mb": loaded["total"],
                  "total_mb": after["total"], "idle_mb": idle["rss"], "idle_total_mb": idle["total"],
                  "pss_mb": after["pss"]}))
"""

SYSTEMS = ("radixlm", "radixlm-int8", "llama.cpp")


def measure(system: str, args: argparse.Namespace) -> dict:
    """One system's figures, measured in a fresh interpreter."""
    spec = {"system": system, "model_path": args.model_path, "context": args.context,
            "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
            "timeout_s": args.timeout_s, "grammar_warmup": args.grammar_warmup, "workload": args.workload,
            "agent_requests": args.agent_requests, "bench_dir": str(Path(__file__).resolve().parent)}
    run = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], capture_output=True, text=True,
                         timeout=args.timeout_s)
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"}
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True, help="checkpoint folder or .gguf file")
    p.add_argument("--systems", default="radixlm,radixlm-int8", help=f"comma-separated, from {SYSTEMS}")
    p.add_argument("--context", type=int, help="KV-cache tokens (n_ctx for llama.cpp); default 4096, "
                   "16384 for the agent workload")
    p.add_argument("--workload", choices=("request", "agent"), default="request",
                   help="request: one --prompt-tokens prompt; agent: bench_gguf_llamacpp.py's agent workload "
                        "(--agent-requests prompts sharing a ~1,640-token prefix, llama.cpp with as many "
                        "parallel sequences), --new-tokens each")
    p.add_argument("--agent-requests", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, help="default 16, 64 for the agent workload")
    p.add_argument("--timeout-s", type=float, default=1800)
    p.add_argument("--no-grammar-warmup", dest="grammar_warmup", action="store_false",
                   help="radixlm without its grammar backend (built only by a constrained request, which "
                        "this benchmark never sends): the model's own figures")
    args = p.parse_args(argv)
    agent = args.workload == "agent"
    args.context = args.context or (16384 if agent else 4096)
    args.new_tokens = args.new_tokens or (64 if agent else 16)
    systems = args.systems.split(",")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        p.error(f"--systems: unknown {unknown}; choose from {SYSTEMS}")
    rows = {s: measure(s, args) for s in systems}
    base = rows[systems[0]].get("rss_mb")
    base_total = rows[systems[0]].get("total_mb")
    work = (f"the agent workload ({args.agent_requests} requests)" if agent else f"prompt {args.prompt_tokens}")
    print(f"model {args.model_path}, context {args.context} tokens, {work} + "
          f"{args.new_tokens} new tokens. Engine columns: the engine process's VmRSS; workers: their RSS / "
          "private pages; total: the engine's RSS + the workers' private pages; idle: once the engine "
          "released the request's freed memory; tree PSS: for reference (it shares library pages with "
          "unrelated processes, so it varies with what else runs)\n")
    print(f"| system | after load MB | after the request MB | peak MB | / {systems[0]} | grammar backend "
          f"| workers (RSS / private MB) | total after load MB | total after the request MB | total / {systems[0]} "
          "| idle MB | total idle MB | tree PSS after the request MB |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        if "error" in r:
            print(f"| {name} | {r['error']} |" + " |" * 11)
            continue
        ratio = f"{r['rss_mb'] / base:.2f}x" if base else "-"
        total_ratio = f"{r['total_mb'] / base_total:.2f}x" if base_total else "-"
        print(f"| {name} | {r['loaded_mb']:,} | {r['rss_mb']:,} | {r['peak_mb']:,} | {ratio} | {r['grammar']} "
              f"| {r['workers']} ({r['workers_rss_mb']:,} / {r['workers_private_mb']:,}) | {r['loaded_total_mb']:,} "
              f"| {r['total_mb']:,} | {total_ratio} | {r['idle_mb']:,} | {r['idle_total_mb']:,} | {r['pss_mb']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
