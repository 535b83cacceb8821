"""Tokenizer: a HF ``tokenizer.json`` plus the special tokens and chat template of a checkpoint directory
(or of a GGUF file: ``Tokenizer.from_gguf``; any in-memory tokenizer: ``Tokenizer.from_tokenizer``).

Works for any local HF checkpoint directory (not only ours): ``eos_token_id`` may be an int or a list,
special tokens may be strings or ``{"content": ...}`` dicts, and the chat template may live in
``tokenizer_config.json`` (a string or a list of named templates) or in ``chat_template.jinja``.
Rendering is ``chat_template.py``'s (transformers' semantics); ``ChatTemplateError`` is re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tokenizers
from radixlm.runtime.tokenizer.chat_template import (
    SPECIAL_TOKEN_NAMES,
    ChatTemplateError,
    render_chat_template,
    select_chat_template,
)

if TYPE_CHECKING:
    from radixlm.runtime.tokenizer.detokenizer import IncrementalDetokenizer


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's byte-to-unicode table used by byte-level BPE token strings."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shift)] = b
            shift += 1
    return table


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _token_content(value: Any) -> str | None:
    """Special tokens appear as plain strings or as serialised AddedToken dicts."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


class Tokenizer:
    """Encode/decode, special tokens, EOS ids and chat templating for a checkpoint directory."""

    def __init__(self, model_path: str | Path, chat_template: str | None = None):
        """``chat_template``: a Jinja file, or the template text, used instead of the checkpoint's."""
        path = Path(model_path)
        if not path.is_dir():
            hint = " (a GGUF file: Tokenizer.from_gguf)" if path.suffix.lower() == ".gguf" else ""
            raise FileNotFoundError(f"model path {str(path)!r} is not a directory{hint}")
        tokenizer_file = path / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise FileNotFoundError(f"tokenizer.json not found in {str(path)!r}")
        self._setup(path, tokenizers.Tokenizer.from_file(str(tokenizer_file)), _read_json(path / "tokenizer_config.json"),
                    _read_json(path / "config.json"), _read_json(path / "generation_config.json"), chat_template)

    @classmethod
    def from_tokenizer(cls, hf: tokenizers.Tokenizer, *, source: str | Path, special_tokens: dict[str, str],
                       eos_token_ids: list[int], bos_token_id: int | None = None, pad_token_id: int | None = None,
                       chat_template: str | None = None, chat_template_override: str | None = None) -> Tokenizer:
        """A tokenizer built in memory: ``hf``, ``special_tokens`` (``bos_token`` / ``eos_token`` / ... ->
        text), the ids generation stops on, the chat template; ``source`` names where it came from
        (in errors). ``chat_template_override`` is ``--chat-template`` (a file or the template text)."""
        config: dict[str, Any] = {**special_tokens, "chat_template": chat_template}
        generation = {"eos_token_id": list(eos_token_ids), "bos_token_id": bos_token_id,
                      "pad_token_id": pad_token_id}
        tok = cls.__new__(cls)
        tok._setup(Path(source), hf, config, {}, generation, chat_template_override)
        return tok

    @classmethod
    def from_gguf(cls, gguf_path: str | Path, chat_template: str | None = None) -> Tokenizer:
        """The tokenizer, special ids and chat template stored in a GGUF file (``gguf_vocab``),
        converted once and cached (``gguf_tokenizer_cache``)."""
        from radixlm.runtime.tokenizer.gguf_tokenizer_cache import load_gguf_vocab

        vocab = load_gguf_vocab(gguf_path)
        return cls.from_tokenizer(vocab.tokenizer, source=gguf_path, special_tokens=vocab.special_tokens,
                                  eos_token_ids=vocab.eos_token_ids, bos_token_id=vocab.bos_token_id,
                                  pad_token_id=vocab.pad_token_id, chat_template=vocab.chat_template,
                                  chat_template_override=chat_template)

    def _setup(self, path: Path, hf: tokenizers.Tokenizer, config: dict, model_config: dict,
               generation_config: dict, chat_template: str | None) -> None:
        self.path = path
        # read now: a missing --chat-template file fails at start-up, not on the first chat request
        self._chat_template_override = None if chat_template is None else _read_template_override(chat_template)
        self.hf: tokenizers.Tokenizer = hf
        self.config = config

        self.vocab_size: int = self.hf.get_vocab_size(with_added_tokens=True)
        added = self.hf.get_added_tokens_decoder()
        self.special_token_ids: set[int] = {i for i, tok in added.items() if tok.special}

        self.bos_token: str | None = _token_content(self.config.get("bos_token"))
        self.eos_token: str | None = _token_content(self.config.get("eos_token"))
        self.pad_token: str | None = _token_content(self.config.get("pad_token"))
        # What transformers hands a chat template: the special tokens that are set, by attribute name.
        self.special_tokens: dict[str, str] = {
            name: content for name in SPECIAL_TOKEN_NAMES
            if isinstance(content := _token_content(self.config.get(name)), str)
        }
        self.bos_token_id: int | None = self._id_of(self.bos_token)
        if self.bos_token_id is None and "bos_token" not in self.config:
            self.bos_token_id = generation_config.get("bos_token_id", model_config.get("bos_token_id"))
        self.pad_token_id: int | None = self._id_of(self.pad_token)
        if self.pad_token_id is None:
            self.pad_token_id = generation_config.get("pad_token_id", model_config.get("pad_token_id"))
        # generation_config.json is what HF's generate() stops on; tokenizer_config's eos is added to it.
        eos = _as_id_list(generation_config.get("eos_token_id", model_config.get("eos_token_id")))
        eos_from_token = self._id_of(self.eos_token)
        if eos_from_token is not None and eos_from_token not in eos:
            eos.append(eos_from_token)
        self.eos_token_ids: list[int] = eos
        self._byte_level = self._uses_byte_level()

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self.hf.token_to_id(token)

    def _uses_byte_level(self) -> bool:
        if self.hf.decoder is None:
            return False
        spec = json.loads(self.hf.decoder.__getstate__())
        decoders = spec.get("decoders", [spec]) if spec.get("type") == "Sequence" else [spec]
        return any(d.get("type") == "ByteLevel" for d in decoders)

    # --- text <-> ids -------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` applies the post-processor (e.g. a BOS)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self.hf.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        """``encode`` of each text; the GIL is released while encoding (the HF tokenizers batch path), so
        a long text does not stall the process's other threads."""
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"text must be a str, got {type(text).__name__}")
        return [e.ids for e in self.hf.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def decode(self, ids: list[int], skip_special_tokens: bool = True, keep: Collection[int] = ()) -> str:
        """Text of ``ids``; incomplete UTF-8 sequences decode to U+FFFD. With ``skip_special_tokens``,
        the special tokens in ``keep`` (a chat format's markers) are decoded all the same."""
        if skip_special_tokens and keep:
            # skipping is dropping special ids before decoding, so drop all but the kept ones
            ids = [i for i in ids if i in keep or i not in self.special_token_ids]
            return self.hf.decode(ids, skip_special_tokens=False)
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def special_ids_of(self, texts: Iterable[str]) -> list[int]:
        """The ids of those ``texts`` that are each one special token (markers decode would skip)."""
        ids = (self.hf.token_to_id(t) for t in texts if t)
        return sorted({i for i in ids if i is not None and i in self.special_token_ids})

    def incremental_detokenizer(self, skip_special_tokens: bool = True,
                                keep: Collection[int] = ()) -> IncrementalDetokenizer:
        """A fresh ``IncrementalDetokenizer`` over this tokenizer (text deltas for streaming)."""
        from radixlm.runtime.tokenizer.detokenizer import IncrementalDetokenizer

        return IncrementalDetokenizer(self, skip_special_tokens=skip_special_tokens, keep=keep)

    def id_to_bytes(self, token_id: int) -> bytes:
        """The exact bytes token ``token_id`` contributes to the text (its content for added tokens)."""
        token = self.hf.id_to_token(token_id)
        if token is None:
            raise ValueError(f"token_id {token_id} is outside the vocabulary (size {self.vocab_size})")
        if token_id in self._added_ids:
            return token.encode("utf-8")
        if self._byte_level:
            table = _unicode_to_byte()
            if all(ch in table for ch in token):
                return bytes(table[ch] for ch in token)
        # SentencePiece-style vocabularies: "<0x0A>" byte-fallback pieces and "▁" for spaces.
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            return bytes([int(token[3:5], 16)])
        return token.replace("\u2581", " ").encode("utf-8")

    @cached_property
    def _added_ids(self) -> set[int]:
        return set(self.hf.get_added_tokens_decoder())

    def all_token_bytes(self) -> list[bytes]:
        """``id_to_bytes`` for every id in ``range(vocab_size)`` (ids with no token give b"")."""
        out = []
        for token_id in range(self.vocab_size):
            out.append(b"" if self.hf.id_to_token(token_id) is None else self.id_to_bytes(token_id))
        return out

    # --- chat ---------------------------------------------------------------------------------

    @cached_property
    def _template_entry(self) -> str | list | dict | None:
        """``chat_template.jinja`` (it wins, as in transformers), else the config's string or named templates;
        ``--chat-template`` wins over both."""
        if self._chat_template_override is not None:
            return self._chat_template_override
        template_file = self.path / "chat_template.jinja"
        if self.path.is_dir() and template_file.is_file():
            return template_file.read_text(encoding="utf-8")
        return self.config.get("chat_template")

    @cached_property
    def chat_template(self) -> str | None:
        """The default chat template source, or None when the checkpoint has none."""
        return select_chat_template(self._template_entry)

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """Render ``messages`` (and ``tools``) with the checkpoint's Jinja chat template, as transformers does.

        ``kwargs`` are extra template variables (``documents``, ``enable_thinking``, ...); they override
        the special tokens. Raises ``ChatTemplateError`` when the checkpoint has no template or the
        template rejects the messages (``raise_exception``, e.g. an unknown role) or fails on them.
        """
        template = select_chat_template(self._template_entry, tools)  # named `tool_use` with tools
        if template is None:
            raise ChatTemplateError(f"no chat template in {str(self.path)!r} ({self._template_places()}); "
                                    "pass one with --chat-template FILE (a Jinja file or the template text)")
        variables = {**self.special_tokens, **kwargs}
        return render_chat_template(template, messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                    **variables)

    def _template_places(self) -> str:
        """Where a chat template was looked for, as the error names it."""
        if self.path.suffix.lower() == ".gguf":
            return "the GGUF metadata has no 'tokenizer.chat_template' key: a base model"
        return "looked for tokenizer_config.json 'chat_template' and chat_template.jinja"


# ``--chat-template NAME``: SGLang's and vLLM's named templates that hold for any tokenizer
NAMED_CHAT_TEMPLATES = {
    "chatml": ("{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] or '')"
               " + '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
               "{%- endif %}"),
}


def _read_template_override(value: str) -> str:
    """``--chat-template``: the text of a Jinja file, ``value`` itself when it is template text, or a
    named template (:data:`NAMED_CHAT_TEMPLATES`, when no file has that name)."""
    if "{{" in value or "{%" in value:  # template text (checked first: it may be too long for a path)
        return value
    path = Path(value)
    if path.is_file():
        return path.read_text(encoding="utf-8")
    if value in NAMED_CHAT_TEMPLATES:
        return NAMED_CHAT_TEMPLATES[value]
    raise FileNotFoundError(f"chat_template {value!r}: no such file, and not a template this server names "
                            f"({', '.join(NAMED_CHAT_TEMPLATES)}); pass a Jinja template file or the template text")
