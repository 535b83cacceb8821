"""Structured outputs against llama.cpp on the same GGUF file: valid rate and end-to-end tokens/s.

The 20 extraction tasks of ``extraction_set.py`` (four schemas, five documents each), greedy, the
task's JSON schema as the constraint, ``--max-tokens`` per answer. Each system in its best
configuration for the job:

* radixlm: ``Engine`` on the GGUF file (or ``--radixlm-model`` to serve another form of the same
  model, e.g. ``--quantization int8`` on its Hugging Face checkpoint), the 20 requests submitted
  together (continuous batching, the shared instruction prefix from the radix cache,
  jump-forward over forced text).
* llama.cpp: llama-cpp-python's ``create_chat_completion`` with ``response_format`` ``json_object`` +
  ``schema`` (compiled to its GBNF grammar), one request at a time: its Python API runs one
  sequence per context and has no batched grammar path.

Both use the model's chat template and the same threads. Valid: ``json.loads`` then the schema
(with format checks); right: the fields equal to the recorded reference answers where those exist.

    python3 benchmarks/bench_structured_llamacpp.py \\
        --model-path ~/.cache/radixlm/real-gguf/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extraction_set import DOCUMENTS, PROMPT, SCHEMAS  # noqa: E402


def tasks() -> list[tuple[list[dict], dict]]:
    """(messages, schema) of the 20 tasks."""
    out = []
    for kind, document in DOCUMENTS:
        schema = SCHEMAS[kind]
        prompt = PROMPT.format(fields=", ".join(schema["properties"]), document=document)
        out.append(([{"role": "user", "content": prompt}], schema))
    return out


def valid(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def run_radixlm(model: str, quantization: str | None, work, max_tokens: int) -> dict:
    from radixlm import Engine

    engine = Engine(model_path=model, quantization=quantization, max_total_tokens=32768, log_level="error")
    prompts = [engine.tokenizer.apply_chat_template(m) for m, _ in work]
    params = [{"json_schema": s, "max_new_tokens": max_tokens, "temperature": 0.0} for _, s in work]
    engine.generate(prompts[:1], params[:1])  # compile warm-up (the grammar backend starts in the background)
    engine.flush_cache()
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    seconds = time.perf_counter() - start
    engine.shutdown()
    texts = [o["text"] for o in outs]
    return {"texts": texts, "seconds": seconds,
            "tokens": sum(o["meta_info"]["completion_tokens"] for o in outs),
            "finish": [o["meta_info"]["finish_reason"]["type"] for o in outs]}


def run_llamacpp(gguf: str, work, max_tokens: int) -> dict:
    from llama_cpp import Llama

    threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    llm = Llama(model_path=gguf, n_ctx=2048, n_batch=512, n_threads=threads, n_threads_batch=threads,
                verbose=False, seed=0)
    texts, tokens, finish = [], 0, []
    start = time.perf_counter()
    for messages, schema in work:
        reply = llm.create_chat_completion(messages, temperature=0.0, max_tokens=max_tokens,
                                           response_format={"type": "json_object", "schema": schema})
        texts.append(reply["choices"][0]["message"]["content"])
        tokens += reply["usage"]["completion_tokens"]
        finish.append(reply["choices"][0]["finish_reason"])
    return {"texts": texts, "seconds": time.perf_counter() - start, "tokens": tokens, "finish": finish}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True, help="the GGUF file (llama.cpp's, and radixlm's by default)")
    p.add_argument("--radixlm-model", default=None, help="serve this form of the model in radixlm instead")
    p.add_argument("--quantization", default=None, help="radixlm's --quantization for --radixlm-model")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--systems", default="radixlm,llama.cpp")
    args = p.parse_args(argv)
    work = tasks()
    reference = Path(__file__).resolve().parent / "data" / "extraction_outputs.json"
    answers = {o["task"]: o["value"] for o in json.loads(reference.read_text())["outputs"]} if reference.exists() else {}
    rows = {}
    for system in args.systems.split(","):
        if system == "radixlm":
            rows[system] = run_radixlm(args.radixlm_model or args.model_path, args.quantization, work, args.max_tokens)
        elif system == "llama.cpp":
            rows[system] = run_llamacpp(args.model_path, work, args.max_tokens)
        else:
            p.error(f"--systems: unknown {system!r}")
    print(f"{len(work)} extraction tasks, greedy, max {args.max_tokens} tokens; radixlm on "
          f"{args.radixlm_model or Path(args.model_path).name}"
          f"{' --quantization ' + args.quantization if args.quantization else ''}, llama.cpp on "
          f"{Path(args.model_path).name}\n")
    print("| system | valid | same answer as the reference | tokens | seconds | tokens/s | finish |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, r in rows.items():
        ok = sum(valid(t, s) for t, (_, s) in zip(r["texts"], work))
        same = sum(1 for i, t in enumerate(r["texts"]) if i in answers and _parsed(t) == answers[i])
        finishes = ", ".join(f"{f} {r['finish'].count(f)}" for f in sorted(set(r["finish"])))
        print(f"| {name} | {ok}/{len(work)} | {same}/{len(answers)} | {r['tokens']} | {r['seconds']:.1f} | "
              f"{r['tokens'] / r['seconds']:.1f} | {finishes} |")
    if len(rows) == 2:
        a, b = (r["tokens"] / r["seconds"] for r in rows.values())
        print(f"\nradixlm / llama.cpp end-to-end tokens/s: **{a / b:.2f}x**")
    return 0


def _parsed(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


if __name__ == "__main__":
    sys.exit(main())
