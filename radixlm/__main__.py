"""The ``radixlm`` command line: ``radixlm serve``, ``radixlm generate "prompt"``, ``radixlm pull MODEL``,
``radixlm list``, ``radixlm --help``.

Each subcommand is one ``add_<name>_parser(subparsers)`` function that registers its flags and
sets ``func``; :data:`SUBCOMMANDS` lists them, so a new subcommand is one function and one entry.
Heavy imports (torch, the engine) happen inside the subcommand, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from radixlm import __version__
from radixlm.flags import OneLineErrorParser, unknown_arguments

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _server_args(parser: argparse.ArgumentParser, ns: argparse.Namespace):
    from radixlm.runtime.server_args import ServerArgs

    try:
        return ServerArgs.from_cli_args(ns)
    except ValueError as e:
        parser.error(str(e))


def _make_engine(server_args):
    """The engine, or one ``radixlm: error: ...`` line and exit code 2 when it cannot load."""
    from radixlm.startup import StartupError, load_engine

    try:
        return load_engine(server_args)
    except StartupError as e:
        _fail(e)


def _fail(error: Exception) -> NoReturn:
    """One ``radixlm: error:`` line on stderr, then exit code 2 (a usage error's code)."""
    print(f"radixlm: error: {error}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------- serve


def add_serve_parser(subparsers: argparse._SubParsersAction) -> None:
    from radixlm.flags import add_ignored_flags
    from radixlm.runtime.server.transport.state import DEFAULT_MAX_BODY_BYTES
    from radixlm.runtime.server_args import ServerArgs

    p = subparsers.add_parser("serve", help="run the HTTP server (native + OpenAI-compatible API)",
                              description="Serve a model over HTTP: SGLang-native /generate and the "
                                          "OpenAI-compatible /v1 API. SIGINT/SIGTERM shut down gracefully.")
    p.add_argument("model", nargs="?", default=None, metavar="MODEL",
                   help="the model, as vLLM's 'vllm serve MODEL' takes it (= --model-path)")
    http = p.add_argument_group("HTTP")
    http.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    http.add_argument("--port", type=int, default=30000, help="TCP port; 0 picks a free one (default: %(default)s)")
    http.add_argument("--api-key", action="append", default=None, metavar="KEY",
                      help="require 'Authorization: Bearer KEY' on every route but /health; repeat for "
                           "several keys (each then gets its own radix-cache namespace). Flags show in "
                           "ps: prefer --api-key-file or the RADIXLM_API_KEY variable (comma-separated)")
    http.add_argument("--api-key-file", default=None, metavar="PATH",
                      help="read API keys from PATH, one per line (blank lines and # comments skipped)")
    http.add_argument("--admin-api-key", default=None, metavar="KEY",
                      help="the key of /flush_cache, abort_all, /metrics and other tenants' requests; with "
                           "several --api-key and no admin key these are refused (403). Also read from the "
                           "RADIXLM_ADMIN_API_KEY variable")
    http.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                      help="reject request bodies larger than this with 413 (default: %(default)s)")
    http.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                      help="the model name of the APIs (default: the model directory's name); with several, "
                           "requests may name any and responses carry the first (as vLLM)")
    http.add_argument("--graceful-shutdown-s", type=float, default=30.0,
                      help="on SIGINT/SIGTERM, seconds in-flight requests get before they are aborted "
                           "(default: %(default)s)")
    http.add_argument("--log-requests", action=argparse.BooleanOptionalAction, default=True,
                      help="log one INFO line per request (default: on)")
    http.add_argument("--dp-size", "--data-parallel-size", type=int, default=1,
                      help="data parallelism: run this many engine replicas (each a server on an internal "
                           "port) behind a cache-aware router on --host/--port (default: %(default)s)")
    ServerArgs.add_cli_args(p.add_argument_group("engine (ServerArgs)"))
    add_ignored_flags(p)
    p.set_defaults(func=cmd_serve, parser=p)


def serve_settings(args: argparse.Namespace):
    """``radixlm serve``'s parsed flags as ``(ServerArgs, ServerConfig)``; a usage error (one line,
    exit code 2) for a conflict or a bad value."""
    from radixlm.runtime.server.transport.access import ADMIN_KEY_ENV, load_api_keys
    from radixlm.runtime.server.transport.state import ServerConfig

    if args.model is not None:
        if args.model_path is not None and args.model_path != args.model:
            args.parser.error(f"the model is given twice: {args.model!r} and --model-path {args.model_path!r}")
        args.model_path = args.model
    server_args = _server_args(args.parser, args)
    names = args.served_model_name or [None]
    try:
        keys = load_api_keys(args.api_key or [], args.api_key_file, os.environ)
        admin_key = args.admin_api_key or os.environ.get(ADMIN_KEY_ENV) or None
        config = ServerConfig(host=args.host, port=args.port, api_keys=tuple(keys), admin_api_key=admin_key,
                              max_body_bytes=args.max_body_bytes, served_model_name=names[0],
                              served_model_aliases=tuple(names[1:]), graceful_shutdown_s=args.graceful_shutdown_s)
    except ValueError as e:
        args.parser.error(str(e))
    return server_args, config


