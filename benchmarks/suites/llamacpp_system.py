"""llama.cpp through ``llama-cpp-python``: the checkpoint converted to GGUF once, prompts run one by one.

llama-cpp-python serves one sequence at a time; its own prefix reuse (the longest match with the
tokens already in its context) applies between consecutive prompts, as it would for a user.
Greedy (``top_k=1``), EOS ignored by reading exactly ``max_new_tokens`` tokens from ``generate``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .gguf_convert import convert
from .systems import Generation


class LlamaCppSystem:
    def __init__(self, name: str, model_path: str, n_ctx: int = 4096):
        from llama_cpp import Llama

        self.name = name
        gguf_path = Path(model_path) / "model-f32.gguf"
        if not gguf_path.exists():
            tmp = gguf_path.with_suffix(".tmp")
            convert(model_path, tmp)
            os.replace(tmp, gguf_path)
        self.llm = Llama(model_path=str(gguf_path), n_ctx=n_ctx, n_batch=512, verbose=False,
                         n_threads=os.cpu_count())

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> Generation:
        outputs = []
        for prompt in prompts:
            out: list[int] = []
            for token in self.llm.generate(prompt, top_k=1, top_p=1.0, temp=0.0, reset=False):
                out.append(int(token))
                if len(out) == max_new_tokens:
                    break
            outputs.append(out)
        return Generation(outputs=outputs, prompt_tokens=sum(len(p) for p in prompts))

    def reset(self) -> None:
        self.llm.reset()
