"""The one scan behind both parses: text deltas in, content and call events out.

Content is released as soon as it cannot be the start of a call opener (a suffix that could grow
into one is held back). A call block is released when it is complete: at its closer, or at the
end of the output for families whose calls run to the end. A block that does not parse is
content, so a malformed call never crashes and never loses text. Because every decision depends
only on the text seen so far and never on where the deltas were cut, the events of any chunking
add up to the same result as the text parsed in one piece.

``CallStream``: one generated call, streamed as it is generated.

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

from dataclasses import dataclass
from typing import Any

from radixlm.runtime.chat_formats.format_registry import held_prefix
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

    def finish(self, cut: bool = False) -> list[StreamEvent]:
        """The end of the call phase: a call that was not streamed is parsed whole (or is content).
        ``cut``: the budget ended the phase; the calls completed before the cut stand, and the call
        it cut (:attr:`cut_index`) is announced when its tool's name was written."""
        if cut:
            return self._cut_turn()
        if self.started:
            return []
        parser = self.fmt.stream(self.tools, first_index=self.index)
        events = parser.feed(self.text) + parser.finish()
        self.next_index = parser.next_index
        return events

    @property
    def cut_index(self) -> int | None:
        """The call a cut-off phase ended in (read after ``finish(cut=True)``), or None when the
        cut fell before any tool's name was written."""
        return self._cut

    _cut: int | None = None

    def _cut_turn(self) -> list[StreamEvent]:
        """The events that end a cut-off turn. A streamed (JSON) layout's calls were announced as
        they came: the last one is the cut one, its markup unfinished. Other layouts: the calls that
        completed, then the cut call, announced with empty arguments once its tool's name was written."""
        if self.started:  # the last announced call's markup was not finished: it is the cut one
            self._cut = self.next_index - 1
            return []
        out, rest = self._complete_calls()
        name = _first_tool_named(rest, self.tools)
        if name is not None:
            self._cut, self.next_index = self.next_index, self.next_index + 1
            out += [StreamEvent("call_start", index=self._cut, id=self.fmt.new_call_id(name, self._cut), name=name),
                    StreamEvent("call_args", "", index=self._cut)]
        return out

    def _complete_calls(self) -> tuple[list[StreamEvent], str]:
        """The calls of a cut-off, non-streamed turn that completed, and the text after them: the
        longest prefix followed by the family's separator (a call the model finished) that parses,
        with the closing text added, to calls and nothing else."""
        text, sep, start = self.text, self.fmt.call_separator, len(self.fmt.forced_prefix)
        for at in range(len(text) - 1, start, -1):
            if (sep and not text.startswith(sep, at)) or (not sep and text[at - 1] != ">"):
                continue
            parser = self.fmt.stream(self.tools, first_index=self.index)
            events = parser.feed(text[:at] + self.fmt.call_suffix) + parser.finish()
            if parser.calls and not any(e.kind == "content" and e.text.strip() for e in events):
                self.next_index = parser.next_index
                return [e for e in events if e.kind != "content"], text[at:]
        return [], text[start:]


def _first_tool_named(text: str, tools: list[ToolSpec]) -> str | None:
    """The declared tool whose name ``text`` writes first (the longest at one place), or None."""
    found = [(at, -len(t.name), t.name) for t in tools if (at := text.find(t.name)) >= 0]
    return min(found)[2] if found else None
