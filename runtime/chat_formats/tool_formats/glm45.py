"""GLM-4.5 / 4.6 / 4.7: ``<tool_call>NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n...</tool_call>``.

Values are raw text for strings and JSON otherwise (the template writes ``v | tojson`` for
non-strings), read back by the tool's schema as the Qwen3-Coder values are. GLM-4.7 may write the
first key on the name's line: whitespace between the layout's pieces is read as optional.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, Params, ToolFormat


class Glm45Format(ToolFormat):
    """Key/value tags, one function per ``<tool_call>`` block."""

    name = "glm45"
    syntax = ("GLM-4.5 / 4.6 / 4.7: "
              "``<tool_call>NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n...</tool_call>``.")
    arguments_layout = 'key/value tags'
    aliases = ("glm4_moe", "glm46", "glm47", "glm", "glm4")
    layout = CallLayout("<tool_call>", "</tool_call>", "{name}\n{args}",
                        Params("<arg_key>{key}</arg_key>\n<arg_value>", "</arg_value>\n"), gap="\n")
