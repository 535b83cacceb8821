"""How the command line treats flags beyond its own: usage errors in one line, and SGLang's and vLLM's flags.

A usage error is ``radixlm: error: MESSAGE`` and one line naming ``PROG --help`` (exit code 2),
instead of argparse's whole usage text; an unknown flag is answered with the closest known ones
(``did you mean --max-total-tokens?``).

SGLang and vLLM launch flags that cannot apply to radixlm are accepted, each with a one-line
notice, or refused with a one-line usage error saying why. An SGLang launch command
(``python -m sglang.launch_server --model-path ... --trust-remote-code``) should start radixlm
unchanged, but a flag must never be swallowed silently: each one listed here parses (with its
value, if it takes one) and :func:`notices` turns it into one line saying why it has no effect.
Flags that would change results if ignored (``--nnodes``, LoRA, pipeline parallelism) are
:data:`REFUSED_FLAGS`: usage errors naming the reason. ``--quantization`` is a real flag
(``ServerArgs.quantization``): ``int8`` is implemented, any other value is an error naming the field.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn


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


# ---- SGLang's and vLLM's flags -------------------------------------------------------------------

NO_TORCH_COMPILE = "radixlm runs no torch.compile"

# flag -> (takes a value, why it has no effect here)
IGNORED_FLAGS: dict[str, tuple[bool, str]] = {
    "--trust-remote-code": (False, "radixlm runs no code from a checkpoint: Llama, Mistral, Qwen2, Qwen3 and "
                                   "Gemma 3 are built in"),
    "--enable-metrics": (False, "/metrics is always on"),
    "--enable-cache-report": (False, "cached token counts are always reported (meta_info.cached_tokens, "
                                     "usage.prompt_tokens_details)"),
    "--skip-server-warmup": (False, "radixlm runs no warm-up request"),
    "--enable-torch-compile": (False, NO_TORCH_COMPILE),
    "--torch-compile-max-bs": (True, NO_TORCH_COMPILE),
    "--disable-overlap-schedule": (False, "radixlm's scheduler does not overlap steps"),
    "--schedule-conservativeness": (True, "admission keeps its own reserve for running requests' future tokens"),
    "--stream-interval": (True, "streams carry every decoded token"),
    "--watchdog-timeout": (True, "radixlm has no step watchdog"),
    "--load-format": (True, "the format is read from --model-path (*.safetensors or a .gguf file)"),
    "--revision": (True, "give the revision in the hub id: --model-path ORG/NAME@REVISION"),
    "--download-dir": (True, "hub downloads go to the Hugging Face cache (set HF_HOME or HF_HUB_CACHE)"),
    "--tokenizer-mode": (True, "the tokenizer is always tokenizer.json (the fast tokenizer)"),
    "--base-gpu-id": (True, "choose the GPU with --device cuda:N"),
    "--disable-custom-all-reduce": (False, "tensor parallelism uses torch.distributed's all-reduce"),
    "--decode-log-interval": (True, "radixlm logs one line per request, not per decode interval"),
    "--log-requests-level": (True, "--log-requests logs one line per request at one level of detail"),
    "--log-level-http": (True, "HTTP logging follows --log-level"),
    "--show-time-cost": (False, "step timers are in /get_server_info's stats.timers"),
    "--disable-outlines-disk-cache": (False, "compiled constraints are cached in memory only"),
    # vLLM's
    "--enable-auto-tool-choice": (False, "tool_choice auto is always on (the format: --tool-call-parser, or "
                                         "detected from the chat template)"),
    "--enable-prefix-caching": (False, "the radix cache is always on (--disable-radix-cache turns it off)"),
    "--enable-chunked-prefill": (False, "long prefills are always chunked (--chunked-prefill-size)"),
    "--disable-log-requests": (False, "use --no-log-requests"),
    "--disable-log-stats": (False, "radixlm logs no periodic stats (they are on /metrics)"),
    "--swap-space": (True, "radixlm swaps no KV to host memory: a preempted request is recomputed"),
    "--block-size": (True, "KV slots are single tokens (--page-size sets the radix-cache granularity)"),
    "--distributed-executor-backend": (True, "tensor parallelism runs one process per rank (torch.distributed)"),
    "--uvicorn-log-level": (True, "HTTP logging follows --log-level"),
}
# Flags whose effect radixlm cannot give: a one-line usage error saying why (never silently ignored).
REFUSED_FLAGS: dict[str, tuple[bool, str]] = {
    "--pipeline-parallel-size": (True, "pipeline parallelism is not implemented; use --tp-size"),
    "--enable-lora": (False, "LoRA adapters are not supported"),
    "--lora-modules": (True, "LoRA adapters are not supported"),
    "--max-lora-rank": (True, "LoRA adapters are not supported"),
    "--lora-paths": (True, "LoRA adapters are not supported"),
    "--limit-mm-per-prompt": (True, "radixlm serves text-only models"),
    "--mm-processor-kwargs": (True, "radixlm serves text-only models"),
    "--task": (True, "radixlm serves generation and embeddings of any model on the same routes; no task to pick"),
    "--nnodes": (True, "radixlm runs on one node (--tp-size and --dp-size split work on it)"),
    "--node-rank": (True, "radixlm runs on one node (--tp-size and --dp-size split work on it)"),
    "--rope-scaling": (True, "RoPE scaling is read from the checkpoint's config.json; edit it there"),
    "--hf-overrides": (True, "the model config is the checkpoint's config.json; edit it there"),
    "--json-model-override-args": (True, "the model config is the checkpoint's config.json; edit it there"),
}
# The value of a refused flag that asks for what radixlm does anyway: accepted silently.
HARMLESS_VALUES = {"--pipeline-parallel-size": "1", "--nnodes": "1", "--node-rank": "0"}
NOTICES_DEST = "ignored_sglang_flags"


class _Ignored(argparse.Action):
    """Records ``(flag, value)`` in ``namespace.ignored_sglang_flags`` instead of setting a field."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        seen = list(getattr(namespace, NOTICES_DEST, None) or [])
        seen.append((option_string or self.option_strings[0], values))
        setattr(namespace, NOTICES_DEST, seen)


