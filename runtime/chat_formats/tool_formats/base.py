"""The shared nouns of tool-call formats: a parsed call, a parse result, and the format base class.

A format describes its call *blocks*: text that starts at one of ``openers`` and ends at ``closer``
(or at the end of the output when ``closer`` is None). :meth:`ToolFormat.parse_block` turns one
block into calls, or None when it is malformed (the block is then kept as content). Both the
non-streamed parse and the streaming parser scan with the same rules
(:mod:`radixlm.runtime.chat_formats.tool_formats.scanner`), so their results are equal.

JSON calls that run to the end of the output (lists of call objects) are read by :func:`call_list`.
"""

from __future__ import annotations

import json
import re
import secrets
import string
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.chat_formats.tools import ToolSpec


class FormatUnsupported(ValueError):
    """A forced call whose tool schema this family's argument layout cannot express exactly."""

    def __init__(self, index: int, why: str):
        super().__init__(f"tools[{index}].function.parameters: {why}")
        self.index = index


@dataclass(frozen=True)
class ParsedCall:
    """One call: ``arguments`` is a JSON object text."""

    name: str
    arguments: str
    id: str | None = None  # an id the model wrote itself (Kimi-K2 does)


@dataclass
class ParseResult:
    """Content text (everything that is not a well-formed call) and the calls, in order."""

    content: str = ""
    calls: list[ParsedCall] = field(default_factory=list)


def dump_args(obj: Any) -> str:
    """Arguments as the JSON text the API returns (one canonical spelling for every family)."""
    return json.dumps(obj, ensure_ascii=False)


