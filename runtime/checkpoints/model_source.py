"""Where ``--model-path`` points: a local folder or file, or a Hugging Face hub id.

A path that exists is used as it is (a checkpoint folder, or a GGUF file). Otherwise a spec of the
form ``ORG/NAME`` or ``ORG/NAME@REVISION`` is a hub id: ``huggingface_hub.snapshot_download``
fetches only the files serving needs (config, tokenizer files, chat template, safetensors weights)
into the standard Hugging Face cache (``HF_HOME``/``HF_HUB_CACHE``), with its progress bars, and
returns the snapshot folder. With ``HF_HUB_OFFLINE=1``, or when the hub cannot be reached, a
snapshot already in the cache is used. Every failure is a ``ModelSourceError`` whose message is one
line saying what to do.
"""

from __future__ import annotations

import os
import re

# What a served checkpoint needs; other files in a hub repository (other weight formats, README,
# images, ONNX exports) are not downloaded.
HUB_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "*.safetensors",
             "model.safetensors.index.json")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?")


class ModelSourceError(Exception):
    """A ``--model-path`` that cannot be served; its message is the whole report (one line)."""


def is_hub_id(spec: str) -> bool:
    """True when ``spec`` is no local path but reads as ``ORG/NAME`` or ``ORG/NAME@REVISION``."""
    if os.path.exists(os.path.expanduser(spec)):
        return False
    return bool(_HUB_ID.fullmatch(spec)) and not spec.startswith((".", "/", "~"))


def resolve_model_path(spec: str, flag: str = "--model-path") -> str:
    """The local path to serve for ``spec``: the path itself, or the hub snapshot it names.

    Raises ``ModelSourceError`` for a path that does not exist and is no hub id, and for every hub
    failure (unknown, private or gated repository, unknown revision, no network and no cached copy).
    """
    local = os.path.expanduser(spec)
    if os.path.exists(local):
        return local
    if not is_hub_id(spec):
        raise ModelSourceError(
            f"{flag} {spec}: no such file or directory (pass a checkpoint folder, a .gguf file, or a "
            "Hugging Face hub id such as Qwen/Qwen2.5-0.5B-Instruct)")
    repo, _, revision = spec.partition("@")
    return _download(repo, revision or None, f"{flag} {spec}")


def _download(repo: str, revision: str | None, what: str) -> str:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return snapshot_download(repo, revision=revision, allow_patterns=list(HUB_FILES))
    except GatedRepoError:
        raise ModelSourceError(f"{what}: the repository is gated: accept its terms on the hub's page and "
                               "set HF_TOKEN to a token of that account") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(f"{what}: no such repository on {constants.ENDPOINT} (check the name; for "
                               "a private repository set HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise ModelSourceError(f"{what}: no revision {revision!r} in {repo} (a branch, tag or commit)") from None
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"{constants.ENDPOINT} cannot be reached"
        raise ModelSourceError(f"{what}: not in the Hugging Face cache and {why}: download it once with "
                               "network access, or pass a local folder") from None
    except HfHubHTTPError as e:
        raise ModelSourceError(f"{what}: the hub answered {_first_line(e)}") from None
    except OSError as e:
        raise ModelSourceError(f"{what}: download failed: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def model_name(path: str) -> str:
    """The name a served model goes by: ``ORG/NAME`` for a hub snapshot, else the path's last part."""
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--"):].replace("--", "/")
    return os.path.basename(path.rstrip("/")) or "default"
