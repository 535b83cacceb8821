"""Tool-call formats, one module per model family, and the registry that maps names to them.

A format knows how its family writes calls (parse and streaming parse), how call ids look, and
what the generation needs: the marker that opens a call (the ``auto`` stop string), the text that
wraps a forced call, and the constraint for the call body in the family's own layout. A family
declares that layout once (:class:`~radixlm.runtime.chat_formats.tool_formats.base.CallLayout`);
the rest is derived from it.
See :mod:`radixlm.runtime.chat_formats.tool_formats.registry`.
"""
