"""The real models' added tokens, renamed into a converted GGUF vocabulary at their real ids.

llama.cpp's vocabulary files hold a base model's tokens: qwen2's has ``[PAD151646]``... where the
Qwen2.5/Qwen3 tokenizers have ``<tool_call>``, ``<think>`` and the rest, and llama-bpe's is Llama
3.0's, with reserved tokens where 3.1/3.2 have ``<|python_tag|>`` and ``<|eom_id|>``. The ids and the
merges are the same, so renaming those entries (in the model's vocabulary, the added tokens and
``tokenizer_config.json``'s decoder) gives the real tokenizer's behaviour on every chat marker.
"""

from __future__ import annotations

import re

_RESERVED = re.compile(r"<\|reserved_special_token_\d+\|>")


def _plan(added: list[dict], renames: dict[int, tuple[str, bool]], renumber_reserved: bool
          ) -> dict[int, tuple[str, bool]]:
    """id -> (new content, special) for every added token that changes."""
    plan = dict(renames)
    if renumber_reserved:
        reserved = sorted(t["id"] for t in added if _RESERVED.fullmatch(t["content"]) and t["id"] not in renames)
        plan.update({tid: (f"<|reserved_special_token_{n}|>", True) for n, tid in enumerate(reserved)})
    return plan


def rename_added_tokens(spec: dict, config: dict, renames: dict[int, tuple[str, bool]],
                        renumber_reserved: bool = False) -> None:
    """Rename added tokens in a ``tokenizer.json`` ``spec`` and its ``tokenizer_config.json`` ``config``
    in place; ``renames`` maps id -> (content, special). ``ValueError`` for an id that is not added."""
    by_id = {t["id"]: t for t in spec.get("added_tokens", [])}
    missing = sorted(set(renames) - set(by_id))
    if missing:
        raise ValueError(f"ids {missing} are not added tokens of this vocabulary")
    plan = _plan(list(by_id.values()), renames, renumber_reserved)
    vocab = spec["model"]["vocab"]
    old = {tid: by_id[tid]["content"] for tid in plan}
    for tid in plan:  # drop every old name first: a renumbering may give one token another's old name
        if vocab.get(old[tid]) == tid:
            del vocab[old[tid]]
    decoder = config.get("added_tokens_decoder", {})
    for tid, (content, special) in plan.items():
        if isinstance(vocab, dict) and old[tid] != content:
            vocab[content] = tid
        by_id[tid].update(content=content, special=special, normalized=False)
        if str(tid) in decoder:
            decoder[str(tid)].update(content=content, special=special, normalized=False)
