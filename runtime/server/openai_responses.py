"""OpenAI response shapes (pydantic models): the envelope every completion and stream chunk shares, and usage.

The routes build each ``choices[i]`` object themselves (its keys depend on the route and on
radixlm's extensions, e.g. ``constraint_violations``); these models give the outer object its
fields and their order, and turn it into the JSON-ready dict the routes send.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, Field


def new_id(prefix: str) -> str:
    """A response id: ``cmpl-...`` / ``chatcmpl-...``."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    """Token counts of a whole request: each prompt counted once, its cached part in the details."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails

    @classmethod
    def count(cls, prompt: int, completion: int, cached: int) -> Usage:
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                   prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


class Envelope(BaseModel):
    """The outer object of a completion (``text_completion``, ``chat.completion``) or a stream chunk
    (``chat.completion.chunk``; completions' chunks are ``text_completion`` too)."""

    id: str
    object: str
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[dict[str, Any]]
    system_fingerprint: str | None = None
    usage: Usage | None = None

    def to_dict(self, with_usage: bool) -> dict[str, Any]:
        """The JSON-ready dict; ``with_usage=False`` leaves the ``usage`` key out (a null usage stays
        in where the client asked for usage: every chunk but the last then has ``"usage": null``)."""
        return self.model_dump(exclude=None if with_usage else {"usage"})


def envelope(obj: str, rid: str, model: str, choices: list[dict], usage: Usage | None = None) -> dict:
    """The outer object as a dict: ``usage`` present when given, and always on a ``.chunk`` object."""
    return Envelope(id=rid, object=obj, model=model, choices=choices, usage=usage).to_dict(
        with_usage=usage is not None or obj.endswith(".chunk"))


def finish_reason(meta: dict[str, Any]) -> str | None:
    """Engine ``finish_reason`` {type, matched} -> OpenAI's string."""
    fr = meta.get("finish_reason")
    if fr is None:
        return None
    kind = fr.get("type") if isinstance(fr, dict) else str(fr)
    return {"stop": "stop", "length": "length"}.get(kind, kind)
