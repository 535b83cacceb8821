"""Speculative decoding in the scheduler (no model, no torch): the drafter's proposals, the verify
step's accounts, and the invariant that drafts never change the output.

The fake runner (``scheduler_fakes``) computes each token from what the request's slots hold, so
a slot handed back too early, or a rejected draft's K/V left in place, changes the outputs."""

from __future__ import annotations

import pytest
from radixlm.radix_cache import RadixCache
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.speculation import Drafter, SpeculativeConfig, best_length, spec_blocker
from scheduler_fakes import EOS, expected_output, make, run_all

SPEC = SpeculativeConfig(num_draft_tokens=6, max_batch_size=8)


def periodic(seq: list[int]) -> int:
    """A 'model' that repeats its prompt's last 5 tokens forever: n-gram drafts are right."""
    return seq[-5] if len(seq) >= 5 else 10


def mostly_periodic(seq: list[int]) -> int:
    """Repeats, except at every 7th position: drafts are right for a while, then wrong."""
    if len(seq) < 5:
        return 10
    return seq[-5] if len(seq) % 7 else (seq[-1] * 3) % 80 + 10


def expected(prompt: list[int], n: int, fn) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        seq.append(fn(seq))
    return seq[len(prompt):]


def req(rid, prompt, max_new=8, **params) -> Req:
    return Req(rid, prompt, SamplingParams(max_new_tokens=max_new, temperature=0.0, **params))


@pytest.mark.parametrize("fn", [periodic, mostly_periodic])
def test_verified_drafts_give_the_same_tokens_in_fewer_steps(fn):
    prompt = [2, 11, 12, 13, 14, 15, 11, 12, 13, 14, 15, 11, 12]
    outs = {}
    for spec in (None, SPEC):
        sched, runner = make(speculative=spec, fn=fn)
        r = req("a", prompt, max_new=40)
        sched.add(r)
        run_all(sched, runner)
        assert r.finished_reason.type == "length"
        assert r.output_ids == expected(prompt, 40, fn)
        sched.cache.check_no_leak()
        outs[spec is not None] = (len(runner.steps), r)
    steps_plain, steps_spec = outs[False][0], outs[True][0]
    assert steps_spec < steps_plain
    spec_req = outs[True][1]
    assert spec_req.spec_verify_ct > 0 and spec_req.spec_accepted_tokens > 0
    assert spec_req.forward_passes == steps_spec


def test_batch_of_requests_with_and_without_drafts_keeps_every_account():
    prompts = [[2, 20 + i, 21, 22, 23, 24, 20 + i, 21, 22] for i in range(5)] + [[2, 3, 4]]
    sched, runner = make(speculative=SPEC, fn=mostly_periodic, num_slots=300)
    reqs = [req(str(i), p, max_new=30) for i, p in enumerate(prompts)]
    for r in reqs:
        sched.add(r)
    run_all(sched, runner)
    for r in reqs:
        assert r.output_ids == expected(r.origin_input_ids, 30, mostly_periodic), r.rid
    assert any(b.is_verify for b in runner.steps)
    sched.cache.check_no_leak()


def test_drafts_stop_at_max_new_tokens_and_the_context():
    sched, runner = make(speculative=SPEC, fn=periodic)
    r = req("a", [2, 11, 12, 13, 14, 15, 11, 12, 13, 14, 15], max_new=3)
    sched.add(r)
    run_all(sched, runner)
    assert r.output_ids == expected(r.origin_input_ids, 3, periodic)
    for batch in runner.steps:
        for d in batch.drafts:
            assert len(d) <= 2  # the step's own token is the third
    sched.cache.check_no_leak()


def test_a_stop_token_inside_the_accepted_drafts_ends_the_request_there():
    prompt = [2, 11, 12, 13, 14, 15, 11, 12, 13, 14, 15]
    sched, runner = make(speculative=SPEC, fn=periodic)
    r = req("a", prompt, max_new=30, stop_token_ids=[13])
    sched.add(r)
    run_all(sched, runner)
    assert r.output_ids == [11, 12, 13]
    assert r.finished_reason.type == "stop"
    sched.cache.check_no_leak()


def test_rejected_drafts_hand_back_their_slots_between_steps():
    sched, runner = make(speculative=SPEC, fn=mostly_periodic)
    r = req("a", [2, 11, 12, 13, 14, 15, 11, 12, 13, 14, 15], max_new=40)
    sched.add(r)
    while not r.finished:
        batch = sched.schedule()
        sched.process_batch_result(batch, runner.run(batch))
        if not r.finished:
            assert r.kv.kv_len == r.fill_len - 1 == len(r.kv.slots)
    sched.cache.check_no_leak()


