"""radixlm against llama.cpp on the same GGUF file: decode at batch 1, prefill of 512 tokens, the agent workload.

Both systems read the same file in its own quantization (radixlm's native block kernels,
llama.cpp's ggml), on the same threads, in one process, alternating repetitions; the figure of
each is the median. Token ids go in, so both run the same tokens.

* ``decode``: a 32-token prompt, then ``--decode-tokens`` greedy tokens; tokens/s of the decode steps.
* ``prefill``: a fresh 512-token prompt (no cached prefix); tokens/s of its prefill.
* ``agent``: 64 requests sharing a ~1,500-token tool-definition system turn plus ~50 tokens of
  their own, 64 new tokens each, greedy; output tokens/s. llama.cpp runs its best configuration
  for it: the shared prefix prefilled once and copied to parallel sequences over one unified KV
  cache (``suites/llamacpp_batched.py``), the number of parallel sequences swept.

Resident memory is measured apart, each system in a fresh process (``bench_memory.py``).

    python3 benchmarks/bench_gguf_llamacpp.py --model-path ~/.cache/radixlm/real-gguf/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suites.workloads import agent_prompts  # noqa: E402

GREEDY = {"temperature": 0.0, "ignore_eos": True}


class Radix:
    """radixlm's Engine on the GGUF file."""

    name = "radixlm"

    def __init__(self, path: str, kv_tokens: int):
        from radixlm import Engine

        self.engine = Engine(model_path=path, max_total_tokens=kv_tokens, log_level="error")
        self.tokenizer = self.engine.tokenizer

    def decode(self, prompt: list[int], n: int) -> float:
        self.engine.flush_cache()
        out = self.engine.generate(input_ids=prompt, sampling_params={**GREEDY, "max_new_tokens": n})
        meta = out["meta_info"]
        return (n - 1) / (meta["e2e_latency"] - meta["first_token_latency"])

    def prefill(self, prompt: list[int]) -> float:
        self.engine.flush_cache()
        start = time.perf_counter()
        self.engine.generate(input_ids=prompt, sampling_params={**GREEDY, "max_new_tokens": 1})
        return len(prompt) / (time.perf_counter() - start)

    def agent(self, prompts: list[list[int]], n: int) -> float:
        self.engine.flush_cache()
        start = time.perf_counter()
        outs = self.engine.generate(input_ids=prompts, sampling_params={**GREEDY, "max_new_tokens": n})
        return sum(len(o["output_ids"]) for o in outs) / (time.perf_counter() - start)


class LlamaCpp:
    """llama.cpp (llama-cpp-python) on the same file: one sequence for decode/prefill, parallel sequences
    with a shared prefix for the agent workload."""

    name = "llama.cpp"

    def __init__(self, path: str, kv_tokens: int, sweep: tuple[int, ...]):
        from llama_cpp import Llama
        from suites.llamacpp_batched import LlamaCppParallel

        threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
        self.llm = Llama(model_path=path, n_ctx=4096, n_batch=512, n_ubatch=512, n_threads=threads,
                         n_threads_batch=threads, verbose=False)
        self.parallel = {n: LlamaCppParallel(f"llama.cpp-{n}", Path(path), sweep=(n,), n_ctx=kv_tokens)
                         for n in sweep}

    def decode(self, prompt: list[int], n: int) -> float:
        self.llm.reset()
        self.llm.eval(prompt)
        token = int(self.llm.scores[self.llm.n_tokens - 1].argmax())
        start = time.perf_counter()
        for _ in range(n - 1):
            self.llm.eval([token])
            token = int(self.llm.scores[self.llm.n_tokens - 1].argmax())
        return (n - 1) / (time.perf_counter() - start)

    def prefill(self, prompt: list[int]) -> float:
        self.llm.reset()
        start = time.perf_counter()
        self.llm.eval(prompt)
        return len(prompt) / (time.perf_counter() - start)

    def agent(self, prompts: list[list[int]], n: int) -> tuple[float, int]:
        best = (0.0, 0)
        for size, system in self.parallel.items():
            start = time.perf_counter()
            gen = system.generate(prompts, n)
            best = max(best, (gen.output_tokens / (time.perf_counter() - start), size))
        return best


