"""The tool-call formats by name, and detection of a checkpoint's format from its chat template.

Names follow SGLang's / vLLM's ``--tool-call-parser`` names. Detection looks for each family's
markers in the template source, most specific first (several families reuse ``<tool_call>``);
a template with none of them gets ``hermes``, with a warning when it renders tool calls in
markers of its own (below).

Tool-call markers no parser reads: found in a chat template that detection gave no family.

A template that renders tool calls but whose markers match no family would silently get the
default (``hermes``), forcing the model into a syntax it never saw. :func:`unparsed_markers` lists
the marker-like texts such a template writes around calls; the registry logs them with the
``--tool-call-parser`` choices, so the operator can pick the right one or knows none fits.
"""

from __future__ import annotations

import logging
import re

from radixlm.runtime.chat_formats.format_registry import FormatRegistry
from radixlm.runtime.chat_formats.tool_formats.base import ToolFormat
from radixlm.runtime.chat_formats.tool_formats.cohere import CohereFormat, CommandRFormat
from radixlm.runtime.chat_formats.tool_formats.deepseek import (
    DeepSeekV3Format,
    DeepSeekV31Format,
    DeepSeekV32Format,
)
from radixlm.runtime.chat_formats.tool_formats.functionary import FunctionaryV31Format, FunctionaryV32Format
from radixlm.runtime.chat_formats.tool_formats.gemma4 import Gemma4Format
from radixlm.runtime.chat_formats.tool_formats.glm45 import Glm45Format
from radixlm.runtime.chat_formats.tool_formats.gpt_oss import GptOssFormat
from radixlm.runtime.chat_formats.tool_formats.granite import GraniteFormat
from radixlm.runtime.chat_formats.tool_formats.hermes import HermesFormat
from radixlm.runtime.chat_formats.tool_formats.kimi_k2 import KimiK2Format
from radixlm.runtime.chat_formats.tool_formats.llama3 import Llama3Format
from radixlm.runtime.chat_formats.tool_formats.minimax_m2 import MiniMaxM2Format
from radixlm.runtime.chat_formats.tool_formats.mistral import MistralFormat
from radixlm.runtime.chat_formats.tool_formats.pythonic import PythonicFormat
from radixlm.runtime.chat_formats.tool_formats.qwen3_coder import Qwen3CoderFormat, SeedOssFormat

# (family, markers that must all be in the template), most specific first
_DETECT: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpt_oss", ("<|channel|>", "<|call|>")),
    ("kimi_k2", ("<|tool_calls_section_begin|>",)),
    ("deepseekv32", ("｜DSML｜", "function_calls>")),  # the template joins '<' + dsml_token + 'function_calls>'
    ("deepseekv3", ("<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>' + tool['type']")),
    ("deepseekv3", ("<｜tool▁calls▁begin｜>", "' + tool['type'] + '<｜tool▁sep｜>")),
    ("deepseekv3", ("<｜tool▁calls▁begin｜>", "function<｜tool▁sep｜>")),
    ("deepseekv31", ("<｜tool▁calls▁begin｜>",)),
    ("mistral", ("[TOOL_CALLS]",)),
    ("glm45", ("<arg_key>",)),
    ("minimax_m2", ("<minimax:tool_call>",)),
    ("seed_oss", ("<seed:tool_call>",)),
    ("cohere", ("<|START_ACTION|>",)),
    ("command_r", ("Action:", "```json", "tool_name")),
    ("gemma4", ("<|tool_call>call:",)),
    ("qwen3_coder", ("<function=", "<parameter=")),
    ("granite", ("<|tool_call|>",)),
    ("pythonic", ("[func_name1(",)),
    ("functionary_v31", ("<|start_header_id|>", "<function=", "</function>")),
    ("functionary_v32", ("<|start_header_id|>", "'>>>all\\n'", "'>>>' + tool_call")),
    ("llama3", ("<|start_header_id|>", '"parameters": ')),
    ("hermes", ("<tool_call>",)),
)

REGISTRY: FormatRegistry[ToolFormat] = FormatRegistry("tool_call_parser", (
    HermesFormat(), Qwen3CoderFormat(), Llama3Format(), PythonicFormat(), MistralFormat(),
    DeepSeekV3Format(), DeepSeekV31Format(), DeepSeekV32Format(), Glm45Format(), KimiK2Format(), GraniteFormat(), GptOssFormat(),
    MiniMaxM2Format(), SeedOssFormat(), CohereFormat(), FunctionaryV31Format(), Gemma4Format(),
    CommandRFormat(), FunctionaryV32Format()),
    _DETECT, default="hermes")
FORMATS, ALIASES, DEFAULT = REGISTRY.formats, REGISTRY.aliases, REGISTRY.default
names, get_format, detect_name = REGISTRY.names, REGISTRY.get, REGISTRY.detect_name


def resolve(parser: str | None, chat_template: str | None) -> ToolFormat | None:
    """The ``--tool-call-parser`` format if set, else the one detected from the chat template; a
    template whose call markers no family matches gets the default, with a warning naming them."""
    if not parser and REGISTRY.detected(chat_template) is None:
        warn_unparsed(chat_template, DEFAULT, names())
    return REGISTRY.resolve(parser, chat_template)


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
