"""``chat_answer``: one chat completion read whole or streamed, as (text, finish_reason, budget_closed)."""

from __future__ import annotations

from typing import Any


def chat_answer(client: Any, kwargs: dict[str, Any], stream: bool) -> tuple[str, str | None, bool]:
    if not stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        return choice.message.content, choice.finish_reason, bool(getattr(choice, "budget_closed", False))
    text, reason, closed = "", None, False
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for c in chunk.choices:
            text += c.delta.content or ""
            reason = c.finish_reason or reason
            closed = closed or bool(getattr(c, "budget_closed", False))
    return text, reason, closed