def test_drafter_ngram_proposes_what_followed_the_latest_match():
    d = free(Drafter(SPEC, None, frozenset({EOS})))
    r = req("a", [2, 5, 6, 7, 8, 9, 5, 6], max_new=20)
    assert d.propose(r, 10) == [7, 8, 9, 5, 6, 7]  # overlapping repeats allowed
    r.output_ids = [7, 8, 9]  # the suffix "8 9" occurs at 4..5: what followed is 5 6 7 ...
    assert d.propose(r, 3) == [5, 6, 7]


def test_drafter_stops_before_an_end_token_and_steps_aside_for_penalties():
    d = free(Drafter(SPEC, None, frozenset({EOS})))
    r = req("a", [2, 5, 6, 7, EOS, 9, 5, 6], max_new=20)
    assert d.propose(r, 10) == [7]
    penalised = req("b", [2, 5, 6, 7, 8, 5, 6], max_new=20, frequency_penalty=0.5)
    assert spec_blocker(penalised) is not None
    assert d.propose(penalised, 10) == []
    assert d.propose(req("c", [2, 5, 6, 7, 8, 5, 6], max_new=20, min_new_tokens=4), 10) == []


def test_draft_length_follows_the_keep_rate_and_the_cost_of_a_row():
    assert best_length(0.9, 0.0, 6) == 6  # rows cost nothing: the longest draft
    assert best_length(0.9, 0.1, 8) > best_length(0.6, 0.1, 8) > 0
    assert best_length(0.3, 0.3, 8) == 0  # a plain step yields more per unit of time
    assert best_length(0.95, 1.0, 8) == 0  # each row costs a whole step: nothing pays
    d = Drafter(SPEC, None, frozenset({EOS}))
    r = req("a", [2] + [5, 6, 7] * 6, max_new=50)
    first = d.propose(r, 50)
    assert 0 < len(first) < 6  # the prior: a draft row at a tenth of a step, a token kept at 0.6
    d.record(r, len(first))
    d.cost.observe(1, 1, 1.0)
    d.cost.observe(1, 5, 1.4)  # four draft rows added 0.4 s to a 1 s step
    assert d.cost.ratio(1) == pytest.approx(0.1)
    for _ in range(6):  # the model keeps every draft: the keep rate rises, so does the length
        d.record(r, len(d.propose(r, 50)))
    assert r.drafts.keep_rate > 0.9 and len(d.propose(r, 50)) == 6
    slow = Drafter(SPEC, None, frozenset({EOS}))
    slow.cost.observe(1, 1, 1.0)
    slow.cost.observe(1, 3, 3.0)  # each draft row costs a whole step (compute-bound)
    assert slow.propose(req("b", [2] + [5, 6, 7] * 6, max_new=50), 50) == []
    assert d.stats()["spec_accepted_tokens"] == d.stats()["spec_draft_tokens"] > 0


def free(drafter: Drafter) -> Drafter:
    """``drafter`` told that draft rows cost nothing (so it proposes its longest drafts)."""
    drafter.cost.observe(1, 1, 1.0)
    drafter.cost.observe(1, 2, 1.0)
    return drafter


def test_drafter_prefers_the_radix_tree_continuation():
    tree = RadixCache()
    tree.insert([2, 40, 41, 50, 40, 41, 42, 43], list(range(1, 9)))
    d = free(Drafter(SPEC, tree, frozenset({EOS})))
    # the prompt alone proposes what followed its earlier ``40 41`` (50 40 41 ...); the tree holds
    # what an earlier request wrote after this very prefix, and that wins
    assert d.propose(req("a", [2, 40, 41, 50, 40, 41], max_new=20), 10) == [42, 43]
    assert d.propose(req("b", [2, 40, 41, 60, 40, 41], max_new=20), 10)[:2] == [60, 40]
    assert tree.stats()["queries"] == 0  # a draft lookup is not a cache query (hit-rate metrics)


def test_drafts_are_off_for_large_batches_and_when_disabled():
    assert not Drafter(SpeculativeConfig(), None, frozenset()).active(1)
    assert Drafter(SPEC, None, frozenset()).active(8)
    assert not Drafter(SPEC, None, frozenset()).active(9)


class ToyConstraint:
    """A 'grammar' over ints: only tokens from ``allowed`` (in order of a path), with a forced run."""

    def __init__(self, path: list[int]) -> None:
        self.path, self.at = path, 0
        self.calls: list[str] = []

    def accept(self, token):
        ok = self.at < len(self.path) and self.path[self.at] == token
        self.at += ok
        return None

    def rollback(self, n):
        self.at -= n

    def validate(self, tokens):
        n = 0
        while n < len(tokens) and self.at + n < len(self.path) and self.path[self.at + n] == tokens[n]:
            n += 1
        return n

    def draft(self, k):
        self.calls.append("draft")
        return self.path[self.at:self.at + min(k, 2)]  # the grammar forces two tokens

    def close(self, output_len, max_output_len):
        return None


