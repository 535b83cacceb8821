"""Tool-call markers no parser reads: found in a chat template that detection gave no family.

A template that renders tool calls but whose markers match no family would silently get the
default (``hermes``), forcing the model into a syntax it never saw. :func:`unparsed_markers` lists
the marker-like texts such a template writes around calls; the registry logs them with the
``--tool-call-parser`` choices, so the operator can pick the right one or knows none fits.
"""

from __future__ import annotations

import logging
import re

logger = logging.getLogger("radixlm.chat_formats")

# marker-like texts around calls: <|tool_call>, <tool_calls>, [TOOL_CALLS], <|START_ACTION|>, >>>
_MARKER = re.compile(r"<\|?/?[A-Za-z_:｜▁]*(?:tool|function|action|call)[A-Za-z_▁]*\|?>|\[/?TOOL[A-Z_]*\]|"
                     r">>>|Action:(?=\\n```json)|<\|[A-Z_]*(?:ACTION|TOOL)[A-Z_]*\|>", re.I)
# families we know by their markers but do not parse, named in the warning
KNOWN = (("Gemma 4", "<|tool_call>"), ("Command R / R+", "Action:"),
         ("MiniMax-M1", "<tool_calls>"))
_SHOWN = 8


def renders_calls(template: str) -> bool:
    """Whether the template writes assistant tool calls at all."""
    return "tool_calls" in template or "tool_call" in template


def unparsed_markers(template: str) -> list[str]:
    """The distinct marker-like texts of a template (first seen first, at most a few)."""
    found = list(dict.fromkeys(m.group(0) for m in _MARKER.finditer(template)))
    return found[:_SHOWN]


def warn_unparsed(template: str | None, default: str, choices: list[str]) -> bool:
    """Log a warning when ``template`` renders tool calls in markers no parser matched (the caller
    saw detection fall back to ``default``); True when it warned."""
    if not template or not renders_calls(template):
        return False
    markers = unparsed_markers(template)
    family = next((name for name, marker in KNOWN if marker in template), None)
    what = f"{family}'s tool-call syntax" if family else "tool calls"
    shown = ", ".join(repr(m) for m in markers) or "no marker any parser knows"
    logger.warning("the chat template writes %s with markers no tool-call parser reads (%s); using %r. "
                   "Set --tool-call-parser to one of: %s", what, shown, default, ", ".join(choices))
    return True
