"""Resident memory and speed of a GGUF model served from its file (weights kept in their block formats).

    python benchmarks/bench_gguf_memory.py                       # the real Qwen2.5-Coder-0.5B Q4_K_M file
    python benchmarks/bench_gguf_memory.py --model FILE.gguf --context 4096 --prompt-tokens 512

Loads ``Engine(model_path=FILE, max_total_tokens=context, context_length=context)`` and reports the
process's resident memory (VmRSS) after loading and after one greedy request of ``--prompt-tokens``
prompt tokens and ``--new-tokens`` new ones, the peak (``ru_maxrss``), the load time and the decode
speed. llama.cpp's figure for the same file and context (``llama-cli -c <context>``, or
llama-cpp-python's ``Llama(model_path, n_ctx=context)``) is the comparison: the issue's bound is
1.3x its resident memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import time


def rss_mb() -> float:
    """This process's resident memory now, in MiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a GGUF file (default: the real Qwen2.5-Coder Q4_K_M)")
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--json", default=None, help="write the figures here too")
    args = parser.parse_args()
    from radixlm.runtime.testing import real_gguf

    from radixlm import Engine

    model = args.model or str(real_gguf.fetch("qwen2.5-coder-0.5b-instruct-q4_k_m"))
    start = time.perf_counter()
    engine = Engine(model, max_total_tokens=args.context, context_length=args.context, log_level="error")
    figures = {"model": model, "context": args.context, "load_s": round(time.perf_counter() - start, 2),
               "rss_after_load_mb": round(rss_mb())}
    try:
        words = ("def f(x):\n    return x * 2\n" * args.prompt_tokens).split(" ")
        ids = engine.tokenizer.encode(" ".join(words))[:args.prompt_tokens]
        params = {"temperature": 0.0, "ignore_eos": True}
        t0 = time.perf_counter()
        engine.generate(input_ids=ids, sampling_params={**params, "max_new_tokens": 1})
        t1 = time.perf_counter()
        engine.flush_cache()
        engine.generate(input_ids=ids, sampling_params={**params, "max_new_tokens": args.new_tokens})
        t2 = time.perf_counter()
        figures.update(prompt_tokens=len(ids), new_tokens=args.new_tokens, prefill_s=round(t1 - t0, 2),
                       decode_tok_s=round((args.new_tokens - 1) / max((t2 - t1) - (t1 - t0), 1e-9), 2),
                       rss_after_request_mb=round(rss_mb()),
                       peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    finally:
        engine.shutdown()
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
