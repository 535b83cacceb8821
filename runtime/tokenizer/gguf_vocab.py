"""A GGUF file's tokenizer, built in memory from its metadata.

transformers' GGUF converter rebuilds the ``tokenizers.Tokenizer`` from the file's vocabulary,
merges, scores and token types (byte-level BPE with the pre-tokenizer ``tokenizer.ggml.pre`` names,
or SentencePiece), adding control tokens as special and user-defined ones as plain added tokens;
its output is checked against llama.cpp's own tokenizations (``tests/tokenizer``). Two repairs, as
``testing/llamacpp_fixtures.py`` makes for the test vocabularies: added tokens the converter
appends past the file's token count are dropped (the model has no embedding rows for them), and
the special tokens are the ones at the file's ``tokenizer.ggml.*_token_id`` ids.

The ids generation stops on are llama.cpp's end-of-generation set: the EOS, EOT and EOM ids, and the
control tokens whose text llama.cpp treats as an end of turn (``EOG_TEXTS``).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import tokenizers
from tokenizers import processors

# control-token texts llama.cpp's vocabulary loader adds to its end-of-generation ids
EOG_TEXTS = frozenset({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
                       "_<EOT>", "<｜end▁of▁sentence｜>", "<|end_of_text|>", "<end_of_utterance>", "<|return|>",
                       "<|call|>", "<|eom_id|>"})
CONTROL = 3  # GGUF token type of a control (special) token
_SPECIAL_IDS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "pad_token": "padding_token_id",
                "unk_token": "unknown_token_id"}
_EXTRA_IDS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


@dataclass
class GGUFVocab:
    """What a GGUF file says about its tokenizer: the built ``tokenizer``, ``special_tokens``
    (``bos_token`` / ``eos_token`` / ``pad_token`` / ``unk_token`` -> text), the special ids,
    ``eos_token_ids`` (the end-of-generation set), ``add_bos_token`` and the ``chat_template``."""

    tokenizer: tokenizers.Tokenizer
    special_tokens: dict[str, str]
    bos_token_id: int | None
    pad_token_id: int | None
    eos_token_ids: list[int]
    add_bos_token: bool
    chat_template: str | None
    architecture: str = ""
    token_count: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


def _read(path: str) -> tuple[str, dict, dict, dict]:
    """(architecture, tokenizer dict, tokenizer config, scalar metadata) through transformers' GGUF reader."""
    from transformers.integrations.gguf import get_gguf_tokenizer
    from transformers.integrations.gguf.reader import read_gguf_metadata

    architecture, tokenizer_dict, tokenizer_config = get_gguf_tokenizer(path)
    metadata, _ = read_gguf_metadata(path)
    return architecture, tokenizer_dict, tokenizer_config, metadata


def _drop_added_past(tok: tokenizers.Tokenizer, limit: int) -> tokenizers.Tokenizer:
    """``tok`` without the added tokens whose id is ``limit`` or more (see the module docstring)."""
    if all(i < limit for i in tok.get_added_tokens_decoder()):
        return tok
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec.get("added_tokens", []) if t["id"] < limit]
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def read_gguf_vocab(path: str | os.PathLike) -> GGUFVocab:
    """Build the tokenizer of the GGUF file at ``path``; ``ValueError`` when the file has none or
    transformers has no converter for its tokenizer model."""
    from transformers.integrations.gguf import convert_gguf_tokenizer

    path = os.fspath(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reader warns about every field it does not map
        architecture, tokenizer_dict, tokenizer_config, metadata = _read(path)
        tokens = tokenizer_dict.get("tokens")
        if not tokens:
            raise ValueError(f"{path} has no tokenizer (tokenizer.ggml.tokens is missing)")
        try:
            tok, _ = convert_gguf_tokenizer(architecture, tokenizer_dict)
        except (KeyError, ValueError, NotImplementedError) as e:
            model = tokenizer_dict.get("tokenizer_type")
            raise ValueError(f"{path}: tokenizer model {model!r} (pre-tokenizer "
                             f"{tokenizer_dict.get('pre_tokenizer_type')!r}) cannot be built: {e}") from None
    tok = _drop_added_past(tok, len(tokens))
    ids = {name: metadata.get(f"tokenizer.ggml.{key}") for name, key in _SPECIAL_IDS.items()}
    special = {name: tokens[i] for name, i in ids.items() if isinstance(i, int) and 0 <= i < len(tokens)}
    add_bos = bool(tokenizer_config.get("add_bos_token", False)) and "bos_token" in special
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", False)) and "eos_token" in special
    _set_post_processor(tok, special if add_bos else {}, special if add_eos else {})
    return GGUFVocab(tok, special, ids["bos_token"], ids["pad_token"], _eog_ids(tokens, tokenizer_dict, metadata),
                     add_bos, tokenizer_config.get("chat_template"), architecture, len(tokens), metadata)


def _set_post_processor(tok: tokenizers.Tokenizer, bos: dict[str, str], eos: dict[str, str]) -> None:
    """What ``add_special_tokens=True`` adds, as llama.cpp's ``add_bos_token`` / ``add_eos_token`` say."""
    if not bos and not eos:
        return
    first = [bos["bos_token"]] if bos else []
    last = [eos["eos_token"]] if eos else []
    marks = [(t, tok.token_to_id(t)) for t in dict.fromkeys(first + last)]
    single = " ".join([*first, "$A", *last])
    pair = " ".join([*first, "$A", *last, *(f"{t}:1" for t in first), "$B:1", *(f"{t}:1" for t in last)])
    template = processors.TemplateProcessing(single=single, pair=pair, special_tokens=marks)
    current = tok.post_processor
    keep = current is not None and not isinstance(current, processors.TemplateProcessing)
    tok.post_processor = processors.Sequence([current, template]) if keep else template


def _eog_ids(tokens: list[str], tokenizer_dict: dict, metadata: dict) -> list[int]:
    """The EOS id first, then EOT / EOM and the control tokens named in ``EOG_TEXTS``."""
    eog = [i for key in _EXTRA_IDS if isinstance(i := metadata.get(key), int) and 0 <= i < len(tokens)]
    types = tokenizer_dict.get("token_type") or []
    for i, kind in enumerate(types):
        if kind == CONTROL and tokens[i] in EOG_TEXTS:
            eog.append(i)
    return list(dict.fromkeys(eog))
