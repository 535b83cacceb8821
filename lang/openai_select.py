"""``select`` over an OpenAI-compatible ``/v1/completions`` route, scored by echoed prompt logprobs.

SGLang's OpenAI backend picks choices by biasing OpenAI's own tokenizer (tiktoken) token by token;
that only works for OpenAI's models. Instead we ask the server to echo ``context + choice`` with
``logprobs`` and ``max_tokens=0`` (one batched request), find the choice's tokens by their text
offsets, and let the same ``ChoicesMethod`` as the native backends decide. Any server that
supports ``echo`` with ``logprobs`` (radixlm, SGLang, vLLM) works.
"""

from __future__ import annotations

from typing import Any

from radixlm.lang.choices import ChoicesDecision, ChoicesMethod, Entry


def select_by_echo(client: Any, model: str, context: str, choices: list[str], method: ChoicesMethod,
                   temperature: float = 0.0) -> ChoicesDecision:
    """Score each choice as a continuation of ``context`` and pick one with ``method``."""
    prompts = [context + c for c in choices]
    scored = _echo(client, model, prompts)
    cond = [_tokens_after(lps, len(context), len(p)) for lps, p in zip(scored, prompts)]
    uncond = None
    if method.requires_unconditional_logprobs:
        alone = _echo(client, model, list(choices))
        # Align by position from the end: the choice alone may tokenise slightly differently.
        uncond = [_tokens_after(lps, 0, len(c))[-len(entries):] if entries else []
                  for lps, c, entries in zip(alone, choices, cond)]
        uncond = [_pad(u, len(entries)) for u, entries in zip(uncond, cond)]
    return method(list(choices), cond, uncond, temperature=temperature)


def _echo(client: Any, model: str, prompts: list[str]) -> list[Any]:
    """The legacy ``logprobs`` object of each prompt, echoed back with no new tokens."""
    ret = client.completions.create(model=model, prompt=prompts, max_tokens=0, echo=True, logprobs=0,
                                    temperature=0)
    by_index = {c.index: c.logprobs for c in ret.choices}
    missing = [i for i in range(len(prompts)) if by_index.get(i) is None]
    if missing:
        raise RuntimeError("the server returned no echoed logprobs for select: it must support "
                           "/v1/completions with echo=true and logprobs")
    return [by_index[i] for i in range(len(prompts))]


def _tokens_after(logprobs: Any, start: int, end: int) -> list[Entry]:
    """Entries ``[logprob, None, token]`` of the tokens whose text ends past ``start`` (up to ``end``).

    A token's span runs to the next token's offset, so zero-width tokens (BOS) are skipped and a
    token that merges the end of the context with the start of the choice is counted.
    """
    offsets = list(logprobs.text_offset)
    ends = offsets[1:] + [max(end, offsets[-1] if offsets else end)]
    out = []
    for tok, lp, off, stop in zip(logprobs.tokens, logprobs.token_logprobs, offsets, ends):
        if stop > start and off < end:
            out.append([lp, None, tok])
    return out


def _pad(entries: list[Entry], n: int) -> list[Entry]:
    return [[0.0, None, ""]] * (n - len(entries)) + entries
