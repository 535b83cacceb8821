"""The least arithmetic a prefix-sharing workload needs, and the time it takes at a measured matmul rate.

A workload of prompts that share a prefix, each decoding ``new_tokens`` tokens, needs at least:

* the linear layers (q/k/v/o, the MLP) once per token that enters the model: the shared prefix once,
  each prompt's own suffix, and every decoded token but the last (its logits end the request);
* the LM head once per prompt (its first token) and once per decoded token after it;
* attention: per layer, per head, per query, a dot product with every earlier key and a weighted
  sum of as many values (``2 * head_dim`` multiply-adds per (query, key) pair), causal.

``floor_seconds`` is that FLOP count over the best rate measured in the run: no engine on this machine can run the
workload faster unless it beats the rate. ``bound`` turns a peer's measured time into the largest
speed-up any engine could show over it (``peer seconds / floor seconds``): when a target ratio sits
above the bound, the target cannot be met on this machine whatever the engine does.
"""

from __future__ import annotations

from typing import Any

from suites.parallel_plan import common_prefix_len


def _linear_macs_per_token(cfg: Any) -> int:
    """Multiply-adds of one token through every decoder layer's projections (no LM head)."""
    h, d = cfg.hidden_size, cfg.head_dim
    attn = h * (cfg.num_heads * d) * 2 + h * (cfg.num_kv_heads * d) * 2  # q, o; k, v
    mlp = 3 * h * cfg.intermediate_size  # gate, up, down
    return cfg.num_layers * (attn + mlp)


def _causal_pairs(start: int, count: int) -> int:
    """(query, key) pairs of ``count`` queries at positions ``start ..``, each seeing itself and all before."""
    return count * start + count * (count + 1) // 2


def workload_flops(cfg: Any, prompts: list[list[int]], new_tokens: int) -> dict[str, float]:
    """FLOPs (2 per multiply-add) of the linear layers, the LM head and attention, with the shared
    prefix computed once; linear layers and attention also split into their prefill and decode
    parts (``kernel_floor`` times each part at its own shapes)."""
    prefix = common_prefix_len(prompts)
    decoded = len(prompts) * max(new_tokens - 1, 0)  # tokens fed back in after the first
    prefill_tokens = prefix + sum(len(p) - prefix for p in prompts)
    prefill_pairs = _causal_pairs(0, prefix)
    decode_pairs = 0
    for p in prompts:
        prefill_pairs += _causal_pairs(prefix, len(p) - prefix)
        decode_pairs += _causal_pairs(len(p), max(new_tokens - 1, 0))
    per_token = _linear_macs_per_token(cfg)
    head = cfg.hidden_size * cfg.vocab_size * (len(prompts) + decoded)
    per_pair = cfg.num_layers * cfg.num_heads * 2 * cfg.head_dim
    parts = {"linear_prefill": per_token * prefill_tokens, "linear_decode": per_token * decoded,
             "attention_prefill": per_pair * prefill_pairs, "attention_decode": per_pair * decode_pairs}
    gflop = {f"{k}_gflop": 2 * v / 1e9 for k, v in parts.items()}
    linear = parts["linear_prefill"] + parts["linear_decode"]
    attention = parts["attention_prefill"] + parts["attention_decode"]
    return {"shared_prefix_tokens": prefix, "prefill_tokens": prefill_tokens, "decoded_tokens": decoded,
            "linear_gflop": 2 * linear / 1e9, "lm_head_gflop": 2 * head / 1e9,
            "attention_gflop": 2 * attention / 1e9, "total_gflop": 2 * (linear + head + attention) / 1e9,
            **gflop}


def floor(cfg: Any, prompts: list[list[int]], new_tokens: int, matmul_gflop_per_s: float) -> dict[str, float]:
    """``workload_flops`` and the float32 matmul rate measured in the run (``bound`` turns them into seconds)."""
    return {**workload_flops(cfg, prompts, new_tokens), "matmul_gflop_per_s": matmul_gflop_per_s}


def bound(floor_info: dict[str, float], systems: dict[str, Any]) -> dict[str, Any]:
    """Per system: its median seconds, the FLOP rate it ran the workload at, and ``bound`` (its seconds
    over the floor: the largest speed-up any engine could show over it). The floor is taken at the
    best rate anything reached, the measured matmul rate or a system's own, so it is never optimistic."""
    seconds = {n: s["median"]["seconds"] for n, s in systems.items()
               if s.get("status") == "ok" and s.get("median", {}).get("seconds")}
    total = floor_info["total_gflop"]
    best_rate = max([floor_info["matmul_gflop_per_s"], *(total / t for t in seconds.values())])
    floor_s = total / best_rate
    out: dict[str, Any] = {"floor_seconds": floor_s, "floor_rate_gflop_per_s": best_rate, "systems": {}}
    for name, t in seconds.items():
        out["systems"][name] = {"seconds": t, "gflop_per_s": total / t, "bound": t / floor_s}
    return out

