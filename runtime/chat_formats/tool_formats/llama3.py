"""Llama 3.x JSON calls: ``{"name": "f", "parameters": {...}}``, optionally after ``<|python_tag|>``.

Several calls are separated by ``;``. The Llama 3.1/3.3 templates render an assistant call as
``{"name": "f", "parameters": {...}}`` and ask the model for that shape; ``arguments`` is
accepted too, as the family's parsers do.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, ToolFormat

PYTHON_TAG = "<|python_tag|>"
CALL_OPEN = '{"name": '


class Llama3Format(ToolFormat):
    """Bare JSON call objects (the output starts one with ``{"name": ``).

    A call has no wrapper: its own head opens it (``open`` empty, ``forced_head``), or the
    ``<|python_tag|>`` special token, so the openers are set here."""

    name = "llama3"
    syntax = ("Llama 3.x JSON calls: ``{\"name\": \"f\", \"parameters\": {...}}``, optionally after "
              "``<|python_tag|>``.")
    aliases = ("llama", "llama31", "llama33", "llama3_json", "llama4_json")
    layout = CallLayout("", None, CALL_OPEN + '{name}, "parameters": {args}}', gap="; ", many=True, forced_head=True,
                        also_open=(PYTHON_TAG,), alt_args="arguments")
    openers = (PYTHON_TAG, CALL_OPEN)
    open_marker = CALL_OPEN
    bare_json_calls = True  # Qwen2.5(-Coder) / Llama 3.x write bare call objects under auto

    @property
    def auto_openers(self) -> tuple[str, ...]:
        return (CALL_OPEN, PYTHON_TAG)  # <|python_tag|> is a special token: it never spells CALL_OPEN
