"""``select``: score every choice as a continuation of the context with prompt logprobs, then pick.

One batched request scores all choices (``max_new_tokens=0`` with prompt logprobs from just before
the context boundary); the context is sent alone first so the radix cache holds it and every choice
request reuses it. Three scoring methods, as in SGLang:

- ``token_length_normalized``: mean logprob of the choice's tokens (the default);
- ``greedy_token_selection``: compare choices token by token, keeping the best at each position;
- ``unconditional_likelihood_normalized``: mean of (logprob given the context - logprob without it).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

# One prompt-logprob entry as the engine returns it: [logprob | None, token_id, text | None].
Entry = list


@dataclass
class ChoicesDecision:
    """The chosen string and the per-choice scores that justified it."""

    decision: str
    meta_info: dict[str, Any]


def _mean_logprob(entries: list[Entry]) -> float:
    values = [e[0] for e in entries if e[0] is not None]
    return sum(values) / len(values) if values else 0.0


class ChoicesMethod:
    """Base of the scoring methods; ``scores`` returns one number per choice (higher is better)."""

    name = "choices_method"
    requires_unconditional_logprobs = False

    def scores(self, input_token_logprobs: list[list[Entry]],
               unconditional_token_logprobs: list[list[Entry]] | None) -> list[float]:
        return [_mean_logprob(entries) for entries in input_token_logprobs]

    def __call__(self, choices: list[str], input_token_logprobs: list[list[Entry]],
                 unconditional_token_logprobs: list[list[Entry]] | None = None,
                 temperature: float = 0.0, rng: random.Random | None = None) -> ChoicesDecision:
        scores = self.scores(input_token_logprobs, unconditional_token_logprobs)
        index = _pick(scores, temperature, rng or random.Random())
        meta = {
            "method": self.name,
            "choices": list(choices),
            "scores": scores,
            "normalized_prompt_logprobs": [_mean_logprob(e) for e in input_token_logprobs],
            "input_token_logprobs": input_token_logprobs,
            "output_token_logprobs": [[] for _ in choices],
        }
        if unconditional_token_logprobs is not None:
            meta["unconditional_token_logprobs"] = unconditional_token_logprobs
        return ChoicesDecision(choices[index], meta)


class TokenLengthNormalized(ChoicesMethod):
    """Highest mean token logprob of the choice given the context."""

    name = "token_length_normalized"


class GreedyTokenSelection(ChoicesMethod):
    """Token-by-token elimination: at each position keep the choices with the best logprob.

    A choice shorter than the longest is padded with its own mean logprob, so a prefix of a longer
    choice competes fairly. ``scores`` is 1.0 for the winner and 0.0 for the others.
    """

    name = "greedy_token_selection"

    def scores(self, input_token_logprobs, unconditional_token_logprobs):
        rows = [[e[0] if e[0] is not None else 0.0 for e in entries] for entries in input_token_logprobs]
        width = max((len(r) for r in rows), default=0)
        padded = [r + [_mean_logprob(e)] * (width - len(r)) for r, e in zip(rows, input_token_logprobs)]
        remaining = list(range(len(rows)))
        for j in range(width):
            best = max(padded[i][j] for i in remaining)
            remaining = [i for i in remaining if padded[i][j] == best]
            if len(remaining) == 1:
                break
        return [1.0 if i == remaining[0] else 0.0 for i in range(len(rows))]


class UnconditionalLikelihoodNormalized(ChoicesMethod):
    """Mean over the choice's tokens of logprob(token | context) - logprob(token | choice alone).

    Corrects for choices that are likely regardless of the question.
    """

    name = "unconditional_likelihood_normalized"
    requires_unconditional_logprobs = True

    def scores(self, input_token_logprobs, unconditional_token_logprobs):
        if unconditional_token_logprobs is None:
            raise ValueError("unconditional_likelihood_normalized needs unconditional logprobs")
        out = []
        for cond, uncond in zip(input_token_logprobs, unconditional_token_logprobs):
            diffs = [(c[0] or 0.0) - (u[0] or 0.0) for c, u in zip(cond, uncond)]
            out.append(sum(diffs) / len(diffs) if diffs else 0.0)
        return out


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()


def _pick(scores: list[float], temperature: float, rng: random.Random) -> int:
    if temperature <= 1e-6:
        return max(range(len(scores)), key=lambda i: scores[i])  # first best on ties
    top = max(scores)
    weights = [math.exp((s - top) / temperature) for s in scores]
    return rng.choices(range(len(scores)), weights=weights)[0]


def choice_entries(context: str, context_tokens: int, start: int, entries: list[Entry]) -> list[Entry]:
    """The entries that belong to the choice in a request for ``context + choice``.

    ``entries[k]`` is the token at position ``start + k``. Positions from ``context_tokens`` on are
    the choice's; the token just before is the context's own last token unless tokenising
    ``context + choice`` merged it with the start of the choice (then it is scored too).
    """
    boundary = context_tokens - start  # index of the first token past the context alone
    if boundary <= 0:
        return [e for e in entries if e[0] is not None] if start == 0 else list(entries)
    last = entries[boundary - 1] if boundary - 1 < len(entries) else None
    merged = last is not None and last[2] is not None and not context.endswith(last[2])
    return list(entries[boundary - 1:] if merged else entries[boundary:])


def run_select(backend: Any, context: str, choices: list[str], method: ChoicesMethod,
               temperature: float = 0.0) -> ChoicesDecision:
    """Score ``choices`` after ``context`` on ``backend`` (one batched request) and decide.

    A backend with its own scoring (``select_choices``, e.g. an OpenAI API) does it instead.
    """
    if not isinstance(choices, (list, tuple)) or not choices or not all(
            isinstance(c, str) and c for c in choices):
        raise ValueError("select choices must be a non-empty list of non-empty strings")
    if not isinstance(method, ChoicesMethod):
        raise TypeError(f"choices_method must be a ChoicesMethod such as token_length_normalized, "
                        f"got {type(method).__name__}")
    own = getattr(backend, "select_choices", None)
    if own is not None:
        return own(context, list(choices), method, temperature)
    context_tokens = 0
    if context:  # pre-fill the shared context once; every choice request then hits the cache
        context_tokens = backend.generate(context, {"max_new_tokens": 0})["meta_info"]["prompt_tokens"]
    # Start two tokens early: the first returned entry has no logprob, the second may be merged.
    start = max(context_tokens - 2, 0)
    outs = backend.generate([context + c for c in choices], {"max_new_tokens": 0, "temperature": 0.0},
                            return_logprob=True, logprob_start_len=start)
    input_lps = [choice_entries(context, context_tokens, start, o["meta_info"]["input_token_logprobs"])
                 for o in outs]
    uncond = None
    if method.requires_unconditional_logprobs:
        ids = [[e[1] for e in entries] for entries in input_lps]
        res = backend.generate(None, {"max_new_tokens": 0}, input_ids=ids, return_logprob=True,
                               logprob_start_len=0)
        uncond = [r["meta_info"]["input_token_logprobs"] for r in res]
    return method(list(choices), input_lps, uncond, temperature=temperature)