class _Refused(argparse.Action):
    """A usage error (one line, exit code 2) naming the flag and why radixlm cannot honour it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        flag = option_string or self.option_strings[0]
        if HARMLESS_VALUES.get(flag) != values:
            parser.error(f"{flag} cannot be honoured here: {REFUSED_FLAGS[flag][1]}")


def add_ignored_flags(parser: argparse.ArgumentParser) -> None:
    """Register every flag of :data:`IGNORED_FLAGS` and :data:`REFUSED_FLAGS` the parser does not
    already own (a flag radixlm implements wins over its entry here)."""
    group = parser.add_argument_group("SGLang and vLLM flags accepted without effect (each prints a notice)")
    owned = set(parser._option_string_actions)
    for flag, (takes_value, reason) in IGNORED_FLAGS.items():
        if flag in owned:
            continue
        group.add_argument(flag, action=_Ignored, nargs=None if takes_value else 0, dest=NOTICES_DEST,
                           default=[], metavar="VALUE" if takes_value else None, help=reason)
    refused = parser.add_argument_group("SGLang and vLLM flags refused (a usage error saying why)")
    for flag, (takes_value, reason) in REFUSED_FLAGS.items():
        if flag not in owned:
            refused.add_argument(flag, action=_Refused, nargs=None if takes_value else 0, dest=argparse.SUPPRESS,
                                 metavar="VALUE" if takes_value else None, help=reason)


def notices(ns: argparse.Namespace) -> list[str]:
    """One line per ignored flag the user gave, in the order given."""
    lines = []
    for flag, value in getattr(ns, NOTICES_DEST, None) or []:
        shown = f"{flag} {value}" if isinstance(value, str) else flag
        lines.append(f"radixlm: notice: {shown} has no effect: {IGNORED_FLAGS[flag][1]}")
    return lines

