"""ServerArgs validation and the generated command-line flags."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from radixlm.runtime.server_args import ServerArgs

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward


@pytest.mark.parametrize("kwargs, field", [
    ({"schedule_policy": "random"}, "schedule_policy"),
    ({"page_size": 0}, "page_size"),
    ({"max_total_tokens": 1}, "max_total_tokens"),
    ({"mem_fraction": 1.5}, "mem_fraction"),
    ({"chunked_prefill_size": 0}, "chunked_prefill_size"),
    ({"attention_backend": "flash"}, "attention_backend"),
    ({"device": "tpu"}, "device"),
    ({"dtype": "int8"}, "dtype"),
    ({"max_running_requests": "8"}, "max_running_requests"),
    ({"disable_radix_cache": "yes"}, "disable_radix_cache"),
    ({"grammar_compile_timeout_s": 0}, "grammar_compile_timeout_s"),
    ({"grammar_backend": "outlines"}, "grammar_backend"),
    ({"strict_api": "yes"}, "strict_api"),
    ({"chat_template": ""}, "chat_template"),
])
def test_bad_values_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ServerArgs(**kwargs)


def test_unknown_kwarg_is_a_value_error():
    with pytest.raises(ValueError, match="max_tokens_total"):
        ServerArgs.from_kwargs(max_tokens_total=5)


def test_chunk_size():
    assert ServerArgs(chunked_prefill_size=-1).chunk_size is None
    assert ServerArgs(chunked_prefill_size=None).chunk_size is None
    assert ServerArgs(chunked_prefill_size=64).chunk_size == 64


def test_cli_round_trip_covers_every_field():
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(["--max-total-tokens", "1000", "--schedule-policy", "fcfs", "--disable-radix-cache",
                            "--no-enable-jump-forward", "--page-size", "4", "--mem-fraction", "0.5"])
    args = ServerArgs.from_cli_args(ns)
    assert (args.max_total_tokens, args.schedule_policy, args.disable_radix_cache) == (1000, "fcfs", True)
    assert (args.enable_jump_forward, args.page_size, args.mem_fraction) == (False, 4, 0.5)
    assert ServerArgs.from_cli_args(parser.parse_args([])) == ServerArgs()
    flags = {a.dest for a in parser._actions}
    assert {f.name for f in dataclasses.fields(ServerArgs)} <= flags
    with pytest.raises(SystemExit):
        parser.parse_args(["--schedule-policy", "random"])


def _parse(argv: list[str]) -> ServerArgs:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))


def test_sglang_spellings_of_flags_and_values():
    args = _parse(["--model", "/m", "--mem-fraction-static", "0.5", "--tensor-parallel-size", "1",
                   "--dtype", "half", "--attention-backend", "torch_native", "--grammar-backend", "xgrammar"])
    assert (args.model_path, args.mem_fraction, args.tp_size) == ("/m", 0.5, 1)
    assert (args.dtype, args.attention_backend, args.grammar_backend) == ("float16", "torch", "xgrammar")
    assert ServerArgs().grammar_backend == "radixlm"
    with pytest.raises(SystemExit):
        _parse(["--dtype", "int8"])


def test_help_names_each_default_once():
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    for action in parser._actions:
        if action.help and action.dest != "help":
            text = action.help % {"default": action.default}
            assert text.count("default") <= 1, (action.dest, text)
            assert "(default: None)" not in text, action.dest