def json_object(text: str) -> dict | None:
    """``text`` parsed as one JSON object, or None."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


NAME_RE = r"[A-Za-z0-9_.-]{1,64}"


def json_head(opener: str, args_keys: str = "arguments") -> re.Pattern:
    """``call_head`` of a JSON call object after ``opener``: ``{"name": "NAME", "<args key>": `` up
    to the arguments object (``args_keys``: a regex alternation of the accepted keys)."""
    return re.compile(opener + r'\s*\{\s*"name"\s*:\s*"(?P<name>' + NAME_RE + r')"\s*,\s*"(?:'
                      + args_keys + r')"\s*:\s*(?=\{)')


def calls_in(inner: str, pattern: re.Pattern,
             call_of: Callable[[re.Match], ParsedCall | None]) -> list[ParsedCall] | None:
    """The calls ``pattern`` finds in a section's ``inner`` text, or None when anything but calls
    and whitespace is there, no call is, or ``call_of`` rejects one (returns None)."""
    calls, pos = [], 0
    for m in pattern.finditer(inner):
        call = call_of(m)
        if inner[pos:m.start()].strip() or call is None:
            return None
        calls.append(call)
        pos = m.end()
    return calls if calls and not inner[pos:].strip() else None


def named_call(obj: Any, args_key: str = "arguments", alt_key: str | None = None) -> ParsedCall | None:
    """``{"name": str, args_key: object}`` as a call (``alt_key`` also accepted), else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(args_key, obj.get(alt_key) if alt_key else None)
    if not isinstance(args, dict):
        return None
    return ParsedCall(obj["name"], dump_args(args))


class ToolFormat(ABC):
    """Base class: subclasses set the class attributes and implement :meth:`parse_block` and
    :meth:`body_constraint`. ``class F(ToolFormat, tags=(open, close))`` sets the five marker
    attributes of a format whose calls sit between one open and one close tag (``close`` None:
    the block runs to the end of the output)."""

    def __init_subclass__(cls, tags: tuple[str, str | None] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if tags is not None:
            open_, close = tags
            cls.openers, cls.closer, cls.open_marker, cls.forced_prefix = (open_,), close, open_, open_
            cls.call_suffix = close or ""

    name: str = ""
    syntax: str = ""  # how the family writes calls, in a sentence (the docs' family table)
    aliases: tuple[str, ...] = ()
    openers: tuple[str, ...] = ()  # text that starts a call block
    closer: str | None = None  # text that ends one (None: the block runs to the end of the output)
    open_marker: str = ""  # the auto phase-1 stop string; forced_prefix starts with it
    forced_prefix: str = ""  # appended to the prompt before a constrained call body
    call_suffix: str = ""  # appended after a completed body (not generated)
    inner_markers: tuple[str, ...] = ()  # other marker text inside a call (separators, argument tags)
    # One call's text from its opener up to its JSON arguments object: group ``name`` (and ``id``
    # where the model writes one). Set for JSON-argument layouts, whose arguments then stream as
    # they are generated; None: the call is sent whole when its block ends.
    call_head: re.Pattern | None = None
    # Whether the family's models also write a call as the bare output ``{"name": ..., "arguments":
    # ...}`` without wrapper (see :mod:`radixlm.runtime.chat_formats.tool_formats.bare_json`).
    bare_json_calls: bool = False
    # The text between two calls of one forced turn, generated under the grammar (after one call's
    # body, before the next one's); None: the family writes one call per turn.
    call_separator: str | None = None
    # How a call writes its arguments: a JSON object, or one of the parameter layouts of
    # :mod:`radixlm.runtime.chat_formats.tool_formats.grammar` (typed parameters).
    arguments_layout: str = "JSON object"
    # The head of a later call of the same turn, searched after the previous call's arguments
    # (None: ``call_head``).
    next_call_head: re.Pattern | None = None
    # Text the generation prompt ends with, inside the first part's opener (Functionary v3.2's
    # ``>>>``): the parsers read the output as if it followed it, and the server reads the answer's
    # first line as a header (:meth:`header_call`) before any text phase.
    prompt_opener: str = ""
    # Opener texts that announce content, never passed on as content themselves (``>>>all\n``).
    content_headers: tuple[str, ...] = ()

    def header_call(self, line: str, tools: list[ToolSpec]) -> str | None:
        """The tool a header line after ``prompt_opener`` names (a call follows), or None."""
        return None

    def rest_constraint(self, tools: list[ToolSpec], name: str, max_calls: int = 1) -> dict[str, Any]:
        """The constraint of a turn whose first call's header (``header_call``) is already written."""
        raise TypeError(f"{self.name} reads no header after a prompt-side opener")

    @property
    def auto_openers(self) -> tuple[str, ...]:
        """The texts that open a call under ``tool_choice: auto`` (stop strings of the text phase)."""
        return (self.open_marker,)

    def resume_after(self, opener: str) -> str:
        """The text that follows ``opener`` (as the model wrote it) to reach ``forced_prefix``."""
        return self.forced_prefix[len(opener):] if self.forced_prefix.startswith(opener) else self.forced_prefix

    def markers(self) -> tuple[str, ...]:
        """Every marker text the parser must see in the output (kept when special tokens are skipped)."""
        found = (*self.openers, self.closer or "", self.open_marker, *self.inner_markers)
        return tuple(dict.fromkeys(m for m in found if m))

    @abstractmethod
    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        """The calls in ``block`` (which starts with an opener) and how many characters they take
        (the rest is content), or None when the block is not a well-formed call."""

    @abstractmethod
    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        """Sampling fields constraining the calls generated after ``forced_prefix`` (``json_schema``,
        ``regex`` or ``ebnf``): one call, or one to ``max_calls`` joined by ``call_separator`` where
        the family writes several; raises :class:`FormatUnsupported` for inexpressible schemas."""

    def new_call_id(self, name: str, index: int) -> str:
        """The id of call ``index`` of a response (OpenAI style by default)."""
        return f"call_{uuid.uuid4().hex[:24]}"

    def parse(self, text: str, tools: list[ToolSpec] | None = None) -> ParseResult:
        """The whole output parsed at once (the same scan as :meth:`stream`, fed in one piece)."""
        from radixlm.runtime.chat_formats.tool_formats.scanner import StreamParser

        parser = StreamParser(self, tools or [])
        events = parser.feed(text) + parser.finish()
        return parser.result(events)

    def stream(self, tools: list[ToolSpec] | None = None, first_index: int = 0):
        """A streaming parser: ``feed(delta) -> events``, ``finish() -> events``."""
        from radixlm.runtime.chat_formats.tool_formats.scanner import StreamParser

        return StreamParser(self, tools or [], first_index)


def mistral_call_id() -> str:
    """Mistral's ids: 9 random alphanumeric characters (its templates reject any other length)."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(9))


_DECODER = json.JSONDecoder()


def decode_at(text: str, pos: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``pos`` (after whitespace) and where it ends, or None."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    try:
        return _DECODER.raw_decode(text, pos)
    except (json.JSONDecodeError, ValueError):
        return None


def call_list(text: str, pos: int, args_key: str = "arguments",
              alt_key: str | None = None) -> tuple[list[ParsedCall], int] | None:
    """A JSON list of call objects at ``pos``: the calls and the end offset, or None."""
    got = decode_at(text, pos)
    if got is None or not isinstance(got[0], list) or not got[0]:
        return None
    calls = [named_call(obj, args_key, alt_key) for obj in got[0]]
    return (calls, got[1]) if all(calls) else None  # type: ignore[return-value]
