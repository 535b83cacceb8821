"""HF ``transformers`` baselines: batched ``generate``, and ``generate`` reusing a shared prefix's KV.

Both decode greedily with EOS suppressed (``min_new_tokens == max_new_tokens``) in batches of
``batch_size`` prompts. ``HFPrefixReuse`` is the manual prefix cache an HF user would write: the
longest prefix shared by all prompts is prefilled once per ``generate`` call (its time counts),
then each batch gets its own copy of that ``DynamicCache`` expanded to the batch size; prompts are
grouped by suffix length so no padding lands between prefix and suffix.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from suites.systems import Generation


def _common_prefix_len(prompts: list[list[int]]) -> int:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for p in prompts[1:]:
        i = 0
        while i < n and p[i] == first[i]:
            i += 1
        n = i
    return n


class HFBatched:
    """``model.generate`` on left-padded batches; nothing is shared between prompts."""

    def __init__(self, name: str, model: Any, pad_id: int, batch_size: int):
        self.name = name
        self.model = model
        self.pad_id = pad_id
        self.batch_size = batch_size
        # transformers 5 renamed generate's ``past_key_values`` to ``cache``
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> Generation:
        outputs: list[list[int]] = [[] for _ in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # less padding per batch
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            for i, out in zip(idx, self._run([prompts[i] for i in idx], max_new_tokens)):
                outputs[i] = out
        return Generation(outputs=outputs, prompt_tokens=sum(len(p) for p in prompts))

    def _run(self, batch: list[list[int]], max_new_tokens: int, cache: Any = None) -> list[list[int]]:
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)  # [bs, width], left-padded
        mask = torch.zeros_like(ids)
        for row, p in enumerate(batch):
            ids[row, width - len(p):] = torch.tensor(p)
            mask[row, width - len(p):] = 1
        kwargs = {self._cache_kw: cache} if cache is not None else {}
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                      min_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=self.pad_id, **kwargs)
        return out[:, width:].tolist()

    def reset(self) -> None:
        """Nothing persists between calls."""


class HFPrefixReuse(HFBatched):
    """``generate`` with the shared prefix's KV computed once and copied into every batch."""

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> Generation:
        from transformers import DynamicCache

        shared = _common_prefix_len(prompts) if len(prompts) > 1 else 0
        shared = min(shared, min(len(p) for p in prompts) - 1)  # leave >= 1 token to feed per prompt
        if shared < 1:
            return super().generate(prompts, max_new_tokens)
        prefix_cache = DynamicCache(config=self.model.config)
        with torch.inference_mode():
            self.model(torch.tensor([prompts[0][:shared]]), use_cache=True, **{self._cache_kw: prefix_cache})
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            groups.setdefault(len(p), []).append(i)
        outputs: list[list[int]] = [[] for _ in prompts]
        for members in groups.values():
            for start in range(0, len(members), self.batch_size):
                idx = members[start:start + self.batch_size]
                cache = copy.deepcopy(prefix_cache)
                cache.batch_repeat_interleave(len(idx))
                for i, out in zip(idx, self._run([prompts[i] for i in idx], max_new_tokens, cache)):
                    outputs[i] = out
        total = sum(len(p) for p in prompts)
        return Generation(outputs=outputs, prompt_tokens=total, cached_tokens=shared * (len(prompts) - 1),
                          extra={"shared_prefix_tokens": shared})
