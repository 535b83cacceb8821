"""Reasoning formats: splitting a reasoning model's output into ``reasoning_content`` and ``content``."""
