"""Batched sampling: logit processors, then greedy or temperature / top-k / top-p / min-p sampling.

Order applied to the float32 logits ``[bs, vocab]`` of the rows that sample:

1. ``logit_bias`` (added);
2. ``repetition_penalty`` (HF semantics: every token seen in prompt + output has its logit divided
   by the penalty when positive, multiplied when negative);
3. ``frequency_penalty`` / ``presence_penalty`` (OpenAI semantics, output tokens only:
   ``logit -= frequency * count + presence * (count > 0)``);
4. ``min_new_tokens``: EOS (unless ``ignore_eos``) and ``stop_token_ids`` get ``-inf`` until reached;
5. (the model runner then applies grammar bitmasks);
6. greedy rows (``temperature == 0`` or ``top_k == 1``) take the argmax; the others divide by the
   temperature, softmax, drop tokens outside top-k / top-p / below ``min_p * max_prob``, and draw.

Speculative decoding's verification (``Sampler.verify``) keeps the drafts the model would have
produced: each position is sampled as a decode step would sample it (greedy: the argmax), and
drafts are kept while they equal the sampled token. A draft token ``d`` is thus kept with
probability ``p(d)``, as in speculative sampling with a deterministic draft, and a seeded request
draws exactly what it draws without drafts: its output does not depend on them.

Draws use the exponential race (``argmax(p / E)``, ``E ~ Exp(1)``): a request with a ``seed`` owns
a ``torch.Generator`` seeded with ``seed + sibling index`` that draws its own noise row, so its
output does not depend on what else is in the batch. Requests without a seed share the engine's
generator (seeded by ``ServerArgs.random_seed``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from radixlm.runtime.scheduler.req import Req


@dataclass
class SamplingInfo:
    """Per-row sampler settings as tensors, built once per step by ``SamplingInfo.build``.

    When every row is greedy the tensors are None (argmax needs none of them): building them
    would cost five host-to-device copies per decode step for nothing.
    """

    greedy: torch.Tensor | None  # [bs] bool
    temperatures: torch.Tensor | None  # [bs, 1] float32 (1.0 on greedy rows)
    top_ks: torch.Tensor | None  # [bs] int64 (vocab when disabled)
    top_ps: torch.Tensor | None  # [bs] float32
    min_ps: torch.Tensor | None  # [bs] float32
    all_greedy: bool
    need_filter: bool

    @classmethod
    def build(cls, reqs: list[Req], vocab: int, device: torch.device) -> SamplingInfo:
        params = [r.params for r in reqs]
        greedy = [p.is_greedy for p in params]
        if all(greedy):
            return cls(None, None, None, None, None, all_greedy=True, need_filter=False)
        temps = [1.0 if g else p.temperature for p, g in zip(params, greedy)]
        top_ks = [vocab if p.top_k < 0 else min(p.top_k, vocab) for p in params]
        need_filter = any(not g and (k < vocab or p.top_p < 1.0 or p.min_p > 0.0)
                          for p, g, k in zip(params, greedy, top_ks))
        return cls(
            greedy=torch.tensor(greedy, dtype=torch.bool, device=device),
            temperatures=torch.tensor(temps, dtype=torch.float32, device=device).unsqueeze(1),
            top_ks=torch.tensor(top_ks, dtype=torch.int64, device=device),
            top_ps=torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
            min_ps=torch.tensor([p.min_p for p in params], dtype=torch.float32, device=device),
            all_greedy=all(greedy),
            need_filter=need_filter,
        )


def apply_logit_processors(logits: torch.Tensor, reqs: list[Req], eos_token_ids: list[int]) -> None:
    """Steps 1-4 of the module docstring, in place on ``logits`` ``[bs, vocab]`` float32."""
    device, vocab = logits.device, logits.shape[1]
    rows, cols, vals = [], [], []
    for i, req in enumerate(reqs):
        for tok, bias in (req.params.logit_bias or {}).items():
            if 0 <= tok < vocab:
                rows.append(i)
                cols.append(tok)
                vals.append(bias)
    if rows:
        logits.index_put_((_ids(rows, device), _ids(cols, device)),
                          torch.tensor(vals, dtype=logits.dtype, device=device), accumulate=True)
    _apply_repetition_penalty(logits, reqs)
    _apply_frequency_presence(logits, reqs)
    rows, cols = [], []
    for i, req in enumerate(reqs):
        if req.output_len < req.params.min_new_tokens:
            banned = list(req.params.stop_token_ids) + ([] if req.params.ignore_eos else list(eos_token_ids))
            for tok in banned:
                if 0 <= tok < vocab:
                    rows.append(i)
                    cols.append(tok)
    if rows:
        logits[_ids(rows, device), _ids(cols, device)] = float("-inf")


def _apply_repetition_penalty(logits: torch.Tensor, reqs: list[Req]) -> None:
    rows = [i for i, r in enumerate(reqs) if r.params.repetition_penalty != 1.0]
    if not rows:
        return
    device = logits.device
    seen = torch.zeros((len(rows), logits.shape[1]), dtype=torch.bool, device=device)
    for j, i in enumerate(rows):
        seen[j, _ids(reqs[i].fill_ids, device)] = True
    penalty = torch.tensor([reqs[i].params.repetition_penalty for i in rows],
                           dtype=logits.dtype, device=device).unsqueeze(1)  # [n, 1]
    sub = logits[_ids(rows, device)]  # [n, vocab]
    penalised = torch.where(sub > 0, sub / penalty, sub * penalty)
    logits[_ids(rows, device)] = torch.where(seen, penalised, sub)


def _apply_frequency_presence(logits: torch.Tensor, reqs: list[Req]) -> None:
    rows = [i for i, r in enumerate(reqs)
            if (r.params.frequency_penalty or r.params.presence_penalty) and r.output_ids]
    if not rows:
        return
    device = logits.device
    counts = torch.zeros((len(rows), logits.shape[1]), dtype=logits.dtype, device=device)
    for j, i in enumerate(rows):
        ids = _ids(reqs[i].output_ids, device)
        counts[j].index_add_(0, ids, torch.ones(len(reqs[i].output_ids), dtype=logits.dtype, device=device))
    freq = torch.tensor([reqs[i].params.frequency_penalty for i in rows], dtype=logits.dtype,
                        device=device).unsqueeze(1)
    pres = torch.tensor([reqs[i].params.presence_penalty for i in rows], dtype=logits.dtype,
                        device=device).unsqueeze(1)
    logits[_ids(rows, device)] -= freq * counts + pres * (counts > 0).to(logits.dtype)


class Sampler:
    """Draws one token per row; owns the shared generator for requests without a seed."""

    def __init__(self, device: torch.device, random_seed: int = 0) -> None:
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(random_seed)

    def verify(self, logits: torch.Tensor, req: Req, draft: list[int], info: SamplingInfo) -> tuple[int, int]:
        """``(accepted, token)``: how many leading ``draft`` tokens to keep, and the model's token
        after them, from ``req``'s processed logits ``[len(draft) + 1, vocab]`` (row j: the
        position after ``draft[:j]``; modified in place; ``info`` is for the one request).

        Each row is sampled exactly as a decode step samples it (the same draws from the same
        generator, one row at a time), and the drafts are kept while they equal what was sampled:
        the kept tokens are the ones decoding one token a step would have produced."""
        if info.all_greedy:
            targets = torch.argmax(logits, dim=-1).tolist()
            accepted = 0
            while accepted < len(draft) and targets[accepted] == draft[accepted]:
                accepted += 1
            return accepted, targets[accepted]
        for j in range(len(draft) + 1):
            token = int(self.sample(logits[j:j + 1], [req], info)[0])
            if j == len(draft) or token != draft[j]:
                return j, token
        raise AssertionError("unreachable: the last row always returns")

    def sample(self, logits: torch.Tensor, reqs: list[Req], info: SamplingInfo) -> torch.Tensor:
        """Next token ids ``[bs]`` int64 from processed logits ``[bs, vocab]`` (modified in place)."""
        greedy_ids = torch.argmax(logits, dim=-1)  # [bs]
        if info.all_greedy:
            return greedy_ids
        # in place where the values allow: each [bs, vocab] temporary is 39 MB at 64 x 152k
        probs = torch.softmax(logits.div_(info.temperatures), dim=-1)  # [bs, vocab]
        order = None
        if info.need_filter:
            probs, order = probs.sort(dim=-1, descending=True)
            probs.masked_fill_(self._filter_mask(probs, info), 0.0)
        noise = self._exponential_noise(reqs, probs.shape[1])  # [bs, vocab]
        choice = torch.argmax(probs.div_(noise), dim=-1)  # [bs]
        if order is not None:
            choice = order.gather(1, choice.unsqueeze(1)).squeeze(1)
        return torch.where(info.greedy, greedy_ids, choice)

    @staticmethod
    def _filter_mask(sorted_probs: torch.Tensor, info: SamplingInfo) -> torch.Tensor:
        """True where a token (in descending-probability order) is dropped; the first never is."""
        vocab = sorted_probs.shape[1]
        ranks = torch.arange(vocab, device=sorted_probs.device).unsqueeze(0)  # [1, vocab]
        drop = ranks >= info.top_ks.unsqueeze(1)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass strictly before each token
        drop |= before > info.top_ps.unsqueeze(1)
        drop |= sorted_probs < sorted_probs[:, :1] * info.min_ps.unsqueeze(1)
        drop[:, 0] = False
        return drop

    def _exponential_noise(self, reqs: list[Req], vocab: int) -> torch.Tensor:
        noise = torch.empty((len(reqs), vocab), dtype=torch.float32, device=self.device)
        shared = [i for i, r in enumerate(reqs) if r.params.seed is None]
        if len(shared) == len(reqs):  # the same draws as the rows below, without a second buffer
            return noise.exponential_(generator=self.generator)
        if shared:
            noise[_ids(shared, self.device)] = torch.empty(
                (len(shared), vocab), dtype=torch.float32, device=self.device).exponential_(
                generator=self.generator)
        for i, req in enumerate(reqs):
            if req.params.seed is not None:
                noise[i].exponential_(generator=self.request_generator(req))
        return noise

    def request_generator(self, req: Req) -> torch.Generator:
        """The request's own generator, created on first use from ``seed + seed_offset``."""
        if req.sampler_state is None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed((req.params.seed + req.seed_offset) % 2**64)  # torch takes [0, 2**64)
            req.sampler_state = gen
        return req.sampler_state


def _ids(values: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64, device=device)
