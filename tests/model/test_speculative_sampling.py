"""``Sampler.verify``: the kept tokens have the model's distribution (statistical, seeded, so
deterministic), a seeded request draws exactly what it draws without drafts, and greedy
verification keeps drafts exactly while they are the argmax."""

from __future__ import annotations

import torch
from radixlm.runtime.model.sampler import Sampler, SamplingInfo
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.req import Req

CHI2_999 = {4: 18.47, 5: 20.52}  # chi-square quantiles at 0.999 for these degrees of freedom


def chi2(counts: list[int], probs: list[float]) -> float:
    n = sum(counts)
    return sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, probs) if p > 0)


def make(params: SamplingParams, rows: int) -> tuple[Req, SamplingInfo]:
    req = Req("r", [1, 2], params)
    return req, SamplingInfo.build([req] * rows, 6, torch.device("cpu"))


LOGITS = torch.tensor([[2.0, 1.0, 0.5, 0.0, -0.5, 1.5],
                       [0.0, 2.5, 1.0, 0.3, 0.1, -1.0],
                       [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])


def run(params: SamplingParams, draft: list[int], trials: int, seed: int = 0):
    sampler = Sampler(torch.device("cpu"), seed)
    req, info = make(params, 1)
    firsts, seconds_after_d0 = [0] * 6, [0] * 6
    for _ in range(trials):
        accepted, token = sampler.verify(LOGITS[:len(draft) + 1].clone(), req, draft, info)
        kept = draft[:accepted] + [token]
        firsts[kept[0]] += 1
        if kept[0] == draft[0] and len(kept) > 1:
            seconds_after_d0[kept[1]] += 1
    return firsts, seconds_after_d0


def test_kept_tokens_have_the_models_distribution():
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    firsts, seconds = run(params, [0, 1], trials=8000)
    p0 = torch.softmax(LOGITS[0], -1).tolist()
    p1 = torch.softmax(LOGITS[1], -1).tolist()
    assert chi2(firsts, p0) < CHI2_999[5]
    assert chi2(seconds, p1) < CHI2_999[5]  # the second token, given the first draft was kept


def test_filters_apply_to_every_verified_position():
    params = SamplingParams(temperature=0.7, top_k=5, max_new_tokens=8)
    firsts, _ = run(params, [3], trials=8000, seed=1)
    p = torch.softmax(LOGITS[0] / 0.7, -1)
    p[torch.argsort(p)[:1]] = 0.0  # top_k = 5 of 6 drops the least likely token
    p = (p / p.sum()).tolist()
    assert firsts[int(torch.argmin(LOGITS[0]))] == 0
    assert chi2(firsts, p) < CHI2_999[4]


def test_greedy_keeps_drafts_while_they_are_the_argmax():
    sampler = Sampler(torch.device("cpu"), 0)
    req, info = make(SamplingParams(temperature=0.0, max_new_tokens=8), 1)
    assert sampler.verify(LOGITS.clone(), req, [0, 1], info) == (2, 0)
    assert sampler.verify(LOGITS.clone(), req, [0, 2], info) == (1, 1)
    assert sampler.verify(LOGITS.clone(), req, [5, 1], info) == (0, 0)
    req1, info1 = make(SamplingParams(temperature=0.0, max_new_tokens=8), 1)
    assert sampler.verify(LOGITS[:1].clone(), req1, [], info1) == (0, 0)


def test_a_seeded_request_draws_what_it_draws_without_drafts():
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=11, max_new_tokens=8)
    plain_sampler, spec_sampler = Sampler(torch.device("cpu"), 0), Sampler(torch.device("cpu"), 5)
    plain_req, info = make(params, 1)
    spec_req, _ = make(params, 1)
    plain = [int(plain_sampler.sample(LOGITS[j:j + 1].clone(), [plain_req], info)[0]) for j in range(3)]
    accepted, token = spec_sampler.verify(LOGITS.clone(), spec_req, plain[:2], info)
    assert (accepted, token) == (2, plain[2])  # drafts equal to the draws: all kept, then the third draw
