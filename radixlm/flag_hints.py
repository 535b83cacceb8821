"""Unknown command-line flags answered with the closest known ones."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence


def unknown_arguments(unknown: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """``unrecognized arguments: --max-token 5 (did you mean --max-tokens?)``: argparse's message with
    the closest flags of ``parser`` for each unknown flag."""
    known = [f for f in parser._option_string_actions if f.startswith("--")]
    hints = []
    for arg in unknown:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], known, n=2, cutoff=0.6)
            hints += [f"did you mean {' or '.join(close)}?"] if close else []
    return f"unrecognized arguments: {' '.join(unknown)}" + (f" ({'; '.join(hints)})" if hints else "")
