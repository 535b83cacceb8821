"""``with_bare_calls``: a choice's events with a bare JSON call recognised (``tool_choice: auto``).

Families whose models write a call as the bare output ``{"name": ..., "arguments": ...}`` (no
``<tool_call>`` tags; see :mod:`radixlm.runtime.chat_formats.tool_formats.bare_json`) generate it
in the text phase, as content. This filter holds content events back while the output may still
be such a call, and at the finish event either turns it into ``tool_calls`` (finish_reason
``tool_calls``; only when the text ended on its own, ``stop``) or releases the held content as it
was (logprobs kept). Reasoning events pass through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from radixlm.runtime.chat_formats.tool_formats.bare_json import BareJsonHold
from radixlm.runtime.server.chat_generation import ChoiceEvent
from radixlm.runtime.server.chat_plan import ChatPlan


async def with_bare_calls(events: AsyncIterator[ChoiceEvent], plan: ChatPlan) -> AsyncIterator[ChoiceEvent]:
    """``events`` with a whole-output bare JSON call turned into call events."""
    hold = (BareJsonHold(plan.tools) if plan.tools and plan.tool_choice.mode == "auto"
            and plan.fmt.bare_json_calls else None)
    held: list[ChoiceEvent] = []
    async for ev in events:
        if hold is None or ev.kind == "reasoning":
            yield ev
            continue
        if ev.kind == "content":
            held.append(ev)
            if hold.feed(ev.text):
                continue
        elif ev.kind == "finish" and ev.finish_reason == "stop":
            calls = hold.calls()
            if calls:
                for i, call in enumerate(calls):
                    yield ChoiceEvent("call_start", call_index=i, call_id=plan.fmt.new_call_id(call.name, i),
                                      name=call.name)
                    yield ChoiceEvent("call_args", text=call.arguments, call_index=i)
                yield ChoiceEvent("finish", finish_reason="tool_calls", violations=ev.violations, notes=ev.notes)
                return
        hold = None  # not a bare call: what was held is content, in order
        for out in held:
            yield out
        if ev.kind != "content":
            yield ev
