"""The tool-call formats by name, and detection of a checkpoint's format from its chat template.

Names follow SGLang's / vLLM's ``--tool-call-parser`` names. Detection looks for each family's
markers in the template source, most specific first (several families reuse ``<tool_call>``);
a template with none of them gets ``hermes``, with a warning when it renders tool calls in
markers of its own (:mod:`radixlm.runtime.chat_formats.tool_formats.unparsed`).
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.format_registry import FormatRegistry
from radixlm.runtime.chat_formats.tool_formats.base import ToolFormat
from radixlm.runtime.chat_formats.tool_formats.cohere import CohereFormat, CommandRFormat
from radixlm.runtime.chat_formats.tool_formats.deepseekv3 import DeepSeekV3Format
from radixlm.runtime.chat_formats.tool_formats.deepseekv31 import DeepSeekV31Format
from radixlm.runtime.chat_formats.tool_formats.deepseekv32 import DeepSeekV32Format
from radixlm.runtime.chat_formats.tool_formats.functionary import FunctionaryV31Format
from radixlm.runtime.chat_formats.tool_formats.functionary_v32 import FunctionaryV32Format
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
from radixlm.runtime.chat_formats.tool_formats.qwen3_coder import Qwen3CoderFormat
from radixlm.runtime.chat_formats.tool_formats.seed_oss import SeedOssFormat
from radixlm.runtime.chat_formats.tool_formats.unparsed import warn_unparsed

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