def cmd_serve(args: argparse.Namespace) -> int:
    from radixlm.flags import notices
    from radixlm.runtime.server.app import serve
    from radixlm.startup import StartupError, bind_listener

    server_args, config = serve_settings(args)
    for line in notices(args):
        print(line, file=sys.stderr)
    logging.basicConfig(level=server_args.log_level.upper(), format=LOG_FORMAT)
    if not args.log_requests:
        logging.getLogger("radixlm.server.requests").setLevel(logging.WARNING)
    if args.dp_size != 1:
        return _serve_data_parallel(args, server_args, config.keys, config.admin_api_key)
    try:
        sock = bind_listener(config.host, config.port)  # before the load: a taken port fails in a second
    except StartupError as e:
        _fail(e)
    engine = _make_engine(server_args)
    try:
        _run(serve(engine, config, sock=sock))
    finally:
        engine.shutdown()
    return 0


def _serve_data_parallel(args: argparse.Namespace, server_args, keys: list[str],
                         admin_key: str | None = None) -> int:
    from radixlm.runtime.router.launcher import serve_data_parallel
    from radixlm.runtime.server.transport.access import ADMIN_KEY_ENV, API_KEY_ENV
    from radixlm.startup import StartupError, check_checkpoint, check_port_free, resolve_sources

    if args.dp_size < 1:
        args.parser.error(f"--dp-size must be >= 1, got {args.dp_size}")
    try:  # before any replica starts loading
        check_port_free(args.host, args.port)
        server_args = resolve_sources(server_args)  # the replicas load the downloaded snapshot
        check_checkpoint(server_args.model_path, server_args.tokenizer_path)
    except StartupError as e:
        _fail(e)
    extra = ["--max-body-bytes", str(args.max_body_bytes),
             "--graceful-shutdown-s", str(args.graceful_shutdown_s)]
    # the replicas inherit the environment: the keys reach them without showing in their command lines
    os.environ.pop(API_KEY_ENV, None)
    if keys:
        os.environ[API_KEY_ENV] = ",".join(keys)
    os.environ.pop(ADMIN_KEY_ENV, None)
    if admin_key:
        os.environ[ADMIN_KEY_ENV] = admin_key
    if args.served_model_name is not None:
        extra += ["--served-model-name", *args.served_model_name]
    if not args.log_requests:
        extra.append("--no-log-requests")
    try:
        return serve_data_parallel(server_args, args.dp_size, args.host, args.port, extra_argv=extra)
    except (RuntimeError, TimeoutError) as e:  # a replica failed to start (it printed why)
        _fail(e)


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
    p.set_defaults(func=cmd_generate, parser=p, log_level="warning")  # the output is the text: no INFO lines


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
    if server_args.model_path is None:  # the text below is noise: say so where the user reads it
        print("radixlm: notice: the embedded tiny model has RANDOM weights and answers in noise; pass "
              "--model-path (a checkpoint folder, a .gguf file or a hub id) for a real model", file=sys.stderr)
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


# ---------------------------------------------------------------------- pull, list


def add_pull_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("pull", help="download a model from the Hugging Face hub without serving it",
                              description="Download MODEL into the Hugging Face cache (as `ollama pull`) "
                                          "and print the local path `radixlm serve --model-path MODEL` "
                                          "will then use, offline too.")
    p.add_argument("model", metavar="MODEL", help="ORG/NAME[@REV] (safetensors), ORG/NAME:QUANT or "
                                                  "ORG/NAME/FILE.gguf (a GGUF repository's file)")
    p.set_defaults(func=cmd_pull, parser=p)


def cmd_pull(args: argparse.Namespace) -> int:
    from radixlm.runtime.checkpoints.model_source import ModelSourceError, is_hub_id, resolve_model_path

    if not is_hub_id(args.model):
        args.parser.error(f"{args.model}: not a hub id (ORG/NAME, ORG/NAME:QUANT or ORG/NAME/FILE.gguf)")
    try:
        print(resolve_model_path(args.model, "pull"))
    except ModelSourceError as e:
        _fail(e)
    return 0


def add_list_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("list", help="show the models the Hugging Face cache holds",
                              description="List the models in the Hugging Face cache, each as the "
                                          "--model-path that serves it, with its size on disk.")
    p.set_defaults(func=cmd_list, parser=p)


