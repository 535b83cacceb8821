"""The public DSL (SGLang's frontend API): ``import radixlm as sgl`` runs SGLang programs.

```python
@sgl.function
def qa(s, question):
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=64))
```

The expressions that call the model live in :mod:`radixlm.lang.gen_exprs`, the default backend
and its module-level calls in :mod:`radixlm.lang.default_backend`; this module gathers the names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from radixlm.lang import ir
from radixlm.lang.backend_http import RuntimeEndpoint
from radixlm.lang.backend_openai import OpenAI
from radixlm.lang.choices import (
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from radixlm.lang.default_backend import flush_cache, get_server_info, set_default_backend
from radixlm.lang.gen_exprs import DTYPE_REGEX, gen, gen_int, gen_string, select
from radixlm.lang.program import SglFunction
from radixlm.lang.state import ProgramState, ProgramStateGroup

__all__ = [
    "function", "gen", "gen_int", "gen_string", "select", "image", "video", "system", "user",
    "assistant", "system_begin", "system_end", "user_begin", "user_end", "assistant_begin",
    "assistant_end", "set_default_backend", "flush_cache", "get_server_info", "RuntimeEndpoint",
    "OpenAI", "ProgramState", "ProgramStateGroup", "SglFunction", "DTYPE_REGEX",
    "token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized",
    "separate_reasoning",
]


def function(func: Callable | None = None, num_api_spec_tokens: int | None = None):
    """Decorate ``def program(s, ...)``; usable as ``@function`` and ``@function(...)``.

    ``num_api_spec_tokens`` (SGLang's API speculative execution for OpenAI chat models) is
    accepted and has no effect: radixlm sends each gen as its own request.
    """
    if func is None:
        return SglFunction
    return SglFunction(func)


def separate_reasoning(expr: Any = None, model_type: str | None = None) -> ir.ExprList:
    """``expr`` (gens / selects, possibly inside roles) whose named results are each split into the
    answer (``<name>``, also all the text keeps) and the thinking (``<name>_reasoning_content``),
    written in ``model_type``'s markers (``deepseek-r1``, ``qwen3``, ``gpt-oss``: the
    ``--reasoning-parser`` names). A gen without a name is a ``ValueError``, as in SGLang."""
    if expr is None:
        return ir.ExprList([])
    from radixlm.runtime.chat_formats.reasoning.registry import get_format  # lazily: the parsers

    if not isinstance(model_type, str):
        raise ValueError("separate_reasoning needs model_type (deepseek-r1, qwen3, gpt-oss, ...)")
    get_format(model_type)  # ValueError naming the known formats
    items = []
    for item in ir.to_exprs(expr):
        if isinstance(item, (ir.Gen, ir.Select)):
            if not item.name:
                raise ValueError("separate_reasoning needs every gen / select in expr to have a name")
            item = dataclasses.replace(item, reasoning=model_type)
        items.append(item)
    return ir.ExprList(items)


def image(path: Any) -> ir.Expr:
    """Images need a vision model; radixlm serves text-only models."""
    raise ValueError("image() is not supported: radixlm serves text-only models (no vision encoder)")


def video(path: Any, num_frames: int = 0) -> ir.Expr:
    """Videos need a vision model; radixlm serves text-only models."""
    raise ValueError("video() is not supported: radixlm serves text-only models (no vision encoder)")


def system(expr: Any = None) -> ir.ExprList:
    """A system turn holding ``expr`` (empty without it)."""
    return ir.role_turn("system", expr)


def user(expr: Any = None) -> ir.ExprList:
    """A user turn holding ``expr`` (empty without it)."""
    return ir.role_turn("user", expr)


def assistant(expr: Any = None) -> ir.ExprList:
    """An assistant turn holding ``expr`` (empty without it)."""
    return ir.role_turn("assistant", expr)


def system_begin() -> ir.Expr:
    """Start a system turn; ``system_end()`` closes it."""
    return ir.RoleBegin("system")


def system_end() -> ir.Expr:
    """End the system turn opened by ``system_begin()``."""
    return ir.RoleEnd("system")


def user_begin() -> ir.Expr:
    """Start a user turn; ``user_end()`` closes it."""
    return ir.RoleBegin("user")


def user_end() -> ir.Expr:
    """End the user turn opened by ``user_begin()``."""
    return ir.RoleEnd("user")


def assistant_begin() -> ir.Expr:
    """Start an assistant turn; ``assistant_end()`` closes it."""
    return ir.RoleBegin("assistant")


def assistant_end() -> ir.Expr:
    """End the assistant turn opened by ``assistant_begin()``."""
    return ir.RoleEnd("assistant")
