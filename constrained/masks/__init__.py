"""Mask filters that refuse, on every token, exactly what the runtime checks would refuse, and their memos."""