def cmd_list(args: argparse.Namespace) -> int:
    from radixlm.runtime.checkpoints.model_source import cached_models

    rows = cached_models()
    if not rows:
        print("the Hugging Face cache holds no models (radixlm pull MODEL downloads one)")
        return 0
    width = max(len(spec) for spec, _ in rows)
    print(f"{'MODEL':<{width}}  SIZE")
    for spec, size in rows:
        print(f"{spec:<{width}}  {size / 1e6:,.1f} MB")
    return 0


# ---------------------------------------------------------------------- router


def add_router_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("router", help="route requests over several radixlm servers by cached prefix",
                              description="A cache-aware data-parallel router: each request goes to the "
                                          "replica that most likely caches its prompt prefix.")
    p.add_argument("--worker", action="append", required=True, metavar="URL",
                   help="a replica's base URL, e.g. http://127.0.0.1:30001 (repeat for each)")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=30000, help="TCP port (default: %(default)s)")
    p.add_argument("--policy", choices=["cache_aware", "round_robin"], default="cache_aware",
                   help="routing policy (default: %(default)s)")
    p.add_argument("--cache-threshold", type=float, default=0.5,
                   help="route by prefix only when it covers this share of the prompt (default: %(default)s)")
    p.add_argument("--balance-abs-threshold", type=int, default=16,
                   help="in-flight difference above which the least-loaded replica wins (default: %(default)s)")
    p.add_argument("--balance-rel-threshold", type=float, default=1.5,
                   help="...and the load ratio above which it wins (default: %(default)s)")
    p.add_argument("--health-interval-s", type=float, default=2.0, help="health probe period (default: %(default)s)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_router, parser=p)


def cmd_router(args: argparse.Namespace) -> int:
    from radixlm.runtime.router.policy import RoutingConfig
    from radixlm.runtime.router.router import RouterConfig, run_router

    try:
        routing = RoutingConfig(policy=args.policy, cache_threshold=args.cache_threshold,
                                balance_abs_threshold=args.balance_abs_threshold,
                                balance_rel_threshold=args.balance_rel_threshold)
        config = RouterConfig(workers=args.worker, routing=routing, health_interval_s=args.health_interval_s)
    except ValueError as e:
        args.parser.error(str(e))
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    run_router(config, host=args.host, port=args.port)
    return 0


# ---------------------------------------------------------------------- bench


def _bench_run_module():
    """benchmarks/run.py of a source checkout, or None when radixlm is installed without one."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("radixlm_bench_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="run the benchmark suites side by side (source checkout)")
    module = _bench_run_module()
    if module is not None:
        module.add_arguments(p)
    p.set_defaults(func=cmd_bench, parser=p, bench_module=module)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench_module is None:
        args.parser.error("radixlm bench needs a source checkout: benchmarks/run.py was not found next to "
                          "the radixlm package (clone the repository and pip install -e '.[bench]')")
    try:
        args.bench_module.run_suites(args)
    except ValueError as e:
        args.parser.error(str(e))
    return 0


# ---------------------------------------------------------------------- entry point

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_serve_parser, add_generate_parser, add_pull_parser, add_list_parser, add_router_parser, add_bench_parser]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="radixlm", description="radixlm: an LLM serving engine with "
                                     "RadixAttention, constrained decoding and an agent DSL.")
    parser.add_argument("--version", action="version", version=f"radixlm {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def _return_flag_value(args: argparse.Namespace, unknown: list[str], argv: list[str]) -> None:
    """``serve --typo-flag 5``: argparse hands the unknown flag's value to the positional MODEL; it
    goes back to the flag (the error then names ``--typo-flag 5``)."""
    model = getattr(args, "model", None)
    if model is None or not unknown:
        return
    at = argv.index(model) if model in argv else -1
    if at > 0 and argv[at - 1] in unknown:
        unknown.insert(unknown.index(argv[at - 1]) + 1, model)
        args.model = None


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen subcommand; returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    _return_flag_value(args, unknown, argv)
    if unknown:
        owner = getattr(args, "parser", parser)  # the subcommand's parser: its usage, its flags
        owner.error(unknown_arguments(unknown, owner))
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C while loading or generating: one line, not a traceback
        print("radixlm: interrupted", file=sys.stderr)
        return 130



if __name__ == "__main__":
    # `python -m radixlm` in a clone puts its root first on sys.path, where our `kernels/` shadows
    # Hugging Face's `kernels` package (transformers imports it); the installed names need no root.
    if os.path.isfile("pyproject.toml") and os.path.isdir("kernels"):
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.getcwd()]
    sys.exit(main())
