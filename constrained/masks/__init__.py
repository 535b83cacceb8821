"""Mask filters that clear exactly the tokens the runtime checks refuse, and their memos."""