def weight_bytes_per_token(path: str) -> int:
    """Bytes of weights one decode token reads: every tensor but the token embedding (a row a token),
    which counts whole only where it is also the LM head (no ``output.weight``)."""
    from gguf import GGUFReader

    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    tied = "output.weight" not in sizes
    return sum(n for name, n in sizes.items() if name != "token_embd.weight" or tied)


def read_bandwidth(reps: int = 5, mib: int = 512) -> float:
    """Bytes/s a full read of a ``mib`` MiB float32 buffer reaches on torch's threads (a sum), the best of ``reps``."""
    import torch

    buf = torch.ones(mib * 2**18)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - start)
    return buf.numel() * 4 / best


def roofline_line(path: str, radix_tok_s: float, llama_tok_s: float) -> str:
    """The batch-1 decode figures beside their floor: weight bytes read per token / measured read bandwidth."""
    nbytes, bw = weight_bytes_per_token(path), read_bandwidth()
    floor_ms = 1e3 * nbytes / bw
    return (f"roofline, batch 1: {nbytes / 1e6:,.0f} MB of weights read per token / {bw / 1e9:.1f} GB/s measured "
            f"read bandwidth (a torch sum over 512 MiB, best of 5) = {floor_ms:.1f} ms a token at best; radixlm "
            f"{1e3 / radix_tok_s:.1f} ms ({100 * floor_ms * radix_tok_s / 1e3:.0f}% of the bound), llama.cpp "
            f"{1e3 / llama_tok_s:.1f} ms ({100 * floor_ms * llama_tok_s / 1e3:.0f}%)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True, help="the .gguf file both systems run")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--agent-requests", type=int, default=64)
    p.add_argument("--agent-new-tokens", type=int, default=64)
    p.add_argument("--llamacpp-parallel", default="16,32,64", help="parallel sequences swept for the agent run")
    p.add_argument("--parts", default="decode,prefill,agent")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    radix = Radix(args.model_path, 131072)
    llama = LlamaCpp(args.model_path, 131072, tuple(int(x) for x in args.llamacpp_parallel.split(",")))
    vocab = radix.tokenizer.vocab_size
    short = [(7919 * i) % (vocab - 1000) + 500 for i in range(32)]
    results: dict[str, dict[str, list[float]]] = {part: {"radixlm": [], "llama.cpp": []} for part in parts}
    sizes: list[int] = []
    prompts = agent_prompts(radix.tokenizer, args.agent_requests) if "agent" in parts else []
    for rep in range(args.reps):
        long = [(7919 * i + 104729 * rep) % (vocab - 1000) + 500 for i in range(512)]
        for system in (radix, llama) if rep % 2 == 0 else (llama, radix):
            if "decode" in parts:
                results["decode"][system.name].append(system.decode(short, args.decode_tokens))
            if "prefill" in parts:
                results["prefill"][system.name].append(system.prefill(long))
            if "agent" in parts:
                rate = system.agent(prompts, args.agent_new_tokens)
                if isinstance(rate, tuple):
                    rate, size = rate
                    sizes.append(size)
                results["agent"][system.name].append(rate)
    print(f"{Path(args.model_path).name}, {args.reps} alternating repetitions, medians "
          f"({os.cpu_count()} cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})\n")
    print("| workload | radixlm tok/s | llama.cpp tok/s | radixlm / llama.cpp |")
    print("|---|---:|---:|---:|")
    for part, rows in results.items():
        a, b = statistics.median(rows["radixlm"]), statistics.median(rows["llama.cpp"])
        label = {"decode": f"decode, batch 1 ({args.decode_tokens} tokens)", "prefill": "prefill, 512 tokens",
                 "agent": f"agent ({args.agent_requests} requests, llama.cpp best of "
                          f"{args.llamacpp_parallel} parallel: {max(set(sizes), key=sizes.count) if sizes else '-'})"}
        print(f"| {label[part]} | {a:,.1f} | {b:,.1f} | **{a / b:.2f}x** |")
    if "decode" in results:
        print("\n" + roofline_line(args.model_path, statistics.median(results["decode"]["radixlm"]),
                                   statistics.median(results["decode"]["llama.cpp"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
