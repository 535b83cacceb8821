r"""Regex text without parsing: a literal escaped for the core's regex syntax (``escape_literal``),
and ``\d`` and ``\w`` in a ``regex`` constraint meaning ASCII (``regex_text``).

``\d`` and ``\w`` in a ``regex`` constraint mean ASCII, as in JSON Schema's ECMA-262 patterns.

The ``regex`` constraint is written in Rust ``regex`` syntax, where ``\d`` and ``\w`` are Unicode
classes (``\d`` matches ``۶``, ``᭖`` and ``𝟯``). Users write ``(\d{1,3}\.){3}\d{1,3}`` for an IP
address and expect ``[0-9]``, as ``pattern`` in a JSON schema gives them. So before compiling, the
Perl classes are spelled out: ``\d`` -> ``[0-9]``, ``\w`` -> ``[0-9A-Za-z_]`` and their negations,
inside a bracket class too (Rust's nested classes). ``\p{Nd}`` still names Unicode digits.
"""

from __future__ import annotations

_META = set("\\.+*?()|[]{}^$#&-~")


def escape_literal(text: str) -> str:
    """Escape ``text`` for outlines-core's (Rust) regex syntax: meta characters only."""
    out = []
    for c in text:
        if c in _META:
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "".join(out)


_CLASSES = {"d": "0-9", "w": "0-9A-Za-z_"}


def ascii_classes(regex: str) -> str:
    r"""``regex`` with ``\d``, ``\D``, ``\w``, ``\W`` replaced by their ASCII classes (escapes kept)."""
    out: list[str] = []
    depth = 0  # bracket-class nesting
    i = 0
    while i < len(regex):
        ch = regex[i]
        if ch == "\\" and i + 1 < len(regex):
            nxt = regex[i + 1]
            if nxt.lower() in _CLASSES:
                body = _CLASSES[nxt.lower()]
                negate = nxt.isupper()
                if depth:  # inside [...]: a range, or a nested negated class
                    out.append(f"[^{body}]" if negate else body)
                else:
                    out.append(f"[^{body}]" if negate else f"[{body}]")
            else:
                out.append(regex[i:i + 2])
            i += 2
            continue
        if ch == "[":
            depth += 1
            out.append(ch)
            # a ']' right after '[' or '[^' is a literal, not the class's end
            for lead in ("^", "]"):
                if regex.startswith(lead, i + 1):
                    out.append(lead)
                    i += 1
        elif ch == "]" and depth:
            depth -= 1
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)
