"""``python -m radixlm.launch_server ARGS``: the same as ``radixlm serve ARGS``.

SGLang starts its server with ``python -m sglang.launch_server --model-path ...``; this module
takes the same command with ``radixlm`` in place of ``sglang`` (one parser: ``radixlm serve``'s).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from radixlm.__main__ import main as cli_main


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``radixlm serve`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    return cli_main(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
