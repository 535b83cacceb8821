"""Role prefixes and suffixes derived from a model's chat template by rendering probe conversations.

``s += user("hi")`` must append exactly the text the model's own template would render for that
turn. Instead of keeping a table of known templates, we render a conversation with and without one
more message holding a marker and take the difference: the text before the marker is the role's
prefix, the text after it the suffix. The first message is probed separately because templates
often open the conversation differently (a BOS token, an implicit system prompt).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

ROLES = ("system", "user", "assistant")
_MARK = "\u2063RADIXLM_ROLE_PROBE\u2063"

Renderer = Callable[[list[dict]], str]


@dataclass(frozen=True)
class RoleTemplate:
    """Per-role text around a message's content.

    ``prefixes[role]`` / ``suffixes[role]`` apply to a message after the first;
    ``first_prefixes[role]`` to a message that opens the conversation.
    """

    prefixes: dict[str, str]
    suffixes: dict[str, str]
    first_prefixes: dict[str, str]
    source: str = "chat_template"

    def prefix(self, role: str, first: bool = False) -> str:
        _check_role(role)
        return (self.first_prefixes if first else self.prefixes)[role]

    def suffix(self, role: str) -> str:
        _check_role(role)
        return self.suffixes[role]

    @classmethod
    def from_renderer(cls, render: Renderer) -> RoleTemplate:
        """Probe ``render(messages) -> str`` (no generation prompt); fall back per role to ChatML."""
        fallback = cls.chatml()
        prefixes, suffixes, first = {}, {}, {}
        histories = {"system": [], "user": [{"role": "system", "content": "S"}],
                     "assistant": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}
        for role in ROLES:
            split = _probe(render, histories[role], role) or _probe(render, histories[role][1:], role)
            if split is None:
                split = (fallback.prefixes[role], fallback.suffixes[role])
            prefixes[role], suffixes[role] = split
            opening = _probe(render, [], role)
            first[role] = opening[0] if opening is not None else prefixes[role]
        # The system message is always probed as the opener; a later one uses the same text.
        return cls(prefixes, suffixes, first)

    @classmethod
    def from_tokenizer(cls, tokenizer) -> RoleTemplate:
        """Probe ``tokenizer.apply_chat_template``."""

        def render(messages: list[dict]) -> str:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=False)

        return cls.from_renderer(render)

    @classmethod
    def chatml(cls) -> RoleTemplate:
        """ChatML, used when no chat template is available (e.g. a remote server's model)."""
        pre = {r: f"<|im_start|>{r}\n" for r in ROLES}
        suf = {r: "<|im_end|>\n" for r in ROLES}
        return cls(pre, suf, dict(pre), source="chatml-default")


def _probe(render: Renderer, history: list[dict], role: str) -> tuple[str, str] | None:
    """(prefix, suffix) of ``role`` appended after ``history``, or None if the template objects."""
    try:
        base = render(history) if history else ""
        full = render(history + [{"role": role, "content": _MARK}])
    except Exception:  # a template may raise for orders it does not support
        return None
    if not full.startswith(base) or full.count(_MARK) != 1:
        return None
    prefix, suffix = full[len(base):].split(_MARK)
    return prefix, suffix


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")


class LazyRoleTemplate:
    """A ``RoleTemplate`` built on first use, once, even with many interpreter threads asking."""

    def __init__(self, load: Callable[[], RoleTemplate]):
        self._load = load
        self._template: RoleTemplate | None = None
        self._lock = threading.Lock()

    def get(self) -> RoleTemplate:
        with self._lock:
            if self._template is None:
                self._template = self._load()
            return self._template
