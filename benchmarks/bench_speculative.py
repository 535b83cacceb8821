"""Speculative decoding on a GGUF file: radixlm with and without drafts, and llama.cpp at its best.

Workloads (greedy, batch 1 unless said; token ids are the chat template's):

* ``extraction``: a ~1,000-token staff page, a schema whose values are copied from it (names,
  roles, cities, string arrays), constrained JSON output;
* ``code_edit``: a ~60-line function; the answer is the whole function with one change;
* ``chat``: a free answer of up to 200 tokens;
* ``agent``: 64 requests sharing a ~1,500-token tool-definition system turn plus ~50 tokens of
  their own, 64 new tokens each (``suites.workloads.agent_prompts``).

radixlm runs each workload with speculation on (``NGRAM``: grammar, radix-tree and prompt drafts
the model verifies) and off, in one process, alternating, and checks that the two outputs are
token-identical. llama.cpp (llama-cpp-python, when importable) runs each single-request workload
plain and with its prompt-lookup decoding (``LlamaPromptLookupDecoding``) and keeps the faster;
extraction goes through its JSON-schema grammar (``response_format``). Each figure is the median of
``--reps`` runs; the process's resident memory is printed beside the table.

    python benchmarks/bench_speculative.py --model-path ~/.cache/radixlm/real-gguf/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suites.workloads import agent_prompts  # noqa: E402

TEAMS = [("Data Platform", "Lisbon"), ("Payments", "Toronto"), ("Mobile", "Seoul"), ("Search", "Dublin")]
FIRST = ["Maria", "Kenji", "Amara", "Lucas", "Sofia", "Arjun", "Elena", "Tomas", "Nadia", "Omar", "Hana", "Pavel"]
LAST = ["Fernandes", "Watanabe", "Okafor", "Moreau", "Rossi", "Iyer", "Novak", "Silva", "Haddad", "Kowalski",
        "Lindqvist", "Petrov"]
ROLES = ["staff engineer", "product manager", "data scientist", "site reliability engineer", "designer",
         "engineering manager"]
LANGS = [["Portuguese", "English", "Spanish"], ["Japanese", "English"], ["Igbo", "English", "French"],
         ["French", "English", "German"], ["Italian", "English"], ["Hindi", "Tamil", "English"]]
SKILLS = [["Kafka", "Spark", "Python"], ["Go", "PostgreSQL"], ["Kotlin", "Swift", "GraphQL"],
          ["Rust", "Elasticsearch", "Terraform"], ["Figma", "accessibility audits"], ["SQL", "dbt", "Airflow"]]

EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {"team": {"type": "string"}, "office": {"type": "string"}, "members": {
        "type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "role": {"type": "string"},
            "languages": {"type": "array", "items": {"type": "string"}},
            "skills": {"type": "array", "items": {"type": "string"}}},
            "required": ["name", "role", "languages", "skills"], "additionalProperties": False}}},
    "required": ["team", "office", "members"], "additionalProperties": False}


def staff_page() -> str:
    """A ~1,000-token company staff page (written for this benchmark)."""
    parts = ["Northwind Labs - who we are. This page lists every team, where it sits and who works in it."]
    for t, (team, city) in enumerate(TEAMS):
        parts.append(f"\nThe {team} team works from our {city} office.")
        for k in range(3):
            i = (t * 3 + k) % len(FIRST)
            name = f"{FIRST[i]} {LAST[i]}"
            parts.append(
                f"{name} is a {ROLES[(i + t) % len(ROLES)]} on the {team} team. {FIRST[i]} speaks "
                f"{', '.join(LANGS[i % len(LANGS)][:-1]) + ' and ' + LANGS[i % len(LANGS)][-1]}, and works "
                f"mostly with {', '.join(SKILLS[(i + 1) % len(SKILLS)])}. Before joining, {FIRST[i]} spent "
                f"{3 + i % 7} years at another company in {TEAMS[(t + 1) % len(TEAMS)][1]}, and still mentors "
                f"new hires on the {team} team every other Friday.")
    return " ".join(parts)


CODE = '''def summarize_orders(orders, currency="EUR", min_total=0.0):
    """Group paid orders by customer and return per-customer totals, sorted by total."""
    totals = {}
    counts = {}
    first_seen = {}
    for index, order in enumerate(orders):
        if order.get("status") != "paid":
            continue
        if order.get("currency", currency) != currency:
            continue
        customer = order["customer_id"]
        amount = 0.0
        for line in order.get("lines", []):
            quantity = int(line.get("quantity", 1))
            price = float(line.get("unit_price", 0.0))
            discount = float(line.get("discount", 0.0))
            amount += quantity * price * (1.0 - discount)
        shipping = float(order.get("shipping", 0.0))
        amount += shipping
        if customer not in totals:
            totals[customer] = 0.0
            counts[customer] = 0
            first_seen[customer] = index
        totals[customer] += amount
        counts[customer] += 1
    rows = []
    for customer, total in totals.items():
        if total < min_total:
            continue
        average = total / counts[customer]
        rows.append({
            "customer_id": customer,
            "orders": counts[customer],
            "total": round(total, 2),
            "average": round(average, 2),
            "first_order_index": first_seen[customer],
            "currency": currency,
        })
    rows.sort(key=lambda row: (-row["total"], row["first_order_index"]))
    return rows
'''


def workloads() -> dict[str, tuple[str, dict]]:
    """name -> (the user's message, sampling params)."""
    def chat(text: str) -> str:
        return text

    greedy = {"temperature": 0.0}
    return {
        "extraction": (chat(f"{staff_page()}\n\nExtract the {TEAMS[1][0]} team from the page above as JSON "
                            "with its team name, office and members (name, role, languages, skills). Copy the "
                            "values exactly as the page writes them."),
                       {**greedy, "max_new_tokens": 400, "json_schema": EXTRACTION_SCHEMA}),
        "code_edit": (chat(f"```python\n{CODE}```\n\nRename the parameter `min_total` to `minimum_total` "
                           "everywhere in this function and return the whole updated function in a code block."),
                      {**greedy, "max_new_tokens": 700}),
        "chat": (chat("Explain in about 150 words how a hash map handles collisions."),
                 {**greedy, "max_new_tokens": 200}),
    }


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


class Radix:
    """radixlm's Engine with speculation on or off (one engine each, the same file)."""

    def __init__(self, path: str, speculative: bool):
        from radixlm import Engine

        self.name = "radixlm" if speculative else "radixlm (no drafts)"
        self.engine = Engine(model_path=path, max_total_tokens=131072, log_level="error",
                             speculative_algorithm="NGRAM" if speculative else None)
        self.tokenizer = self.engine.tokenizer

    def single(self, text: str, params: dict) -> tuple[float, list[int], dict]:
        prompt = self.tokenizer.encode(self.tokenizer.apply_chat_template([{"role": "user", "content": text}]),
                                       add_special_tokens=False)
        self.engine.flush_cache()
        start = time.perf_counter()
        out = self.engine.generate(input_ids=prompt, sampling_params=params)
        return len(out["output_ids"]) / (time.perf_counter() - start), out["output_ids"], out["meta_info"]

    def agent(self, prompts: list[list[int]], n: int) -> float:
        self.engine.flush_cache()
        start = time.perf_counter()
        outs = self.engine.generate(input_ids=prompts, sampling_params={"temperature": 0.0, "ignore_eos": True,
                                                                        "max_new_tokens": n})
        return sum(len(o["output_ids"]) for o in outs) / (time.perf_counter() - start)


class LlamaCpp:
    """llama.cpp on the same file: plain and with prompt-lookup decoding, the faster kept."""

    name = "llama.cpp"

    def __init__(self, path: str, sweep: tuple[int, ...]):
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        from suites.llamacpp_batched import LlamaCppParallel

        threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
        common = {"n_ctx": 4096, "n_batch": 512, "n_threads": threads, "n_threads_batch": threads, "verbose": False}
        self.plain = Llama(model_path=path, **common)
        self.lookup = Llama(model_path=path, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10), **common)
        self.parallel = {n: LlamaCppParallel(f"llama.cpp-{n}", Path(path), sweep=(n,), n_ctx=131072)
                         for n in sweep}
        self.config = {}

    def single(self, name: str, prompt_text: str, params: dict) -> float:
        best = 0.0
        for label, llm in (("plain", self.plain), ("prompt lookup", self.lookup)):
            llm.reset()
            kwargs = {"temperature": 0.0, "max_tokens": params["max_new_tokens"]}
            if "json_schema" in params:
                kwargs["response_format"] = {"type": "json_object", "schema": params["json_schema"]}
            start = time.perf_counter()
            out = llm.create_chat_completion(messages=[{"role": "user", "content": prompt_text}], **kwargs)
            rate = out["usage"]["completion_tokens"] / (time.perf_counter() - start)
            if rate > best:
                best, self.config[name] = rate, label
        return best

    def agent(self, prompts: list[list[int]], n: int) -> float:
        best = 0.0
        for size, system in self.parallel.items():
            start = time.perf_counter()
            gen = system.generate(prompts, n)
            rate = gen.output_tokens / (time.perf_counter() - start)
            if rate > best:
                best, self.config["agent"] = rate, f"{size} parallel"
        return best


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        model = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
        flags = next(line for line in info.splitlines() if line.startswith("flags")).split()
        isa = "AVX-512 VNNI" if "avx512_vnni" in flags else "AVX-512" if "avx512f" in flags else \
            "AVX2" if "avx2" in flags else "SSE"
        return f"{model}, {isa}, {os.cpu_count()} cores"
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True, help="the .gguf file every system runs")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--parts", default="extraction,code_edit,chat,agent")
    p.add_argument("--agent-requests", type=int, default=64)
    p.add_argument("--agent-new-tokens", type=int, default=64)
    p.add_argument("--llamacpp-parallel", default="16,64")
    p.add_argument("--no-llamacpp", action="store_true", help="radixlm with and without drafts only")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    on, off = Radix(args.model_path, True), Radix(args.model_path, False)
    llama = None
    if not args.no_llamacpp:
        try:
            llama = LlamaCpp(args.model_path, tuple(int(x) for x in args.llamacpp_parallel.split(",")))
        except ImportError as e:
            print(f"llama.cpp not importable ({e}): radixlm only (benchmarks/build_llamacpp.sh builds it)")
    loads = workloads()
    rates: dict[str, dict[str, list[float]]] = {part: {} for part in parts}
    notes: dict[str, str] = {}
    agent = agent_prompts(on.tokenizer, args.agent_requests) if "agent" in parts else []
    for rep in range(args.reps):
        for system in (on, off, llama) if rep % 2 == 0 else (llama, off, on):
            if system is None:
                continue
            for part in parts:
                if part == "agent":
                    rate = system.agent(agent, args.agent_new_tokens)
                elif system is llama:
                    rate = llama.single(part, *loads[part])
                else:
                    rate, ids, meta = system.single(*loads[part])
                    notes.setdefault(f"{part}/{system.name}", ids)
                    if system is on and meta.get("spec_verify_ct"):
                        notes[f"{part}/accept"] = f"{meta['spec_accepted_tokens'] / meta['spec_verify_ct']:.1f}"
                rates[part].setdefault(system.name, []).append(rate)
    print(f"{Path(args.model_path).name} on {cpu_name()}; medians of {args.reps} alternating runs; "
          f"process RSS {rss_mb():,.0f} MB (all systems in one process)\n")
    head = "| workload | radixlm tok/s | no drafts | with / without | identical |"
    head += " llama.cpp best tok/s | radixlm / llama.cpp |" if llama else ""
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for part in parts:
        a, b = statistics.median(rates[part]["radixlm"]), statistics.median(rates[part]["radixlm (no drafts)"])
        same = "-" if part == "agent" else \
            ("yes" if notes.get(f"{part}/radixlm") == notes.get(f"{part}/radixlm (no drafts)") else "NO")
        accept = notes.get(f"{part}/accept")
        row = f"| {part}{f' (accepted/step {accept})' if accept else ''} | {a:,.1f} | {b:,.1f} | **{a / b:.2f}x** | {same} |"
        if llama:
            c = statistics.median(rates[part]["llama.cpp"])
            row += f" {c:,.1f} ({llama.config.get(part, '')}) | **{a / c:.2f}x** |"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
