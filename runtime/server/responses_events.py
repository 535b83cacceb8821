"""The Responses API's output, built from a chat choice's events: output items and streaming events.

:class:`ResponseBuilder` reads :class:`~radixlm.runtime.server.chat_generation.ChoiceEvent` in order
and keeps the ``output`` items (``reasoning``, ``message``, ``function_call``); each ``feed`` returns
the streaming events it causes, in the order OpenAI sends them::

    response.output_item.added -> response.content_part.added -> response.output_text.delta ...
    -> response.output_text.done -> response.content_part.done -> response.output_item.done
    (reasoning: response.reasoning_text.delta / .done; a call: response.function_call_arguments.delta
    / .done). ``sequence_number`` counts every event of the stream, ``response.created`` first.

The non-streamed route feeds the same events and drops the streaming ones, so both answers hold
the same items.
"""

from __future__ import annotations

import uuid
from typing import Any

from radixlm.runtime.server.chat_generation import ChoiceEvent


def item_id(prefix: str) -> str:
    """An output item id: ``msg_...``, ``fc_...``, ``rs_...``."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class ResponseBuilder:
    """The output items of one response and the streaming events that build them."""

    def __init__(self, logprobs: bool = False):
        self.logprobs = logprobs
        self.output: list[dict[str, Any]] = []
        self.seq = 0
        self.open: dict[str, Any] | None = None  # the item being written (last of ``output``)
        self.texts: list[str] = []  # the open item's text (or arguments) so far
        self.lps: list[dict[str, Any]] = []

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """One streaming event, numbered."""
        out = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return out

    def feed(self, ev: ChoiceEvent) -> list[dict[str, Any]]:
        """The streaming events of ``ev`` (a finish closes the open item; the caller ends the stream)."""
        if ev.kind == "content":
            if not ev.text and not ev.logprobs:
                return []
            out = self._ensure("message")
            self.texts.append(ev.text)
            lps = list(ev.logprobs or []) if self.logprobs else []
            self.lps += lps
            return out + [self.event("response.output_text.delta", **self._where(), delta=ev.text, logprobs=lps)]
        if ev.kind == "reasoning":
            out = self._ensure("reasoning")
            self.texts.append(ev.text)
            return out + [self.event("response.reasoning_text.delta", **self._where(), delta=ev.text)]
        if ev.kind == "call_start":
            out = self.close()
            self.open = {"type": "function_call", "id": item_id("fc"), "call_id": ev.call_id or item_id("call"),
                         "name": ev.name or "", "arguments": "", "status": "in_progress"}
            return out + self._add()
        if ev.kind == "call_args":
            self.texts.append(ev.text)
            return [self.event("response.function_call_arguments.delta", item_id=self.open["id"],
                               output_index=len(self.output) - 1, delta=ev.text)]
        return self.close(incomplete=ev.finish_reason == "length", cut=ev.cut_call is not None)

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.open["id"], "output_index": len(self.output) - 1, "content_index": 0}

    def _ensure(self, kind: str) -> list[dict[str, Any]]:
        """Open an item of ``kind`` unless one is open (closing another kind first)."""
        if self.open is not None and self.open["type"] == kind:
            return []
        out = self.close()
        if kind == "message":
            self.open = {"type": "message", "id": item_id("msg"), "status": "in_progress", "role": "assistant",
                         "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            self.open = {"type": "reasoning", "id": item_id("rs"), "summary": [], "content": [],
                         "status": "in_progress"}
            part = {"type": "reasoning_text", "text": ""}
        return out + self._add() + [self.event("response.content_part.added", **self._where(), part=part)]

    def _add(self) -> list[dict[str, Any]]:
        self.output.append(self.open)
        self.texts, self.lps = [], []
        return [self.event("response.output_item.added", output_index=len(self.output) - 1, item=dict(self.open))]

    def close(self, incomplete: bool = False, cut: bool = False) -> list[dict[str, Any]]:
        """Finish the open item (``incomplete``: the budget ended it); its ``.done`` events."""
        item, text = self.open, "".join(self.texts)
        if item is None:
            return []
        self.open = None
        index = len(self.output) - 1
        where = {"item_id": item["id"], "output_index": index}
        out: list[dict[str, Any]] = []
        if item["type"] == "function_call":
            item.update(arguments=text, status="incomplete" if cut else "completed")
            out.append(self.event("response.function_call_arguments.done", **where, name=item["name"],
                                  arguments=text))
        elif item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": self.lps}
            item.update(content=[part], status="incomplete" if incomplete else "completed")
            out += [self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=self.lps),
                    self.event("response.content_part.done", **where, content_index=0, part=part)]
        else:
            part = {"type": "reasoning_text", "text": text}
            item.update(content=[part], status="incomplete" if incomplete else "completed")
            out += [self.event("response.reasoning_text.done", **where, content_index=0, text=text),
                    self.event("response.content_part.done", **where, content_index=0, part=part)]
        return out + [self.event("response.output_item.done", output_index=index, item=item)]
