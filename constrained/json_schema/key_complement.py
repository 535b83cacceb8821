"""Keys that are none of some words: the keys of an object's extra members (never a named one)
and of ``not {enum}`` over strings."""

from __future__ import annotations

import json

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.pattern.chars import escape_literal
from radixlm.constrained.pattern.ecma import PLAIN_CHAR

_TRIE_CHARS = 48  # complement_key: up to this many characters of names, a regex form is kept too


def complement_key(words: set, nonempty: bool, pointer: str = "#") -> ir.Node:
    """A JSON string of plain characters that is none of ``words``, as the lexeme algebra (plain
    string ``&~`` the words).

    The algebra, not a trie regex of the complement, because llguidance's first mask inside the
    string is far cheaper over it (tens of µs against over a millisecond at 152k tokens,
    ``bench_extra_keys.py``), and many words never write a huge regex. While the words are small the trie rides along as
    the node's ``as_regex``, so a grammar that must become one regex (``Grammar.to_regex``)
    still can; ``pointer`` names the schema node in its error past that."""
    plain = [w for w in words if all(0x20 <= ord(c) and c not in '"\\' for c in w)]
    body = f'"{PLAIN_CHAR}{"+" if nonempty else "*"}"'
    if not plain:
        return ir.Lex(body)
    names = "|".join(escape_literal(json.dumps(w, ensure_ascii=False)) for w in sorted(plain))
    small = sum(len(w) for w in plain) <= _TRIE_CHARS
    return ir.LexOp("and", (body, ir.LexOp("not", (f"({names})",))), pointer,
                    as_regex=complement_string(words, nonempty) if small else None)


def complement_string(words: set, nonempty: bool) -> str:
    """A JSON string (quotes included) of plain characters that is none of ``words``."""
    trie: dict = {}
    for w in words:
        if all(0x20 <= ord(c) and c not in '"\\' for c in w):  # others never collide
            node = trie
            for c in w:
                node = node.setdefault(c, {})
            node[""] = {}
    return '"' + _complement_node(trie, root=True, nonempty=nonempty) + '"'


def _complement_node(node: dict, root: bool, nonempty: bool) -> str:
    children = sorted(c for c in node if c)
    cls = "".join("\\" + c if c in "\\]^-[" else c for c in children)
    other = f'[^"\\\\\\x00-\\x1f{cls}]{PLAIN_CHAR}*'
    alts = [other] + [f"{escape_literal(c)}{_complement_node(node[c], False, False)}" for c in children]
    body = alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"
    may_end = "" not in node and not (root and nonempty)
    return f"({body})?" if may_end else body
