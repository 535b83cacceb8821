"""Record a real model's answers to ``extraction_set.py``'s twenty tasks, for ``bench_jump_forward.py``.

The model is Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, ``real_gguf``), run greedily by llama.cpp
(``llama-cpp-python``, the ``bench`` extra) under each task's JSON schema (llama.cpp's own schema
grammar, which also keeps schema order). The answers are written with the model, the file's
sha256 and the generator to ``benchmarks/data/extraction_outputs.json``; each must validate.

    python benchmarks/record_extraction.py [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extraction_set import DOCUMENTS, PROMPT, SCHEMAS  # noqa: E402

OUT = Path(__file__).resolve().parent / "data" / "extraction_outputs.json"
MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m"


def record(threads: int, max_tokens: int) -> dict:
    """The model's answer to every task, checked against its schema; resumes from the tasks the
    file already holds and saves after each one (a slow machine can stop and go on)."""
    import llama_cpp
    from radixlm.runtime.testing import real_gguf

    data = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {
        "model": f"{MODEL} ({real_gguf.MODELS[MODEL].licence})", "sha256": real_gguf.MODELS[MODEL].sha256,
        "generator": f"llama-cpp-python {llama_cpp.__version__}, greedy, the task's JSON schema as grammar",
        "prompt": PROMPT, "outputs": []}
    done = {o["task"] for o in data["outputs"]}
    llm = llama_cpp.Llama(str(real_gguf.fetch(MODEL)), n_ctx=1024, n_threads=threads, verbose=False, seed=0)
    for i, (kind, document) in enumerate(DOCUMENTS):
        if i in done:
            continue
        schema = SCHEMAS[kind]
        prompt = PROMPT.format(fields=", ".join(schema["properties"]), document=document)
        reply = llm.create_chat_completion([{"role": "user", "content": prompt}], temperature=0.0,
                                           max_tokens=max_tokens,
                                           response_format={"type": "json_object", "schema": schema})
        text = reply["choices"][0]["message"]["content"]
        value = json.loads(text)
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
        data["outputs"].append({"task": i, "schema": kind, "text": text, "value": value})
        data["outputs"].sort(key=lambda o: o["task"])
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{i:2d} {kind:8s} {json.dumps(value)[:110]}", flush=True)
    return data


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=400)
    args = p.parse_args()
    data = record(args.threads, args.max_tokens)
    print(f"{len(data['outputs'])} answers in {OUT}")


if __name__ == "__main__":
    main()
