"""The one scan behind both parses: text deltas in, content and call events out.

Content is released as soon as it cannot be the start of a call opener (a suffix that could grow
into one is held back). A call block is released when it is complete: at its closer, or at the
end of the output for families whose calls run to the end. A block that does not parse is
content, so a malformed call never crashes and never loses text. Because every decision depends
only on the text seen so far and never on where the deltas were cut, the events of any chunking
add up to the same result as the text parsed in one piece.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radixlm.runtime.chat_formats.marker_hold import held_prefix
from radixlm.runtime.chat_formats.tool_formats.bare_json import BareJsonHold
from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ParseResult, ToolFormat
from radixlm.runtime.chat_formats.tools import ToolSpec


@dataclass
class StreamEvent:
    """``kind``: content | call_start | call_args."""

    kind: str
    text: str = ""
    index: int = 0
    id: str | None = None
    name: str | None = None

    def to_delta(self) -> dict[str, Any]:
        """The OpenAI ``delta`` of a chat chunk carrying this event."""
        if self.kind == "content":
            return {"content": self.text}
        if self.kind == "call_start":
            return {"tool_calls": [{"index": self.index, "id": self.id, "type": "function",
                                    "function": {"name": self.name, "arguments": ""}}]}
        return {"tool_calls": [{"index": self.index, "function": {"arguments": self.text}}]}


class StreamParser:
    """Incremental parser of one output in ``fmt``'s call syntax; call indices start at ``first_index``."""

    def __init__(self, fmt: ToolFormat, tools: list[ToolSpec], first_index: int = 0):
        self.fmt = fmt
        self.tools = tools
        self.buf = fmt.prompt_opener  # the output continues the prompt's opener
        self.hidden = len(fmt.prompt_opener)  # its characters are no content of the output
        self.first_index = first_index
        self.next_index = first_index
        self.calls: list[ParsedCall] = []
        # the output held back while it may be one bare JSON call (families that write them)
        self.bare = BareJsonHold(tools) if tools and fmt.bare_json_calls else None

    def feed(self, delta: str) -> list[StreamEvent]:
        """Add generated text; return the events it completes."""
        if self.bare is not None:
            if self.bare.feed(delta):
                return []
            delta, self.bare = self.bare.text, None  # not a bare call: scan it as usual
        self.buf += delta
        return self._scan(final=False)

    def finish(self) -> list[StreamEvent]:
        """The end of the output: release everything still held."""
        if self.bare is not None:
            calls, self.buf, self.bare = self.bare.calls(), self.buf + self.bare.text, None
            if calls:
                out: list[StreamEvent] = []
                for call in calls:
                    self._call(out, call)
                self.buf = ""
                return out
        return self._scan(final=True)

    def _find_opener(self) -> int:
        positions = [p for p in (self.buf.find(op) for op in self.fmt.openers) if p >= 0]
        return min(positions) if positions else -1

    def _scan(self, final: bool) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        while self.buf:
            pos = self._find_opener()
            if pos < 0:
                keep = 0 if final else held_prefix(self.buf, self.fmt.openers)
                self._content(out, self.buf[:len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep:]
                return out
            self._content(out, self.buf[:pos])
            self.buf = self.buf[pos:]
            header = self._content_header(final)
            if header is None:
                return out
            if header:  # the opener announces content: dropped, the content follows
                self.buf, self.hidden = self.buf[header:], 0
                continue
            end = self._block_end(final)
            if end is None:
                return out
            block, self.buf = self.buf[:end], self.buf[end:]
            parsed = self.fmt.parse_block(block, self.tools)
            if parsed is None or not parsed[0] or parsed[1] <= 0:
                # not a call: its first character is content, and the scan goes on after it
                # (a later opener inside the block may still start a real call)
                self._content(out, block[:1])
                self.buf = block[1:] + self.buf
                continue
            calls, used = parsed
            self.hidden = 0
            for call in calls:
                self._call(out, call)
            self.buf = block[used:] + self.buf
        return out

    def _content_header(self, final: bool) -> int | None:
        """The length of the content header at the start of ``buf`` (0: none there), or None while
        ``buf`` may still grow into one."""
        for header in self.fmt.content_headers:
            if self.buf.startswith(header) or (final and self.buf == header.rstrip()):
                return min(len(header), len(self.buf))
            if not final and header.startswith(self.buf):
                return None
        return 0

    def _block_end(self, final: bool) -> int | None:
        """Where the block at the start of ``buf`` ends, or None while it may still grow."""
        closer = self.fmt.closer
        if closer is not None:
            at = self.buf.find(closer, 1)
            if at >= 0:
                return at + len(closer)
        return len(self.buf) if final else None

    def _content(self, out: list[StreamEvent], text: str) -> None:
        if self.hidden:  # the prompt's opener, read again when no part parsed at its place
            cut = min(self.hidden, len(text))
            text, self.hidden = text[cut:], self.hidden - cut
        if text:
            if out and out[-1].kind == "content":
                out[-1].text += text
            else:
                out.append(StreamEvent("content", text))

    def _call(self, out: list[StreamEvent], call: ParsedCall) -> None:
        index = self.next_index
        self.next_index += 1
        self.calls.append(call)
        call_id = call.id or self.fmt.new_call_id(call.name, index)
        out.append(StreamEvent("call_start", index=index, id=call_id, name=call.name))
        out.append(StreamEvent("call_args", call.arguments, index=index))

    def result(self, events: list[StreamEvent]) -> ParseResult:
        """Events accumulated into a :class:`ParseResult` (content joined, calls in order)."""
        return accumulate(events)


def accumulate(events: list[StreamEvent]) -> ParseResult:
    """What a client builds from the events: content joined, each call's argument fragments joined."""
    content, names, args, ids = [], {}, {}, {}
    for ev in events:
        if ev.kind == "content":
            content.append(ev.text)
        elif ev.kind == "call_start":
            names[ev.index], args[ev.index], ids[ev.index] = ev.name, "", ev.id
        else:
            args[ev.index] += ev.text
    calls = [ParsedCall(names[i], args[i], ids[i]) for i in sorted(names)]
    return ParseResult("".join(content), calls)
