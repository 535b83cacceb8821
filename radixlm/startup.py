"""Start-up checks of ``radixlm serve``: each failure is one clear line and exit code 2.

The cheap checks run before the model loads, so a taken port or a mistyped ``--model-path`` is
reported in a second rather than after the weights are read: :func:`bind_listener` claims the port
first (the server then serves on that very socket), :func:`check_checkpoint` looks at the files,
and :func:`load_engine` turns a checkpoint that fails to load into one line (the traceback goes
to the debug log).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import socket
from pathlib import Path
from typing import Any

from radixlm.runtime.gguf_path import GGUFPathError, check_gguf_header, gguf_file

logger = logging.getLogger("radixlm.startup")


class StartupError(Exception):
    """A start-up failure the user can fix; its message is the whole report."""


def bind_listener(host: str, port: int) -> socket.socket:
    """The server's listening socket on ``host:port``, bound now; ``StartupError`` when it is taken."""
    from radixlm.runtime.server.app import bind_socket

    try:
        return bind_socket(host, port)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise StartupError(f"port {port} on {host} is already in use; stop the other server or pass "
                               "--port N (0 picks a free port)") from None
        raise StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def check_port_free(host: str, port: int) -> None:
    """``StartupError`` unless ``host:port`` can be bound now (for a listener that binds it later)."""
    bind_listener(host, port).close()


def check_checkpoint(model_path: str | None, tokenizer_path: str | None = None) -> None:
    """``StartupError`` unless ``model_path`` (None: the embedded model) looks like a checkpoint (an HF
    folder, a GGUF file or a folder holding one)."""
    try:
        gguf = gguf_file(model_path)
    except GGUFPathError as e:
        raise StartupError(f"--model-path {model_path}: {e}") from None
    if gguf is not None:
        try:  # the magic and version before anything reads more of the file (the tokenizer conversion)
            check_gguf_header(gguf)
        except ValueError as e:  # its message starts with the file's path
            raise StartupError(f"--model-path {e}") from None
        except OSError as e:
            raise StartupError(f"--model-path {model_path}: {e.strerror or e}") from None
        if tokenizer_path is not None and gguf_file(tokenizer_path) is None \
                and not (Path(tokenizer_path) / "tokenizer.json").is_file():
            raise StartupError(f"--tokenizer-path {tokenizer_path}: tokenizer.json is missing")
        return
    if model_path is not None:
        path = Path(model_path)
        if not path.exists():
            raise StartupError(f"--model-path {model_path}: no such file or directory (pass a checkpoint "
                               "folder: config.json, *.safetensors, tokenizer.json; a .gguf file; or a hub id "
                               "ORG/NAME)")
        if not path.is_dir():
            raise StartupError(f"--model-path {model_path}: not a directory (pass the checkpoint's folder, "
                               "or a .gguf file)")
        if not (path / "config.json").is_file():
            raise StartupError(f"--model-path {model_path}: not a checkpoint: config.json is missing")
        if not any(path.glob("*.safetensors")):
            raise StartupError(f"--model-path {model_path}: not a checkpoint: no *.safetensors weights")
    tokenizer_dir = tokenizer_path or model_path
    if tokenizer_dir is not None and not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        flag = "--tokenizer-path" if tokenizer_path else "--model-path"
        raise StartupError(f"{flag} {tokenizer_dir}: tokenizer.json is missing")


def resolve_sources(server_args: Any) -> Any:
    """``server_args`` with hub ids in ``model_path``/``tokenizer_path`` replaced by their local snapshots.

    Downloads what is not cached yet (with progress bars); failures raise ``StartupError``.
    """
    from radixlm.runtime.checkpoints.model_source import ModelSourceError, resolve_model_path

    changes = {}
    for name, flag in (("model_path", "--model-path"), ("tokenizer_path", "--tokenizer-path")):
        value = getattr(server_args, name)
        if value is not None:
            try:
                changes[name] = resolve_model_path(value, flag)
            except ModelSourceError as e:
                raise StartupError(str(e)) from None
    return dataclasses.replace(server_args, **changes) if changes else server_args


def load_engine(server_args: Any) -> Any:
    """The ``Engine`` for ``server_args``; a checkpoint that fails to load raises ``StartupError``."""
    server_args = resolve_sources(server_args)
    check_checkpoint(server_args.model_path, server_args.tokenizer_path)
    from radixlm.runtime.engine.engine import Engine

    try:
        return Engine(**dataclasses.asdict(server_args))
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001 - any load failure is reported as one line
        logger.debug("loading the model failed", exc_info=True)
        where = server_args.model_path or "the embedded model"
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise StartupError(f"cannot load {where}: {type(e).__name__}: {detail} (--log-level debug shows "
                           "the traceback)") from None
