"""The engine with ``attention_backend="triton"`` (CPU interpreter) produces the same greedy output
as the ``torch`` backend on the tiny checkpoint: prefill, prefix-cache hits (extend over a cached
prefix), decode, and a regex-constrained request (the Triton bitmask kernel). Short run."""

from __future__ import annotations

from radixlm.kernels.testing.interpreted import interpreted
from radixlm.runtime.engine.engine import Engine

SHARED = "System: answer briefly and precisely. "
PROMPTS = [SHARED + "What is two plus two?", SHARED + "Name a colour.", "Hi"]
GREEDY = {"temperature": 0.0, "max_new_tokens": 4}
CONSTRAINED = {"temperature": 0.0, "max_new_tokens": 4, "regex": r"[0-9]{2}-[a-z]{3}"}


def _run(model_path: str, backend: str) -> list[tuple[list[int], int]]:
    with Engine(model_path, attention_backend=backend, device="cpu", max_total_tokens=2048) as engine:
        outs = engine.generate(PROMPTS[0], GREEDY)  # fills the radix cache with the shared prefix
        outs = [outs] + engine.generate(PROMPTS, GREEDY)
        outs.append(engine.generate(SHARED + "Code:", CONSTRAINED))
        engine.check_no_leak()
    return [(o["output_ids"], o["meta_info"]["cached_tokens"]) for o in outs]


@interpreted
def test_engine_triton_interpreter_matches_torch_greedy(tiny_llama):
    triton_outs = _run(tiny_llama, "triton")
    torch_outs = _run(tiny_llama, "torch")
    assert triton_outs == torch_outs
    assert sum(cached > 0 for _, cached in triton_outs) >= 2  # extends over a cached prefix happened
    assert all(len(ids) > 0 for ids, _ in triton_outs)
