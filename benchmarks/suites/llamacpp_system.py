"""``llama.cpp-serial``: llama.cpp through ``llama-cpp-python``'s ``Llama``, prompts run one by one.

``Llama`` serves one sequence at a time (no batching across requests): llama.cpp's best configuration
for the chat suite (each conversation resumes its own saved state), and a second, labelled row in the
agent suite, whose best configuration is ``llamacpp_batched.py``'s parallel sequences. Prefix reuse is what
a llama-cpp-python user gets:

* ``Llama.generate`` keeps the KV cache of the last sequence and re-evaluates only the part of the
  next prompt past their longest common prefix (so consecutive agent requests share the system turn);
* a ``LlamaRAMCache`` of saved states, as ``create_completion`` and the llama-cpp-python server use
  it: after each request the state is saved under its tokens, and before a request the state with the
  longest matching prefix is loaded when it matches more than the live context (so interleaved
  chat conversations each resume their own history).

Greedy (``top_k=1``, ``temp=0``), EOS ignored by reading exactly ``max_new_tokens`` tokens from
``generate``; token ids go in directly, so no tokenizer is involved.
"""

from __future__ import annotations

import os

from suites.gguf_files import ensure_gguf
from suites.systems import Generation


def _common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LlamaCppSystem:
    """The ``llama.cpp-serial`` system: ``generate``/``reset`` over one ``llama_cpp.Llama`` context."""

    def __init__(self, name: str, model_path: str, n_ctx: int = 4096, state_cache_bytes: int = 2 << 30):
        from llama_cpp import Llama, LlamaRAMCache

        self.name = name
        self.gguf_path = ensure_gguf(model_path, "f32")
        # Same thread count as torch gets on this machine (every core).
        self.llm = Llama(model_path=str(self.gguf_path), n_ctx=n_ctx, n_batch=512, n_threads=os.cpu_count(),
                         logits_all=False, verbose=False)
        self._cache_cls = LlamaRAMCache
        self._cache_bytes = state_cache_bytes
        self.cache = LlamaRAMCache(state_cache_bytes)

    def _live_tokens(self) -> list[int]:
        return [int(t) for t in self.llm._input_ids[: self.llm.n_tokens]]

    def _restore_best_state(self, prompt: list[int]) -> int:
        """Load the saved state sharing the longest prefix with ``prompt`` if it beats the live context.

        Returns how many prompt tokens will be reused (at most ``len(prompt) - 1``: one is re-evaluated
        for fresh logits, as ``Llama.generate`` does).
        """
        live = _common_prefix(self._live_tokens(), prompt)
        key = self.cache._find_longest_prefix_key(tuple(prompt))
        if key is not None and _common_prefix(key, prompt) > live:
            self.llm.load_state(self.cache[key])
            live = _common_prefix(key, prompt)
        return min(live, len(prompt) - 1)

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> Generation:
        outputs, cached = [], 0
        for prompt in prompts:
            cached += self._restore_best_state(prompt)
            out: list[int] = []
            # reset=True (the default) is what triggers llama-cpp-python's longest-prefix KV reuse.
            for token in self.llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0):
                out.append(int(token))
                if len(out) == max_new_tokens:
                    break
            outputs.append(out)
            self.cache[self._live_tokens()] = self.llm.save_state()
        return Generation(outputs=outputs, prompt_tokens=sum(len(p) for p in prompts), cached_tokens=cached)

    def reset(self) -> None:
        """Drop the live KV cache and every saved state (each repetition starts cold)."""
        self.llm.reset()
        self.llm._ctx.kv_cache_clear()
        self.cache = self._cache_cls(self._cache_bytes)
