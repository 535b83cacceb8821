"""Speculative decoding through ``Engine`` (tiny Llama): the faithfulness invariant.

Under greedy decoding the output with every acceleration on (grammar drafts, radix-tree and n-gram
drafts, budget handling while the budget lasts) is token-identical to plain masked decoding, one
token a step (``speculative_algorithm="none"``): the structured counterpart of cached == uncached.
Checked over the JSONSchemaBench sample (one schema per subset), free text, stop strings, logprobs
and sampling with a seed. The sampling rule itself is checked statistically in
``tests/model/test_speculative_sampling.py``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
from radixlm.constrained import ConstraintError, schema_to_grammar

from radixlm import Engine

BENCH = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench"
PER_SUBSET = 2
MAX_REGEX = 3000


@pytest.fixture(scope="module")
def engines(tiny_llama):
    # a fixed draft-row cost: whether drafts are proposed must not depend on the machine's load
    with Engine(tiny_llama, max_total_tokens=8192, speculative_algorithm="NGRAM",
                speculative_row_cost=0.05) as spec, \
            Engine(tiny_llama, max_total_tokens=8192, speculative_algorithm=None) as plain:
        yield spec, plain


@pytest.fixture(autouse=True)
def leak_check(engines):
    yield
    for e in engines:
        e.check_no_leak()


def bench_cases() -> list[tuple[str, dict, str]]:
    """Per JSONSchemaBench subset, the first ``PER_SUBSET`` small schemas, with a shipped instance
    (or the schema itself) in the prompt, so that drafts from the prompt come into play."""
    assert BENCH.is_dir(), f"JSONSchemaBench sample not found at {BENCH}"
    picked: dict[str, list] = {}
    for path in sorted(BENCH.glob("*/*.json")):
        if len(picked.get(path.parent.name, [])) >= PER_SUBSET:
            continue
        doc = json.loads(path.read_text())
        try:
            if len(schema_to_grammar(doc["schema"]).lark) > MAX_REGEX:
                continue
        except ConstraintError:
            continue
        example = (doc.get("tests") or [{}])[0].get("data", doc["schema"])
        picked.setdefault(path.parent.name, []).append(
            (f"{path.parent.name}/{path.name}", doc["schema"], f"Example: {json.dumps(example)[:600]}\nJSON:"))
    return [case for cases in picked.values() for case in cases]


def greedy(**extra):
    return {"temperature": 0.0, "max_new_tokens": 96, **extra}


def compare(spec_outs, plain_outs, names):
    for name, a, b in zip(names, spec_outs, plain_outs):
        assert a["output_ids"] == b["output_ids"], name
        assert a["meta_info"]["finish_reason"] == b["meta_info"]["finish_reason"], name
        assert a["text"] == b["text"], name


def test_schema_outputs_are_token_identical_to_plain_masked_decoding(engines):
    spec, plain = engines
    cases = bench_cases()
    assert len(cases) >= 15
    params = [greedy(json_schema=schema) for _, schema, _ in cases]
    prompts = [prompt for _, _, prompt in cases]
    a, b = [], []
    for i in range(0, len(cases), 3):  # batches of three: small enough to draft (speculative_max_batch_size)
        a += spec.generate(prompts[i:i + 3], params[i:i + 3])
        b += plain.generate(prompts[i:i + 3], params[i:i + 3])
    compare(a, b, [name for name, _, _ in cases])
    for (_name, schema, _), out in zip(cases, a):
        if out["meta_info"]["finish_reason"]["type"] == "stop":
            jsonschema.validate(json.loads(out["text"]), schema)
    verified = sum(o["meta_info"].get("spec_verify_ct", 0) for o in a)
    accepted = sum(o["meta_info"].get("spec_accepted_tokens", 0) for o in a)
    assert verified > 0 and accepted > 0  # drafts ran and were kept: the comparison is not vacuous
    assert sum(o["meta_info"]["forward_passes"] for o in a) < sum(o["meta_info"]["forward_passes"] for o in b)
    assert spec.get_stats()["speculative"]["spec_accepted_tokens"] > 0


def test_forced_text_is_proposed_not_spliced(engines):
    """The grammar's forced text is verified token by token: with grammar drafts off for the request
    (``disable_jump_forward``) the tokens are the same, the step count higher."""
    spec, _ = engines
    schema = {"type": "object", "properties": {"first_name": {"type": "string", "maxLength": 6},
                                               "languages": {"type": "array", "items": {"enum": ["es", "en"]}}},
              "required": ["first_name", "languages"], "additionalProperties": False}
    on = spec.generate("Person:", greedy(json_schema=schema, return_token_origins=True))
    assert spec.flush_cache()  # else the radix tree's continuation drafts the whole answer
    off = spec.generate("Person:", greedy(json_schema=schema, disable_jump_forward=True))
    assert on["output_ids"] == off["output_ids"]
    assert on["meta_info"]["forward_passes"] < off["meta_info"]["forward_passes"]
    origins = on["meta_info"]["token_origins"]["origins"]
    assert "forced" in origins and set(origins) <= {"masked", "forced", "drafted", "closed"}


def test_budget_close_happens_at_the_same_token(engines):
    spec, plain = engines
    schema = {"type": "object", "properties": {"notes": {"type": "string"}, "tags": {"type": "array",
              "items": {"type": "string"}}}, "required": ["notes", "tags"]}
    params = [greedy(json_schema=schema, max_new_tokens=n) for n in (12, 20, 33)]
    prompts = ['Example: {"notes": "a a a a a a a a a a", "tags": ["x", "x", "x"]}\nJSON:'] * 3
    compare(spec.generate(prompts, params), plain.generate(prompts, params), ["12", "20", "33"])


def test_free_text_stop_strings_and_max_tokens_are_unchanged(engines):
    spec, plain = engines
    text = "one two three four five six seven eight nine ten " * 6
    params = [greedy(max_new_tokens=40), greedy(max_new_tokens=7), greedy(max_new_tokens=60, stop=["five"])]
    a, b = spec.generate([text] * 3, params), plain.generate([text] * 3, params)
    compare(a, b, ["plain", "short", "stop"])


def test_logprobs_of_kept_drafts_match_plain_decoding(engines):
    spec, plain = engines
    text = "alpha beta gamma delta " * 12
    a = spec.generate(text, greedy(max_new_tokens=24), return_logprob=True, top_logprobs_num=2)
    b = plain.generate(text, greedy(max_new_tokens=24), return_logprob=True, top_logprobs_num=2)
    assert a["output_ids"] == b["output_ids"]
    for (lp_a, tok_a, _), (lp_b, tok_b, _) in zip(a["meta_info"]["output_token_logprobs"],
                                                  b["meta_info"]["output_token_logprobs"]):
        assert tok_a == tok_b and math.isclose(lp_a, lp_b, abs_tol=1e-3)
    assert len(a["meta_info"]["output_top_logprobs"]) == 24


def test_seeded_sampling_is_reproducible_and_valid(engines):
    spec, _ = engines
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}},
              "required": ["a", "b"]}
    params = {"temperature": 0.9, "top_p": 0.95, "seed": 3, "max_new_tokens": 48, "json_schema": schema}
    first = spec.generate("Example: " + '{"a": 1, "b": "x"} ' * 8, params)
    second = spec.generate("Example: " + '{"a": 1, "b": "x"} ' * 8, params)
    assert first["output_ids"] == second["output_ids"]
    if first["meta_info"]["finish_reason"]["type"] == "stop":
        jsonschema.validate(json.loads(first["text"]), schema)
    outs = spec.generate("the same the same the same", {"temperature": 1.0, "max_new_tokens": 16, "n": 3})
    assert len(outs) == 3 and all(len(o["output_ids"]) <= 16 for o in outs)


def test_speculation_can_be_turned_off(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=2048, speculative_config='{"method": null}') as e:
        out = e.generate("a b a b a b a b", greedy(max_new_tokens=12))
        assert "spec_verify_ct" not in out["meta_info"]
        assert e.get_stats()["speculative"]["enabled"] is False
    with pytest.raises(ValueError, match="draft model"):
        Engine(tiny_llama, speculative_algorithm="EAGLE")


def test_the_radix_tree_drafts_what_an_earlier_request_wrote(engines):
    spec, _ = engines
    assert spec.flush_cache()
    text = "Tell me a story about a lighthouse keeper."
    first = spec.generate(text, greedy(max_new_tokens=40))
    again = spec.generate(text, greedy(max_new_tokens=40))
    assert again["output_ids"] == first["output_ids"]
    assert again["meta_info"]["forward_passes"] < first["meta_info"]["forward_passes"] // 2
    assert again["meta_info"]["spec_accepted_tokens"] >= 30


def test_speculative_flags_in_sglang_and_vllm_spellings():
    import argparse

    from radixlm.runtime.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)

    def method(*argv: str, device: str = "cpu"):
        return ServerArgs(**vars(parser.parse_args(list(argv)))).speculative_method(device)

    assert method() == ("ngram", 8) and method(device="cuda") == (None, 8)  # auto
    assert method("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4") == ("ngram", 4)
    assert method("--speculative-algorithm", "none") == (None, 8)
    assert method("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 5}',
                  device="cuda") == ("ngram", 5)
    assert method("--speculative-config", '{"method": null}') == (None, 8)
    with pytest.raises(ValueError, match="speculative_config must be a JSON object"):
        ServerArgs(speculative_config="[1]")
    with pytest.raises(ValueError, match="speculative_num_draft_tokens"):
        ServerArgs(speculative_num_draft_tokens=0)
    with pytest.raises(ValueError, match="NGRAM, none or auto"):
        ServerArgs(speculative_algorithm="lookahead")
