"""Sampler unit tests on toy logits: filters, penalties, bias, seeds, min_new_tokens."""

from __future__ import annotations

import pytest
import torch
from radixlm.runtime.model.sampler import Sampler, SamplingInfo, apply_logit_processors
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.req import Req

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

CPU = torch.device("cpu")


def make_req(prompt=(5,), output=(), **params) -> Req:
    req = Req("r", list(prompt), SamplingParams(**params))
    req.output_ids = list(output)
    return req


def filter_mask(logits: torch.Tensor, **params) -> torch.Tensor:
    """Which tokens survive the top-k/top-p/min-p filters (True = kept), in token order."""
    req = make_req(**params)
    info = SamplingInfo.build([req], logits.shape[1], CPU)
    probs = torch.softmax(logits / info.temperatures, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    drop = Sampler._filter_mask(sorted_probs, info)
    kept = torch.zeros_like(drop)
    kept.scatter_(1, order, ~drop)
    return kept[0]


def test_top_k_top_p_min_p_masks():
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    logits = probs.log()
    assert filter_mask(logits, top_k=2).tolist() == [True, True, False, False]
    assert filter_mask(logits, top_p=0.65).tolist() == [True, True, False, False]
    assert filter_mask(logits, top_p=0.75).tolist() == [True, True, True, False]
    assert filter_mask(logits, top_p=0.1).tolist() == [True, False, False, False]  # the best always stays
    assert filter_mask(logits, min_p=0.6).tolist() == [True, True, False, False]  # 0.2 < 0.6 * 0.4
    assert filter_mask(logits, top_k=3, min_p=0.3).tolist() == [True, True, True, False]


def test_sampling_respects_filters():
    sampler = Sampler(CPU, random_seed=0)
    logits = torch.tensor([[2.0, 1.9, 1.8, -5.0, 0.0]]).repeat(200, 1)
    reqs = [make_req(top_k=2) for _ in range(200)]
    ids = sampler.sample(logits.clone(), reqs, SamplingInfo.build(reqs, 5, CPU))
    assert set(ids.tolist()) == {0, 1}
    greedy = [make_req(temperature=0.0)]
    assert sampler.sample(logits[:1].clone(), greedy, SamplingInfo.build(greedy, 5, CPU)).tolist() == [0]


def test_sampling_matches_distribution():
    sampler = Sampler(CPU, random_seed=0)
    probs = torch.tensor([0.5, 0.3, 0.2])
    reqs = [make_req() for _ in range(4000)]
    ids = sampler.sample(probs.log().repeat(4000, 1), reqs, SamplingInfo.build(reqs, 3, CPU))
    freq = torch.bincount(ids, minlength=3).float() / 4000
    assert torch.allclose(freq, probs, atol=0.03)


def test_seeded_rows_do_not_depend_on_the_batch():
    logits = torch.randn(1, 50)
    a = make_req(seed=7)
    sampler = Sampler(CPU, random_seed=0)
    alone = [sampler.sample(logits.clone(), [a], SamplingInfo.build([a], 50, CPU)).item() for _ in range(6)]
    assert len(set(alone)) > 1  # the request's generator advances
    b = make_req(seed=7)
    others = [make_req(), make_req(seed=3)]
    batch_logits = torch.cat([torch.randn(1, 50), logits, torch.randn(1, 50)])
    sampler = Sampler(CPU, random_seed=123)
    in_batch = [sampler.sample(batch_logits.clone(), [others[0], b, others[1]],
                               SamplingInfo.build([others[0], b, others[1]], 50, CPU))[1].item()
                for _ in range(6)]
    assert in_batch == alone


def test_repetition_penalty_hf_semantics():
    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    apply_logit_processors(logits, [make_req(prompt=[0], output=[1], repetition_penalty=2.0)], [])
    assert logits.tolist() == [[1.0, -4.0, 2.0, -2.0]]


def test_frequency_and_presence_penalties_on_output_only():
    logits = torch.zeros(1, 4)
    req = make_req(prompt=[3, 3], output=[1, 1, 2], frequency_penalty=0.5, presence_penalty=0.25)
    apply_logit_processors(logits, [req], [])
    assert logits.tolist() == [[0.0, -1.25, -0.75, 0.0]]


def test_logit_bias_and_min_new_tokens():
    logits = torch.zeros(2, 6)
    reqs = [make_req(logit_bias={4: 3.0, 99: 1.0}),
            make_req(output=[2], min_new_tokens=3, max_new_tokens=8, stop_token_ids=[5])]
    apply_logit_processors(logits, reqs, eos_token_ids=[1])
    assert logits[0].tolist() == [0, 0, 0, 0, 3.0, 0]
    assert logits[1, 1] == float("-inf") and logits[1, 5] == float("-inf") and logits[1, 0] == 0
    done = make_req(output=[2, 2, 2], min_new_tokens=3, max_new_tokens=8)
    fresh = torch.zeros(1, 6)
    apply_logit_processors(fresh, [done], eos_token_ids=[1])
    assert torch.isfinite(fresh).all()
