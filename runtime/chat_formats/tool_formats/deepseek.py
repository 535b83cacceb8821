"""DeepSeek's tool-call layouts, one per model generation: V3 / R1, V3.1 and V3.2 (DSML).

DeepSeek V3 / R1: calls in a ``<｜tool▁calls▁begin｜>`` section, arguments in a JSON code block.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
(repeated) ``<｜tool▁calls▁end｜>``. The markers use the fullwidth bar and the ``▁`` of the vocabulary.

DeepSeek V3.1: the V3 section markers, with ``NAME<｜tool▁sep｜>{json}`` per call.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``.

DeepSeek V3.2 (DSML): XML-style invocations in a ``<｜DSML｜function_calls>`` block.

``<｜DSML｜function_calls>\\n<｜DSML｜invoke name="NAME">\\n<｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>\\n``
... ``</｜DSML｜invoke>\\n</｜DSML｜function_calls>``. ``string="true"`` values are raw text, the others
JSON (the template writes ``value | tojson`` for them), as V3.2's own template renders earlier calls.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, Params, ToolFormat

SECTION_OPEN, SECTION_CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_OPEN, CALL_CLOSE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


class DeepSeekV3Format(ToolFormat):
    """DeepSeek V3 and R1 (``function<｜tool▁sep｜>name`` and a ```json block)."""

    name = "deepseekv3"
    syntax = ("DeepSeek V3 / R1: calls in a ``<｜tool▁calls▁begin｜>`` section, arguments in a JSON code "
              "block.")
    aliases = ("deepseek_v3", "deepseek-r1", "deepseekr1")
    layout = CallLayout(SECTION_OPEN, SECTION_CLOSE, CALL_OPEN + "function" + SEP + "{name}\n```json\n{args}\n```" + CALL_CLOSE,
                        gap="\n", many=True, forced_head=True, call_end=CALL_CLOSE)


class DeepSeekV31Format(ToolFormat):
    """DeepSeek V3.1 (name, separator, JSON arguments)."""

    name = "deepseekv31"
    syntax = "DeepSeek V3.1: the V3 section markers, with ``NAME<｜tool▁sep｜>{json}`` per call."
    aliases = ("deepseek_v31",)
    layout = CallLayout(SECTION_OPEN, SECTION_CLOSE, CALL_OPEN + "{name}" + SEP + "{args}" + CALL_CLOSE,
                        many=True, forced_head=True, call_end=CALL_CLOSE)


DSML = "｜DSML｜"


class DeepSeekV32Format(ToolFormat):
    """DSML invocations, several per block."""

    name = "deepseekv32"
    syntax = "DeepSeek V3.2 (DSML): XML-style invocations in a ``<｜DSML｜function_calls>`` block."
    arguments_layout = 'DSML parameters'
    aliases = ("deepseek_v32",)
    layout = CallLayout(f"<{DSML}function_calls>", f"</{DSML}function_calls>",
                        f'\n<{DSML}invoke name="{{name}}">\n{{args}}</{DSML}invoke>',
                        Params(f'<{DSML}parameter name="{{key}}" string="{{string}}">', f"</{DSML}parameter>\n",
                               key=r'[^<>\n"]+', read="flag"),
                        trail="\n", many=True)
