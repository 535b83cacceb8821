"""Coverage of the JSONSchemaBench sample (``tests/data/jsonschemabench``) in both key orders, over
every schema the front end compiles: the default (``json_key_order: "schema"``) accepts the valid
instances rewritten into its layout (``constrained/testing/schema_order.py``: members in schema
order, undeclared ones dropped where the schema declares no extras), the any-order mode the
shipped instances as they are. Both accept at least 99.5% of them, and no invalid instance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from radixlm.constrained import ConstraintError, TokenizerVocab, compile_grammar
from radixlm.constrained.testing.schema_order import schema_order_instances
from radixlm.constrained.testing.walks import accepts_text, compact_json

DATA = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench"


def _coverage(tokenizer, key_order: str) -> dict:
    vocab = TokenizerVocab.from_tokenizer(tokenizer)
    out = {"valid": 0, "valid_ok": 0, "invalid": 0, "invalid_ok": [], "dropped": 0, "missed": []}
    for path in sorted(DATA.glob("*/*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        try:
            grammar = compile_grammar(vocab, "json_schema", doc["schema"], key_order=key_order)
        except ConstraintError:
            continue
        valid = [t["data"] for t in doc["tests"] if t["valid"]]
        if key_order == "schema":
            valid, dropped = schema_order_instances(doc["schema"], valid)
            out["dropped"] += dropped
        for value in valid:
            ok = accepts_text(grammar, tokenizer, compact_json(value))
            out["valid"], out["valid_ok"] = out["valid"] + 1, out["valid_ok"] + ok
            if not ok:
                out["missed"].append(f"{path.parent.name}/{path.name}: {compact_json(value)[:160]}")
        for test in doc["tests"]:
            if not test["valid"]:
                out["invalid"] += 1
                if accepts_text(grammar, tokenizer, compact_json(test["data"])):
                    out["invalid_ok"].append(f"{path.parent.name}/{path.name}: {compact_json(test['data'])[:160]}")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("key_order", ["schema", "any"])
def test_coverage_in_both_key_orders(tokenizer, key_order):
    out = _coverage(tokenizer, key_order)
    print(f"{key_order}: valid {out['valid_ok']}/{out['valid']}, invalid accepted {len(out['invalid_ok'])}/"
          f"{out['invalid']}, rewritten instances dropped {out['dropped']}")
    assert out["valid"] >= 250, f"only {out['valid']} valid instances measured"
    assert out["valid_ok"] >= 0.995 * out["valid"], "\n".join(out["missed"])
    assert out["invalid_ok"] == [], "\n".join(out["invalid_ok"])
