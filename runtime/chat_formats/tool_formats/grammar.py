"""Call bodies as grammars: literal wrapper text, JSON arguments, typed parameters, several calls.

The engine takes one constraint per request. A body is built per tool (:func:`per_tool`) and is
either a regex (the wrapper's literal text, escaped for the grammar's Rust regex syntax, with
:func:`json_args` where the tool's JSON arguments go) or a grammar of typed parameters
(below). The result is a grammar (an
``ebnf`` constraint in Lark) in which the wrapper's pieces surround the grammar
:func:`radixlm.constrained.schema_to_grammar` makes of the tool's parameters (any depth, only the
declared members). With ``max_calls`` above 1 the body repeats, one to ``max_calls`` calls joined by
the family's separator. A schema that cannot compile raises :class:`FormatUnsupported` naming the tool.

Arguments written as typed parameters, one per declared property: XML parameters (Qwen3-Coder,
MiniMax-M2, Seed-OSS), key/value tags (GLM), DSML parameters (DeepSeek V3.2) and Python keyword
arguments (pythonic).

Each property's value is constrained by the property's own sub-schema, compiled by the JSON-schema
front end (``$ref`` into the tool's ``$defs``/``definitions`` resolved against the tool's schema):
a *raw* string property (``type: string``, or an enum/const of strings) is written as bare text
(its ``pattern``, ``format`` and length bounds kept), every other value as compact JSON. Values
inside tags never contain ``<`` (in raw text or in a JSON string), so a value cannot close its tag
early. Parameters come in schema order; required ones always, optional ones may be left out; only
declared ones are written. The parsers read values back with :func:`typed_value`, the same rule.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Callable
from typing import Any

from radixlm.constrained import escape_literal, resolve_ref, schema_to_grammar
from radixlm.constrained.ir import builder as ir
from radixlm.runtime.chat_formats.tool_formats.base import FormatUnsupported, Params, ToolFormat, slots
from radixlm.runtime.chat_formats.tools import ToolSpec


def lit(text: str) -> str:
    """``text`` matched literally (meta and control characters escaped)."""
    return escape_literal(text)


def alternatives(parts: list[str]) -> str:
    """One regex matching any of ``parts`` (each already a regex)."""
    return parts[0] if len(parts) == 1 else "(" + "|".join(f"({p})" for p in parts) + ")"


def chosen(tools: list[ToolSpec], name: str | None) -> list[tuple[int, ToolSpec]]:
    """The tools a call may use, with their index in ``tools``."""
    return [(i, t) for i, t in enumerate(tools) if name is None or t.name == name]


_ARGS = "\x00args\x00"  # where json_args puts a tool's arguments in a body (never in a regex)


def json_args(index: int, tool: ToolSpec) -> str:
    """Where ``tool``'s arguments go in a call body, as compact JSON of its parameters' schema
    (:func:`per_tool` puts the schema's grammar there). Raises ``FormatUnsupported`` now when the
    schema cannot be compiled."""
    args_grammar(index, tool)
    return _ARGS


def args_grammar(index: int, tool: ToolSpec) -> ir.Grammar:
    """The grammar of ``tool``'s arguments: only the declared ones, members in any order, values
    of any depth (``FormatUnsupported`` naming the tool when the schema cannot be compiled)."""
    from radixlm.constrained import schema_to_grammar

    try:
        return schema_to_grammar(tool.parameters, unspecified_extras=False).grammar
    except ValueError as e:
        raise FormatUnsupported(index, str(e)) from None


def per_tool(tools: list[ToolSpec], name: str | None, body: Callable[[int, ToolSpec], str | ir.Grammar],
             sep: str | None = None, max_calls: int = 1) -> dict[str, Any]:
    """The constraint of one to ``max_calls`` calls (``sep`` between two; None: one call):
    ``body(i, tool)`` for each tool a call may use, as alternatives. A body is a regex (one with
    :func:`json_args` in it holds the arguments' grammar there) or a grammar of its own."""
    bodies = [(i, t, body(i, t)) for i, t in chosen(tools, name)]
    many = sep is not None and max_calls > 1
    if not many and all(isinstance(b, str) and _ARGS not in b for _, _, b in bodies):
        return {"regex": alternatives([b for _, _, b in bodies])}  # type: ignore[misc]
    rules: dict[str, ir.Node] = {}
    calls = []
    for i, tool, text in bodies:
        if isinstance(text, ir.Grammar):
            calls.append(merge_rules(text, f"c{i}_", rules))
            continue
        parts: list[ir.Node | None] = []
        for k, piece in enumerate(text.split(_ARGS)):
            if k:
                parts.append(merge_rules(args_grammar(i, tool), f"t{i}_", rules))
            parts.append(ir.Lex(piece) if piece else None)
        calls.append(ir.seq(*[p for p in parts if p is not None]))
    call = ir.alt(calls)
    if many:
        rules["call"] = call
        call = ir.join(ir.Ref("call"), ir.Lit(sep), 1, max_calls)
    return {"ebnf": ir.Grammar(call, rules).to_lark()}


END_WHITESPACE = 2  # newlines a forced turn may write after its closing text, before its end token


def with_model_end(constraint: dict[str, Any], suffix: str) -> dict[str, Any]:
    """``constraint`` (a forced turn's calls) that may also end the way the model ends a turn of
    calls itself: the family's closing text ``suffix`` (``</tool_call>``), then up to
    ``END_WHITESPACE`` newlines, then its end token. Without it the grammar's only way on after a
    call is the separator of another call, and a model that writes the closing text is forced into
    a call it would not have made. A ``json_schema`` constraint (a format with no closing text) is
    returned as it is."""
    if not suffix or ("regex" not in constraint and "ebnf" not in constraint):
        return constraint
    if "regex" in constraint:
        return {"regex": f"({constraint['regex']})({lit(suffix)}\\n{{0,{END_WHITESPACE}}})?"}
    lark = constraint["ebnf"]
    if not lark.startswith("start:"):
        raise ValueError("a call grammar's Lark text starts with its start rule")
    end = ir.Grammar(ir.seq(ir.Ref("forced_calls"), ir.opt(ir.seq(
        ir.Lit(suffix), ir.rep(ir.Lit("\n"), 0, END_WHITESPACE)))), {}).to_lark()
    return {"ebnf": end + "forced_calls:" + lark[len("start:"):]}


# Root keywords a parameter layout can write exactly (annotations and definitions included).
_ROOT_KEYS = {"type", "properties", "required", "additionalProperties", "$defs", "definitions", "$schema",
              "$id", "title", "description", "default", "examples", "strict", "$comment"}
_DEFS = ("$defs", "definitions")
RAW_TEXT = r"[^<\x00-\x1f]"  # one character of a raw string value: no control character, no '<'
_TAG_SAFE_STRING = r'"[^<]*"'  # a JSON string inside a tagged value: no '<'
_PLAIN_STRING_KEYS = {"type", "minLength", "maxLength", "title", "description", "default", "examples", "$comment"}

# (key, value node, raw) -> the node of one parameter as the layout writes it
Param = Callable[[str, ir.Node, bool], ir.Node | None]


def property_schemas(tool: ToolSpec) -> dict[str, Any]:
    """The tool's declared properties, each with a top-level ``$ref`` followed (schema order)."""
    root = tool.parameters if isinstance(tool.parameters, dict) else {}
    out = {}
    for key, prop in (root.get("properties") or {}).items():
        seen = 0
        while isinstance(prop, dict) and isinstance(prop.get("$ref"), str) and seen < 32:
            try:
                target, _ = resolve_ref(root, prop["$ref"], f"#/properties/{key}")
            except ValueError:
                break
            prop, seen = {**target, **{k: v for k, v in prop.items() if k != "$ref"}}, seen + 1
        out[key] = prop
    return out


def is_raw(prop: Any) -> bool:
    """Whether a property's value is written as bare text (a string) rather than JSON."""
    if not isinstance(prop, dict):
        return False
    if "const" in prop or "enum" in prop:
        values = prop.get("enum", [prop.get("const")])
        return bool(values) and all(isinstance(v, str) for v in values)
    return prop.get("type") == "string"


def typed_value(raw: str, prop: Any) -> Any:
    """A parameter's written value read back: raw text for a raw string property, else JSON
    (text that is not JSON stays text, as the families' own parsers do)."""
    if is_raw(prop):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def params_grammar(index: int, tool: ToolSpec, param: Param, sep: str = "", layout: str = "",
                   python: bool = False, values: Callable[[ir.Grammar], ir.Grammar] | None = None,
                   sort_keys: bool = False) -> ir.Grammar:
    """The grammar of ``tool``'s parameters: ``param(key, value, raw)`` for each declared property in
    schema order (``sort_keys``: sorted by name; optional ones may be absent), joined by ``sep``.
    ``python``: every value is a Python literal (strings quoted); ``values``: every value is the
    JSON grammar of its sub-schema rewritten by this function (a family's own value syntax); else
    raw strings are bare and other values tag-safe JSON. ``FormatUnsupported`` names the tool when
    its schema is not an object of declared properties or a property cannot compile."""
    root = _check_root(index, tool, layout)
    required = set(root.get("required") or [])
    rules: dict[str, ir.Node] = {}
    items: list[tuple[ir.Node, bool]] = []
    props = property_schemas(tool).items()
    for k, (key, prop) in enumerate(sorted(props, key=lambda kv: kv[0]) if sort_keys else props):
        raw = is_raw(prop) and not python and values is None
        leaf = python_literal if python else (_same if raw or values else tag_safe)
        value = _value(index, root, key, prop, raw, rules, f"t{index}_p{k}_", leaf, values)
        node = param(key, value, raw)
        if node is None:
            raise FormatUnsupported(index, f"the {layout} call layout cannot write the parameter name {key!r}")
        items.append((node, key in required))
    return ir.Grammar(_ordered(items, ir.Lit(sep) if sep else None), rules)


def _ordered(items: list[tuple[ir.Node, bool]], sep: ir.Node | None) -> ir.Node:
    """Items in order, each present (required) or optional, with ``sep`` between present ones."""
    if sep is None:
        return ir.seq(*[node if req else ir.opt(node) for node, req in items]) or ir.EMPTY
    # alternatives by the first present item: the optional ones before it are absent
    heads = []
    for k, (node, req) in enumerate(items):
        rest = _ordered_tail(items[k + 1:], sep)
        heads.append(ir.seq(node, rest))
        if req:
            break
    else:
        heads.append(ir.EMPTY)
    return ir.alt(heads) or ir.EMPTY


def _ordered_tail(items: list[tuple[ir.Node, bool]], sep: ir.Node) -> ir.Node:
    """``sep item`` for each later item, optional ones optional."""
    return ir.seq(*[ir.seq(sep, node) if req else ir.opt(ir.seq(sep, node)) for node, req in items]) or ir.EMPTY


def _check_root(index: int, tool: ToolSpec, layout: str) -> dict:
    root = tool.parameters if isinstance(tool.parameters, dict) else {}
    extra = sorted(set(root) - _ROOT_KEYS)
    if root.get("type", "object") != "object" or extra:
        raise FormatUnsupported(index, f"the {layout} call layout writes one parameter per declared property: "
                                f"it needs an object schema with properties; got keywords {extra or ['type']}")
    missing = [k for k in root.get("required") or [] if k not in (root.get("properties") or {})]
    if missing:
        raise FormatUnsupported(index, f"required parameter {missing[0]!r} is not among the properties")
    return root


def _value(index: int, root: dict, key: str, prop: Any, raw: bool, rules: dict[str, ir.Node],
           prefix: str, leaf: Callable[[ir.Node], ir.Node],
           values: Callable[[ir.Grammar], ir.Grammar] | None = None) -> ir.Node:
    """One property's value node (its rules added to ``rules`` under ``prefix``)."""
    if raw and isinstance(prop, dict) and set(prop) <= _PLAIN_STRING_KEYS:
        lo, hi = int(prop.get("minLength", 0)), prop.get("maxLength")
        if hi is not None and int(hi) < lo:
            raise FormatUnsupported(index, f"property {key!r}: maxLength is below minLength")
        return ir.Lex(f"{RAW_TEXT}{{{lo},{'' if hi is None else int(hi)}}}") if (lo or hi is not None) \
            else ir.Lex(f"{RAW_TEXT}*")
    sub = {**{k: root[k] for k in _DEFS if k in root}, **prop} if isinstance(prop, dict) else prop
    try:
        grammar = schema_to_grammar(sub, any_order=False, unspecified_extras=False).grammar
    except ValueError as e:
        raise FormatUnsupported(index, f"property {key!r}: {e}") from None
    start = merge_rules(values(grammar) if values else grammar, prefix, rules, leaf)
    if not raw:
        return start
    bare = unquoted(start)
    if bare is None:
        raise FormatUnsupported(index, f"property {key!r}: its string constraint cannot be written as raw text")
    return bare


def _same(node: ir.Node) -> ir.Node:
    return node


def merge_rules(grammar: ir.Grammar, prefix: str, rules: dict[str, ir.Node],
                leaf: Callable[[ir.Node], ir.Node] = _same) -> ir.Node:
    """Add ``grammar``'s rules to ``rules`` under ``prefix`` and return its start node (references
    renamed the same way; ``leaf`` rewrites every literal and lexeme)."""
    for name, node in grammar.rules.items():
        rules[prefix + name] = rewrite(node, prefix, leaf)
    return rewrite(grammar.start, prefix, leaf)


def rewrite(node: ir.Node, prefix: str, leaf: Callable[[ir.Node], ir.Node]) -> ir.Node:
    """``node`` with rule references prefixed and ``leaf`` applied to literals and lexemes."""
    if isinstance(node, ir.Ref):
        return ir.Ref(prefix + node.name)
    if isinstance(node, (ir.Seq, ir.Alt)):
        return type(node)(tuple(rewrite(x, prefix, leaf) for x in node.items))
    if isinstance(node, ir.Rep):
        return ir.Rep(rewrite(node.item, prefix, leaf), node.lo, node.hi)
    return leaf(node)


def tag_safe(node: ir.Node) -> ir.Node:
    """A JSON string lexeme restricted to text without ``<`` (other leaves unchanged)."""
    if isinstance(node, ir.Lex) and len(node.regex) > 1 and node.regex[0] == node.regex[-1] == '"':
        return ir.LexOp("and", (node.regex, _TAG_SAFE_STRING))
    return node


def unquoted(node: ir.Node) -> ir.Node | None:
    """A JSON string node as the bare text it encodes, limited to :data:`RAW_TEXT` (so the
    escapes never apply and the text is the string itself); None when it is not a plain string."""
    if isinstance(node, ir.Alt):
        parts = [unquoted(x) for x in node.items]
        return None if any(p is None for p in parts) else ir.alt(parts)
    if isinstance(node, ir.Lit):
        text = json.loads(node.text) if node.text.startswith('"') else None
        return ir.Lit(text) if isinstance(text, str) else None
    if isinstance(node, ir.Lex) and len(node.regex) > 1 and node.regex[0] == node.regex[-1] == '"':
        return ir.LexOp("and", (node.regex[1:-1], f"{RAW_TEXT}*"))
    return None


def python_literal(node: ir.Node) -> ir.Node:
    """A JSON leaf as Python literal text: ``true``/``false``/``null`` as ``True``/``False``/``None``,
    strings without the ``\\/`` escape (Python keeps it as two characters)."""
    spelled = {"true": "True", "false": "False", "null": "None", "(true|false)": "(True|False)"}
    if isinstance(node, ir.Lit) and node.text in spelled:
        return ir.Lit(spelled[node.text])
    if isinstance(node, ir.Lex):
        regex = spelled.get(node.regex, node.regex)
        return ir.Lex(regex.replace(r'\\["\\/bfnrt]', r'\\["\\bfnrt]'))
    if isinstance(node, ir.LexOp):
        return ir.LexOp(node.op, tuple(python_literal(ir.Lex(p)).regex if isinstance(p, str) else python_literal(p)
                                       for p in node.parts), node.pointer)
    return node


def python_keyword(key: str) -> bool:
    """Whether ``key`` can be written as a Python keyword argument."""
    return key.isidentifier() and not keyword.iskeyword(key)


def wrapped(grammar: ir.Grammar, before: str, after: str) -> ir.Grammar:
    """``grammar`` between two literal texts."""
    return ir.Grammar(ir.seq(ir.Lit(before), grammar.start, ir.Lit(after)) or ir.EMPTY, grammar.rules)


def layout_param(params: Params) -> Param:
    """A parameter as ``params`` writes it: its tag (key and raw flag filled), value, end (a key
    its ``key`` regex, or Python for Python values, cannot spell cannot be written)."""
    def param(key: str, value: ir.Node, raw: bool) -> ir.Node | None:
        if not re.fullmatch(params.key, key) or (params.values == "python" and not python_keyword(key)):
            return None
        tag = params.tag.replace("{key}", key).replace("{string}", str(raw).lower())
        return ir.seq(ir.Lit(tag), value, *([ir.Lit(params.end)] if params.end else []))
    return param


def layout_constraint(fmt: ToolFormat, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
    """The forced calls of ``fmt``'s declared layout: per tool its call body (the layout's
    :attr:`CallLayout.body`, name filled), its arguments a JSON object or ``args``'s parameters,
    joined by the format's separator."""
    layout = fmt.layout
    if layout is None:
        raise TypeError(f"{fmt.name} declares no call layout")
    json_name = layout.json_call

    def fill(text: str, tool: ToolSpec) -> str:
        return text.replace("{name}", json.dumps(tool.name) if json_name else tool.name)

    def body(index: int, tool: ToolSpec) -> str | ir.Grammar:
        if layout.args is None:
            return "".join(json_args(index, tool) if p == "{args}" else layout.id_write if p == "{id}"
                           else lit(fill(p, tool)) for p in slots(layout.body))
        p = layout.args
        before, _, after = layout.body.partition("{args}")
        grammar = params_grammar(index, tool, layout_param(p), p.sep, f"{fmt.name} {fmt.arguments_layout}",
                                 python=p.values == "python", values=p.values if callable(p.values) else None,
                                 sort_keys=p.sort_keys)
        return wrapped(grammar, fill(before, tool), fill(after, tool))
    return per_tool(tools, name, body, fmt.call_separator, max_calls)
