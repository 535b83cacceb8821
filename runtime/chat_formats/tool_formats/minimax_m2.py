"""MiniMax-M2: XML invocations in a ``<minimax:tool_call>`` block.

``<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="KEY">VALUE</parameter>\\n...</invoke>\\n``
(several invocations) ``</minimax:tool_call>``. Values are raw text for strings and JSON otherwise
(the template writes ``v | tojson`` for non-strings), read back by the tool's schema.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, Params, ToolFormat


class MiniMaxM2Format(ToolFormat):
    """MiniMax-M2 invocations, several per block."""

    name = "minimax_m2"
    syntax = "MiniMax-M2: XML invocations in a ``<minimax:tool_call>`` block."
    arguments_layout = 'XML parameters'
    aliases = ("minimax-m2",)
    layout = CallLayout("<minimax:tool_call>", "</minimax:tool_call>", '<invoke name="{name}">\n{args}</invoke>\n',
                        Params('<parameter name="{key}">', "</parameter>\n", key=r'[^<>\n"]+'), lead="\n", many=True)
    # the opening tags' fixed text too (the layout's markers are its whole tags, without slots)
    inner_markers = ("<invoke name=", "</invoke>", "<parameter name=", "</parameter>")
