"""``CallStream``: one generated call, streamed as it is generated.

A call phase generates one call under the grammar, in the family's wrapper (or several, joined by
the family's separator, when the turn allows parallel calls). For the JSON-argument
layouts (those whose format sets ``call_head``) the call is announced (index, id, name) as soon as
its head is complete, and then every character of the arguments object is sent as it arrives: the
arguments are the JSON text exactly as generated, so their fragments, however the output was cut
into deltas, concatenate to the same text the non-streamed response carries. Where the object
ends is found by counting brackets outside strings. Other layouts (XML, pythonic) are converted
to JSON once their block is complete, by the family's parser.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import ToolFormat
from radixlm.runtime.chat_formats.tool_formats.scanner import StreamEvent
from radixlm.runtime.chat_formats.tools import ToolSpec


class CallStream:
    """Streams the call a call phase generates; ``feed`` the text from the opener on, then ``finish``."""

    def __init__(self, fmt: ToolFormat, tools: list[ToolSpec], index: int):
        self.fmt, self.tools, self.index = fmt, tools, index
        self.text = ""
        self.started = False  # a call was announced (its arguments stream)
        self.args_from = self.args_end = 0  # the arguments' span in ``text`` (args_end 0: not closed)
        self.sent = 0  # how much of ``text`` was sent as arguments
        self.next_index = index  # the index of the call after this one
        self._pos, self._depth, self._in_string, self._escaped = 0, 0, False, False

    def feed(self, delta: str) -> list[StreamEvent]:
        """Add generated text; return the events it makes certain."""
        self.text += delta
        out: list[StreamEvent] = []
        while True:
            if not self._open_call(out):
                return out
            self._scan()
            upto = self.args_end or len(self.text)
            if upto > self.sent:
                out.append(StreamEvent("call_args", self.text[self.sent:upto], index=self.next_index - 1))
                self.sent = upto
            if not self.args_end:
                return out

    def _open_call(self, out: list[StreamEvent]) -> bool:
        """Whether a call's arguments are streaming: the first call's head, or after a closed call
        the next call's head (a turn of several calls), announced in ``out`` when found now."""
        if self.started and not self.args_end:
            return True
        if self.fmt.call_head is None:
            return False
        if not self.started:
            head = self.fmt.call_head.match(self.text)
        else:
            head = (self.fmt.next_call_head or self.fmt.call_head).search(self.text, self.args_end)
        if head is None:
            return False
        index = self.next_index
        self.started, self.next_index = True, index + 1
        self.args_from = self.sent = self._pos = head.end()
        self.args_end, self._depth = 0, 0
        name = head.group("name")
        call_id = head.groupdict().get("id") or self.fmt.new_call_id(name, index)
        out.append(StreamEvent("call_start", index=index, id=call_id, name=name))
        return True

    def _scan(self) -> None:
        """Advance the bracket count; set ``args_end`` when the arguments object closes."""
        text = self.text
        while self._pos < len(text) and not self.args_end:
            c = text[self._pos]
            self._pos += 1
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_string = False
            elif c == '"':
                self._in_string = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self.args_end = self._pos

    @property
    def complete(self) -> bool:
        """Whether the last streamed call's arguments object closed (False when the output was cut off)."""
        return bool(self.args_end)

    def finish(self) -> list[StreamEvent]:
        """The end of the call phase: a call that was not streamed is parsed whole (or is content)."""
        if self.started:
            return []
        parser = self.fmt.stream(self.tools, first_index=self.index)
        events = parser.feed(self.text) + parser.finish()
        self.next_index = parser.next_index
        return events
