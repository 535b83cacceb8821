"""The ``radixlm`` command line: ``radixlm serve``, ``radixlm generate "prompt"``, ``radixlm --help``.

Each subcommand is one ``add_<name>_parser(subparsers)`` function that registers its flags and
sets ``func``; :data:`SUBCOMMANDS` lists them, so a new subcommand is one function and one entry.
Heavy imports (torch, the engine) happen inside the subcommand, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Sequence

from radixlm import __version__

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _server_args(parser: argparse.ArgumentParser, ns: argparse.Namespace):
    from radixlm.runtime.server_args import ServerArgs

    try:
        return ServerArgs.from_cli_args(ns)
    except ValueError as e:
        parser.error(str(e))


def _make_engine(server_args):
    from radixlm.runtime.engine import Engine

    return Engine(**dataclasses.asdict(server_args))


# ---------------------------------------------------------------------- serve


def add_serve_parser(subparsers: argparse._SubParsersAction) -> None:
    from radixlm.runtime.server_args import ServerArgs
    from radixlm.runtime.server_state import DEFAULT_MAX_BODY_BYTES

    p = subparsers.add_parser("serve", help="run the HTTP server (native + OpenAI-compatible API)",
                              description="Serve a model over HTTP: SGLang-native /generate and the "
                                          "OpenAI-compatible /v1 API. SIGINT/SIGTERM shut down gracefully.")
    http = p.add_argument_group("HTTP")
    http.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    http.add_argument("--port", type=int, default=30000, help="TCP port; 0 picks a free one (default: %(default)s)")
    http.add_argument("--api-key", default=None,
                      help="require 'Authorization: Bearer KEY' on every route but /health")
    http.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                      help="reject request bodies larger than this with 413 (default: %(default)s)")
    http.add_argument("--served-model-name", default=None,
                      help="the model name of the OpenAI API (default: the model directory's name)")
    http.add_argument("--graceful-shutdown-s", type=float, default=30.0,
                      help="on SIGINT/SIGTERM, seconds in-flight requests get before they are aborted "
                           "(default: %(default)s)")
    http.add_argument("--log-requests", action=argparse.BooleanOptionalAction, default=True,
                      help="log one INFO line per request")
    ServerArgs.add_cli_args(p.add_argument_group("engine (ServerArgs)"))
    p.set_defaults(func=cmd_serve, parser=p)


def cmd_serve(args: argparse.Namespace) -> int:
    from radixlm.runtime.server import serve
    from radixlm.runtime.server_state import ServerConfig

    server_args = _server_args(args.parser, args)
    try:
        config = ServerConfig(host=args.host, port=args.port, api_key=args.api_key,
                              max_body_bytes=args.max_body_bytes, served_model_name=args.served_model_name,
                              graceful_shutdown_s=args.graceful_shutdown_s)
    except ValueError as e:
        args.parser.error(str(e))
    logging.basicConfig(level=server_args.log_level.upper(), format=LOG_FORMAT)
    logging.getLogger("radixlm.server").setLevel(logging.INFO)  # start-up and shutdown lines
    if not args.log_requests:
        logging.getLogger("radixlm.server.requests").setLevel(logging.WARNING)
    engine = _make_engine(server_args)
    try:
        _run(serve(engine, config))
    finally:
        engine.shutdown()
    return 0


def _run(coro) -> None:
    """Run on uvloop when it is installed (the server's event loop), else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
        return
    uvloop.run(coro)


# ---------------------------------------------------------------------- generate


def add_generate_parser(subparsers: argparse._SubParsersAction) -> None:
    from radixlm.runtime.server_args import ServerArgs

    p = subparsers.add_parser("generate", help="generate once from a prompt and print the text")
    p.add_argument("prompt", help="the prompt text")
    p.add_argument("--max-new-tokens", type=int, default=64, help="(default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=1.0, help="(default: %(default)s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    p.add_argument("--regex", default=None, help="constrain the output to this regex")
    p.add_argument("--json-schema", default=None, help="constrain the output to this JSON schema (JSON text)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user turn of the chat template")
    p.add_argument("--stream", action="store_true", help="print text as it is generated")
    p.add_argument("--show-meta", action="store_true", help="print meta_info as JSON to stderr")
    ServerArgs.add_cli_args(p.add_argument_group("engine (ServerArgs)"))
    p.set_defaults(func=cmd_generate, parser=p)


def cmd_generate(args: argparse.Namespace) -> int:
    from radixlm.runtime.sampling_params import SamplingParams

    try:
        params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                top_p=args.top_p, seed=args.seed, stop=args.stop or [], regex=args.regex,
                                json_schema=args.json_schema)
    except ValueError as e:
        args.parser.error(str(e))
    server_args = _server_args(args.parser, args)
    logging.basicConfig(level=server_args.log_level.upper(), format=LOG_FORMAT)
    engine = _make_engine(server_args)
    try:
        prompt = args.prompt
        if args.chat:
            prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        if args.stream:
            meta = {}
            for chunk in engine.generate(prompt, sampling_params=params.to_dict(), stream=True):
                sys.stdout.write(chunk["text"])
                sys.stdout.flush()
                meta = chunk["meta_info"]
            sys.stdout.write("\n")
        else:
            result = engine.generate(prompt, sampling_params=params.to_dict())
            print(result["text"])
            meta = result["meta_info"]
        if args.show_meta:
            print(json.dumps(meta), file=sys.stderr)
    finally:
        engine.shutdown()
    return 0


# ---------------------------------------------------------------------- entry point

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [add_serve_parser, add_generate_parser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="radixlm", description="radixlm: an LLM serving engine with "
                                     "RadixAttention, constrained decoding and an agent DSL.")
    parser.add_argument("--version", action="version", version=f"radixlm {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen subcommand; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
