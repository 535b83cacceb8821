"""The shared nouns of tool-call formats: a parsed call, a parse result, and the format base class.

A format describes its call *blocks*: text that starts at one of ``openers`` and ends at ``closer``
(or at the end of the output when ``closer`` is None). :meth:`ToolFormat.parse_block` turns one
block into calls, or None when it is malformed (the block is then kept as content). Both the
non-streamed parse and the streaming parser scan with the same rules
(:mod:`radixlm.runtime.chat_formats.tool_formats.scanner`), so their results are equal.

Each family declares its layout once, as a :class:`CallLayout` (the block's tags, one call's text
with its name, id and arguments slots, the argument encoding (:class:`Params` for one parameter per
property), the text between calls): the parser (:meth:`ToolFormat.parse_block`), the streaming
scanner's heads (``call_head``, ``next_call_head``), the forced grammar (:meth:`ToolFormat.body_constraint`,
built by :func:`radixlm.runtime.chat_formats.tool_formats.grammar.layout_constraint`), the forced
texts and the markers are derived from it.
"""

from __future__ import annotations

import json
import re
import secrets
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
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


def named_call(obj: Any, args_key: str = "arguments", alt_key: str | None = None,
               name_key: str = "name") -> ParsedCall | None:
    """``{name_key: str, args_key: object}`` as a call (``alt_key`` also accepted), else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get(name_key), str):
        return None
    args = obj.get(args_key, obj.get(alt_key) if alt_key else None)
    if not isinstance(args, dict):
        return None
    return ParsedCall(obj[name_key], dump_args(args))


_SLOT = re.compile(r"(\{name\}|\{id\}|\{args\})")
_JSON_PUNCT = re.compile(r"(\s+|[{}\[\],:])")


def _squeeze(regex: str) -> str:
    """``regex`` with runs of ``\\s*`` made one."""
    return re.sub(r"(?:\\s\*)+", lambda _: r"\s*", regex)


def slots(template: str) -> list[str]:
    """``template`` cut into its literal texts and its slots (``{name}``, ``{id}``, ``{args}``), in order."""
    return [p for p in _SLOT.split(template) if p]


def read_text(text: str, json_like: bool = False) -> str:
    """A regex reading layout text as models write it: a whitespace run reads as any whitespace
    (none included); ``json_like``: whitespace may also surround JSON punctuation."""
    out = []
    for part in (_JSON_PUNCT if json_like else re.compile(r"(\s+)")).split(text):
        if part.isspace():
            out.append(r"\s*")
        elif json_like and part in ("{", "}", "[", "]", ",", ":"):
            out.append(r"\s*" + re.escape(part) + r"\s*")
        elif part:
            out.append(re.escape(part))
    return _squeeze("".join(out))


def _compact(value: Any, python: bool = False) -> str:
    """``value`` as compact JSON (``python``: as a Python literal: ``True``, ``False``, ``None``)."""
    if not python:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, dict):
        return "{" + ",".join(f"{_compact(k, True)}:{_compact(v, True)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_compact(v, True) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return {True: "True", False: "False", None: "None"}[value]
    return json.dumps(value, ensure_ascii=False)


def _optional(text: str) -> str:
    return f"(?:{re.escape(text)})?" if text else ""


@dataclass(frozen=True)
class Params:
    """Arguments written one parameter per declared property (not as one JSON object).

    ``tag`` comes before a value (``{key}``, and ``{string}``: ``true`` before a raw string value,
    else ``false``), ``end`` after it, ``sep`` between two; ``key`` is the regex of the names the
    layout can spell. ``values``: how a forced call writes them: ``"tagged"`` (a string property as
    raw text, any other value as JSON without ``<``; see
    :mod:`radixlm.runtime.chat_formats.tool_formats.grammar`), ``"python"`` (Python literals), or a
    rewrite of each value's JSON grammar (a family's own value syntax). ``read``: how the parser
    reads them back: ``"schema"`` (raw text for a string property, else JSON; text that is not JSON
    stays text), ``"flag"`` (raw text where ``{string}`` says ``true``, else JSON, which must parse),
    or a function of the whole arguments text (value syntaxes that nest; ``ValueError`` when malformed)."""

    tag: str
    end: str = ""
    sep: str = ""
    key: str = r"[^<>\n]+"
    values: str | Callable[[Any], Any] = "tagged"
    read: str | Callable[[str], Any] = "schema"
    sort_keys: bool = False
    pad: str = ""  # text a written value may be padded with at each end, read as layout (never written)
    write: Callable[[Any], str] | None = None  # a value in the family's own syntax (with ``values`` a rewrite)

    def render(self, args: dict[str, Any], props: dict[str, Any]) -> str:
        """``args`` written as this layout writes them (values compact; ``props``: the tool's
        property schemas, which say what is a raw string)."""
        from radixlm.runtime.chat_formats.tool_formats.grammar import is_raw

        out = []
        for key in sorted(args) if self.sort_keys else args:
            value, raw = args[key], self.values == "tagged" and is_raw(props.get(key))
            text = value if raw else self.write(value) if self.write else _compact(value, self.values == "python")
            tag = self.tag.replace("{key}", key).replace("{string}", str(raw).lower())
            out.append(tag + text + self.end)
        return self.sep.join(out)

    @cached_property
    def pattern(self) -> re.Pattern:
        """One written parameter: groups ``key``, ``value`` (and ``string``). The whitespace that
        touches the value reads as itself, optional (a raw value keeps any other)."""
        head, end = self.tag.rstrip(), self.end.lstrip()
        slot = {"{key}": f"(?P<key>{self.key})", "{string}": "(?P<string>true|false)"}
        regex = "".join(slot.get(p) or read_text(p) for p in re.split(r"(\{key\}|\{string\})", head) if p)
        before, after = self.tag[len(head):] or self.pad, self.end[:len(self.end) - len(end)] or self.pad
        return re.compile(regex + _optional(before) + r"(?P<value>.*?)" + _optional(after) + read_text(end), re.S)

    def parse(self, text: str, tool: ToolSpec | None) -> dict[str, Any] | None:
        """The arguments ``text`` writes, or None when it holds anything else."""
        if callable(self.read):
            try:
                value = self.read(text)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
        from radixlm.runtime.chat_formats.tool_formats.grammar import property_schemas, typed_value

        props = property_schemas(tool) if tool else {}
        args: dict[str, Any] = {}
        pos = 0
        for m in self.pattern.finditer(text):
            if text[pos:m.start()].strip():
                return None
            key, raw = m.group("key").strip(), m.group("value")
            if self.read == "flag" and m.group("string") != "true":
                try:
                    args[key] = json.loads(raw)
                except ValueError:
                    return None
            else:
                args[key] = raw if self.read == "flag" else typed_value(raw, props.get(key))
            pos = m.end()
        return args if not text[pos:].strip() else None


@dataclass(frozen=True)
class CallLayout:
    """How a family writes calls, declared once; its format's parser, streaming heads, forced grammar
    and forced texts are derived from it.

    A block is ``open lead CALL trail close`` (``many``: several calls in one block, ``gap`` between
    two; else one call per block, blocks repeat with ``gap`` between them; ``close`` None: the block
    runs to the end of the output). ``call`` is one call's text with the slots ``{name}``, ``{args}``
    (a JSON object, or ``args``'s parameters) and ``{id}`` (a number the model writes: ``id_write``
    is what a forced call writes, ``id_read`` what the parser accepts; ``call_id`` is the id the
    API returns, over ``{name}`` and ``{id}``). A call whose text is a JSON object (it starts with
    ``{"``) is read as JSON: its members in any order, its ``{name}`` a JSON string; ``alt_args``: a
    second key its arguments may sit under. ``forced_head``: the call's text before its name is
    written by the server (in ``forced_prefix`` and the separator), not generated; ``call_end``: the
    call's closing text, likewise written by the server. ``also_open``: other texts that open a
    block (a template's spelling); ``prompt_opens``: the generation prompt ends with ``open`` (the
    output starts inside the first block); ``parallel`` False: one call per turn."""

    open: str
    close: str | None
    call: str
    args: Params | None = None
    lead: str = ""
    trail: str = ""
    gap: str = ""
    many: bool = False
    forced_head: bool = False
    call_end: str = ""
    also_open: tuple[str, ...] = ()
    prompt_opens: bool = False
    parallel: bool = True
    alt_args: str | None = None
    id_write: str = "[0-9]"
    id_read: str = r"\d+"
    call_id: str = ""

    @property
    def json_call(self) -> bool:
        """Whether a call is a JSON object (read as JSON, not by its text)."""
        return self.call.lstrip().startswith('{"')

    @property
    def head(self) -> str:
        """The call's text before its name."""
        return self.call.split("{name}", 1)[0]

    @property
    def body(self) -> str:
        """The part of a call a forced turn generates (its name slot on)."""
        start = len(self.head) if self.forced_head else 0
        return self.call[start:len(self.call) - len(self.call_end)]

    def forced_prefix(self) -> str:
        """The text before a forced turn's first generated call."""
        return ("" if self.prompt_opens else self.open) + self.lead + (self.head if self.forced_head else "")

    def suffix(self) -> str:
        """The text after a forced turn's last call."""
        return self.call_end + self.trail + (self.close or "")

    def separator(self) -> str | None:
        """The text between two calls of a forced turn (None: one call per turn)."""
        if not self.parallel:
            return None
        again = self.head if self.forced_head else ""
        return self.call_end + self.gap + again if self.many else self.suffix() + self.gap + self.open + self.lead + again

    @cached_property
    def _patterns(self) -> tuple[re.Pattern, re.Pattern]:
        """One whole call, and one call up to its JSON arguments."""
        return re.compile(self._call_regex(), re.S), re.compile(self._call_regex(upto_args=True))

    def _call_regex(self, upto_args: bool = False) -> str:
        """The regex reading one call (``upto_args``: up to its JSON arguments object): groups
        ``name``, ``args`` and, where the layout has a ``call_id``, ``id``."""
        regex = self._regex(self.call, upto_args)
        if self.call_id:  # the id the model writes, its text before the name optional (the API's id has it)
            span, prefix = self._regex(self.call_id), read_text(self.call_id.split("{name}", 1)[0])
            loose = f"(?:{prefix})?{span[len(prefix):]}" if prefix and span.startswith(prefix) else span
            regex = _squeeze(regex.replace(span, rf"\s*(?P<id>{loose})\s*", 1))
        return regex

    def _regex(self, template: str, upto_args: bool = False) -> str:
        parts, pieces = [], slots(template)
        for k, p in enumerate(pieces):
            if p.isspace() and pieces[k - 1:k] == ["{name}"] and pieces[k + 1:k + 2] == ["{args}"] and not self.args:
                parts.append(re.escape(p))  # only this whitespace tells a name from the JSON after it: as written
                continue
            if p == "{args}" and upto_args:
                return "".join(parts) + r"(?=\{)"
            if p == "{name}" and self.json_call:
                parts.append(f'"(?P<name>{NAME_RE})"')
            elif p == "{name}":  # whitespace may pad a name between tags, not where whitespace ends it
                after = "" if pieces[k + 1:k + 2] and pieces[k + 1].isspace() else r"\s*"
                parts.append(rf"\s*(?P<name>{NAME_RE}){after}")
            elif p == "{id}":
                parts.append(f"(?P<n>{self.id_read})")
            elif p == "{args}":
                parts.append(r"(?P<args>.*?)")
            else:
                text = read_text(p, self.json_call)
                if self.json_call and self.alt_args:  # the arguments' key, or the other one
                    key = self._keys()[1]
                    text = text.replace(f'"{key}"', f'"(?:{key}|{self.alt_args})"')
                parts.append(text)
        return "".join(parts)

    def heads(self) -> tuple[re.Pattern | None, re.Pattern | None]:
        """``call_head`` and ``next_call_head``: a call's text up to its JSON arguments object, after
        the forced prefix's opener / after the previous call's arguments (None: not JSON arguments)."""
        if self.args is not None:
            return None, None
        head = self._call_regex(upto_args=True)
        first = re.compile(_squeeze(read_text("" if self.prompt_opens else self.open)
                                    + read_text(self.lead, self.json_call) + head))
        if not self.parallel:
            return first, None
        tail = read_text(self.call.split("{args}", 1)[1], self.json_call)
        if self.many:
            between = tail + read_text(self.gap, self.json_call)
        else:
            between = tail + read_text(self.trail) + read_text(self.close or "") + r"\s*" + read_text(self.open)
            between += read_text(self.lead, self.json_call)
        return first, re.compile(_squeeze(between + r"\s*" + head))

    def render(self, calls: list[tuple[str, dict[str, Any]]], tools: list[ToolSpec]) -> str:
        """``calls`` (name, arguments) as a forced turn writes them, from the forced prefix to the
        suffix (an example of the family's syntax; the derivation test parses it back)."""
        from radixlm.runtime.chat_formats.tool_formats.grammar import property_schemas

        bodies = []
        for name, args in calls:
            tool = next((t for t in tools if t.name == name), None)
            written = (self.args.render(args, property_schemas(tool) if tool else {}) if self.args
                       else _compact(args))
            filled = self.body.replace("{name}", json.dumps(name) if self.json_call else name)
            bodies.append(filled.replace("{id}", "0").replace("{args}", written))
        return self.forced_prefix() + (self.separator() or "").join(bodies) + self.suffix()

    def markers(self) -> tuple[str, ...]:
        """The whole tags in a call's text and its parameters' (no slot inside)."""
        text = self.call + (self.args.tag + self.args.end if self.args else "")
        found = re.findall(r"<[^<>{}\s]+>", text)
        return tuple(dict.fromkeys(m for m in found if m not in (self.open, self.close)))

    def _keys(self) -> tuple[str, str]:
        """A JSON call's name key and arguments key."""
        name = re.search(r'"([^"]+)"\s*:\s*\{name\}', self.call)
        args = re.search(r'"([^"]+)"\s*:\s*\{args\}', self.call)
        if not (name and args):
            raise ValueError(f"a JSON call layout names its name and arguments keys: {self.call!r}")
        return name.group(1), args.group(1)

    def parse(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        """The calls of ``block`` (it starts with an opener) and how much of it they take, or None."""
        opener = next((o for o in (self.open, *self.also_open) if o and block.startswith(o)), "")
        if self.json_call:
            return self._json_calls(block, len(opener))
        if self.close is None:
            return self._open_call(block, len(opener), tools)
        if not block.endswith(self.close):
            return None
        inner = block[len(opener):len(block) - len(self.close)]
        pattern = self._patterns[0]
        if not self.many:
            m = pattern.fullmatch(inner.strip())
            call = self._call_of(m, tools) if m else None
            return ([call], len(block)) if call else None
        calls = calls_in(inner, pattern, lambda m: self._call_of(m, tools))
        return (calls, len(block)) if calls else None

    def _call_of(self, m: re.Match, tools: list[ToolSpec]) -> ParsedCall | None:
        name, text = m.group("name"), m.group("args")
        if self.args is None:
            args = json_object(text)
        else:
            args = self.args.parse(text, next((t for t in tools if t.name == name), None))
        if args is None:
            return None
        call_id = self.call_id.replace("{name}", name).replace("{id}", m.group("n")) if self.call_id else None
        return ParsedCall(name, dump_args(args), call_id)

    def _open_call(self, block: str, start: int, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        """One call in a block that has no closer: its JSON arguments end where their value does."""
        m = self._patterns[1].match(block, start)
        got = decode_at(block, m.end()) if m and self.args is None else None
        if got is None or not isinstance(got[0], dict):
            return None
        return [ParsedCall(m.group("name"), dump_args(got[0]))], got[1]

    def _json_calls(self, block: str, pos: int) -> tuple[list[ParsedCall], int] | None:
        """JSON call objects: a JSON list (a ``[`` lead), several joined by the gap's text, or one."""
        name_key, args_key = self._keys()
        if self.lead.strip().startswith("["):
            got = decode_at(block, pos)
            if got is None or not isinstance(got[0], list) or not got[0]:
                return None
            calls = [named_call(obj, args_key, self.alt_args, name_key) for obj in got[0]]
            if self.close is None:  # the list ends the calls; what follows it is content
                return (calls, got[1]) if all(calls) else None  # type: ignore[return-value]
            end = got[1]
        else:
            calls, end, sep = [], pos, self.gap.strip()
            while True:
                got = decode_at(block, end)
                call = named_call(got[0], args_key, self.alt_args, name_key) if got else None
                if call is None:
                    break
                calls.append(call)
                end = got[1]  # type: ignore[index]
                rest = block[end:].lstrip()
                if not (self.many and sep and rest.startswith(sep)):
                    break
                end = len(block) - len(rest) + len(sep)
        if not calls or not all(calls):
            return None
        if self.close is None:  # the calls run to the end of the output; what follows them is content
            return calls, (end if block[end:].strip() else len(block))  # type: ignore[return-value]
        limit = len(block) - len(self.close) + (1 if self.close.startswith("]") else 0)  # Command R's "]```"
        if not block.endswith(self.close) or end > limit or block[end:limit].strip():
            return None
        return calls, len(block)  # type: ignore[return-value]


class ToolFormat:
    """Base class: a family declares its :class:`CallLayout` as ``layout`` (and its prose:
    ``name``, ``syntax``, ``aliases``, ``arguments_layout``); the marker attributes, the streaming
    heads, :meth:`parse_block` and :meth:`body_constraint` are derived from it. A family may still
    set an attribute or override a method where its syntax does not fit the layout (its docstring
    says why)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        layout = cls.__dict__.get("layout")
        if layout is None:
            return
        call_head, next_call_head = layout.heads()
        derived = {
            "openers": tuple(o for o in (layout.open, *layout.also_open) if o), "closer": layout.close,
            "open_marker": layout.open, "forced_prefix": layout.forced_prefix(), "call_suffix": layout.suffix(),
            "call_separator": layout.separator(), "call_head": call_head, "next_call_head": next_call_head,
            "inner_markers": layout.markers(), "prompt_opener": layout.open if layout.prompt_opens else "",
        }
        for attr, value in derived.items():
            if attr not in cls.__dict__:  # what the family sets itself stands
                setattr(cls, attr, value)

    layout: CallLayout | None = None
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

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        """The calls in ``block`` (which starts with an opener) and how many characters they take
        (the rest is content), or None when the block is not a well-formed call."""
        if self.layout is None:
            raise TypeError(f"{self.name} declares no call layout")
        return self.layout.parse(block, tools)

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        """Sampling fields constraining the calls generated after ``forced_prefix`` (``json_schema``,
        ``regex`` or ``ebnf``): one call, or one to ``max_calls`` joined by ``call_separator`` where
        the family writes several; raises :class:`FormatUnsupported` for inexpressible schemas."""
        from radixlm.runtime.chat_formats.tool_formats.grammar import layout_constraint

        return layout_constraint(self, tools, name, max_calls)

    def new_call_id(self, name: str, index: int) -> str:
        """The id of call ``index`` of a response: the layout's ``call_id`` where the model writes
        ids itself, else OpenAI style."""
        if self.layout is not None and self.layout.call_id:
            return self.layout.call_id.replace("{name}", name).replace("{id}", str(index))
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
