"""Usage errors in one line: unknown flags answered with the closest known ones, then a pointer to
``--help`` instead of argparse's whole usage text."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import NoReturn


class OneLineErrorParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are ``radixlm: error: MESSAGE`` and one line naming
    ``PROG --help`` (exit code 2); subparsers made by ``add_subparsers`` inherit the class."""

    def error(self, message: str) -> NoReturn:
        print(f"radixlm: error: {message}", file=sys.stderr)
        print(f"radixlm: '{self.prog} --help' lists the flags", file=sys.stderr)
        sys.exit(2)


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