def test_grammar_drafts_come_first_and_every_draft_is_cut_to_the_grammar():
    d = free(Drafter(SPEC, None, frozenset({EOS})))
    r = req("a", [2, 5, 6, 7, 8, 5, 6], max_new=20)
    r.constraint = ToyConstraint([30, 31, 5, 6, 99])
    draft = d.propose(r, 10)
    assert draft[:2] == [30, 31] and r.drafts.grammar_len == 2
    assert all(t in (30, 31, 5, 6, 99) for t in draft)  # the n-gram tail is cut where the path ends
    off = free(Drafter(SpeculativeConfig(6, 8, grammar_drafts=False), None, frozenset({EOS})))
    r2 = req("b", [2, 5, 6, 7, 8, 5, 6], max_new=20)
    r2.constraint = ToyConstraint([7, 8, 1])
    assert off.propose(r2, 10) == [7, 8] and r2.constraint.calls == []


def test_radix_continuation_is_read_only():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [11, 12, 13, 14, 15])
    tree.insert([1, 2, 3, 9], [11, 12, 13, 19])
    before = tree.pretty()
    assert tree.continuation([1, 2], max_tokens=2) == [3, 9]  # the latest branch at the fork
    assert tree.continuation([1, 2, 3, 4]) == [5]
    assert tree.continuation([1, 2, 7]) == []
    assert tree.continuation([1, 2, 3, 9]) == []
    assert tree.continuation([1, 2], extra_key="other") == []
    assert tree.pretty() == before
    tree.check_integrity()


def test_plain_scheduler_output_matches_the_reference_with_speculation_on():
    sched, runner = make(speculative=SPEC)
    reqs = [req(str(i), [2, 30 + i, 31, 32, 33], max_new=12) for i in range(3)]
    for r in reqs:
        sched.add(r)
    run_all(sched, runner)
    for r in reqs:
        assert r.output_ids == expected_output(r.origin_input_ids, 12)
    sched.cache.check_no_leak()


def test_a_verify_step_stays_within_the_rows_the_decode_kernels_compute_row_by_row():
    import re
    from pathlib import Path

    from radixlm.runtime.scheduler.speculation import VERIFY_MAX_ROWS

    source = (Path(__file__).resolve().parents[2] / "kernels" / "csrc" / "gguf_matmul.c").read_text()
    assert int(re.search(r"#define DECODE_MAX_M (\d+)", source).group(1)) == VERIFY_MAX_ROWS
    sched, runner = make(speculative=SpeculativeConfig(num_draft_tokens=8, max_batch_size=8), fn=periodic)
    reqs = [req(str(i), [2, 11 + i, 12, 13, 14, 15, 11 + i, 12, 13, 14, 15], max_new=30) for i in range(4)]
    for r in reqs:
        sched.add(r)
    run_all(sched, runner)
    assert any(b.is_verify for b in runner.steps)
    assert all(len(b.spec.input_ids) <= VERIFY_MAX_ROWS for b in runner.steps if b.is_verify)
    for r in reqs:
        assert r.output_ids == expected(r.origin_input_ids, 30, periodic)


class WordCodec:
    """A tokenizer over a fixed vocabulary (greedy longest match), in which ``" Lucas"`` in prose and
    ``"Luc" "as"`` after a quote are different tokens, as in a real BPE vocabulary."""

    VOCAB = [" Lucas", "Luc", "as", " More", "au", ",", " designer", " in", " Lisbon", "\"", "name", ":", " "]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            best = max((t for t in range(len(self.VOCAB)) if text.startswith(self.VOCAB[t], i)),
                       key=lambda t: len(self.VOCAB[t]))
            ids.append(100 + best)
            i += len(self.VOCAB[best])
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.VOCAB[i - 100] for i in ids)


def test_drafter_text_lookup_copies_prompt_text_tokenized_otherwise():
    codec = WordCodec()
    prompt = codec.encode("name: Lucas Moreau, designer in Lisbon")
    d = free(Drafter(SPEC, None, frozenset({EOS}), codec))
    r = req("a", prompt, max_new=20)
    r.output_ids = codec.encode("\"Luc")  # "Luc" alone (3 characters) is too short to trust
    assert d.propose(r, 10) == []
    r.output_ids = codec.encode("\"Lucas More")  # no token n-gram matches; the text "Lucas More" does
    assert codec.decode(d.propose(r, 10)) == "au, designer in Lisbon"
    assert codec.decode(d.propose(r, 2)) == "au,"  # cut to the room, never past the prompt's text
    assert free(Drafter(SPEC, None, frozenset({EOS}))).propose(r, 10) == []  # no codec: no text lookup
