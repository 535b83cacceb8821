"""The tokenizer of the locally built test checkpoints: a byte-level BPE trained on a committed corpus.

Training is deterministic (fixed corpus and special tokens; the trainer breaks count ties by pair,
independent of the thread count, which a test checks), so the same target vocabulary size always
yields a byte-identical ``tokenizer.json``. When the corpus cannot supply enough
merges to reach the target, the vocabulary is padded with ``<|reserved_special_token_N|>`` entries, as
Llama 3 does, so that every row of the model's embedding has a token.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
CORPUS_PATH = DATA_DIR / "corpus.txt"
CHAT_TEMPLATE_PATH = DATA_DIR / "chat_template.jinja"

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|pad|>"
# Control tokens: ids 0..4 in this order; skipped by decode(skip_special_tokens=True).
SPECIAL_TOKENS = [BOS, EOS, IM_START, IM_END, PAD]
# Added but not special: they survive decoding so that tool calls can be parsed from the output text.
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]


def _corpus_lines() -> list[str]:
    text = CORPUS_PATH.read_text(encoding="utf-8")
    # Keep newlines: they are part of the text the model sees (chat turns, code).
    return text.splitlines(keepends=True)


def train_tokenizer(vocab_size: int, add_bos: bool):
    """Train the byte-level BPE and return a ``tokenizers.Tokenizer`` with exactly ``vocab_size`` ids.

    ``add_bos``: whether ``encode(..., add_special_tokens=True)`` prepends ``<|begin_of_text|>``
    (Llama/Mistral style; Qwen tokenizers add nothing).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        min_frequency=1,  # the corpus is small; every pair that occurs is worth a merge
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus_lines(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    reserved = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    tok.add_special_tokens(
        [AddedToken(f"<|reserved_special_token_{i}|>", special=True, normalized=False) for i in range(reserved)]
    )
    if add_bos:
        bos_id = tok.token_to_id(BOS)
        tok.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
                ),
            ]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    assert tok.get_vocab_size(with_added_tokens=True) == vocab_size
    return tok


def num_trained_tokens(tok) -> int:
    """Ids below this are the BPE vocabulary plus control and tool tokens; the rest are reserved padding."""
    first_reserved = tok.token_to_id("<|reserved_special_token_0|>")
    return tok.get_vocab_size(with_added_tokens=True) if first_reserved is None else first_reserved


def tokenizer_config(tok, add_bos: bool, max_length: int) -> dict:
    """The ``tokenizer_config.json`` HF expects: special tokens, the chat template and the added tokens."""
    added = {}
    for token_id, token in sorted(tok.get_added_tokens_decoder().items()):
        added[str(token_id)] = {
            "content": token.content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": token.special,
        }
    return {
        "added_tokens_decoder": added,
        "bos_token": BOS if add_bos else None,
        "eos_token": IM_END,
        "pad_token": PAD,
        "unk_token": None,
        "add_bos_token": add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE_PATH.read_text(encoding="utf-8"),
    }


def write_tokenizer_files(out_dir: Path, vocab_size: int, add_bos: bool, max_length: int) -> dict[str, int]:
    """Write ``tokenizer.json`` and ``tokenizer_config.json``; return the control token ids by role."""
    tok = train_tokenizer(vocab_size, add_bos)
    (out_dir / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    config = tokenizer_config(tok, add_bos, max_length)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return {
        "bos": tok.token_to_id(BOS),
        "eos": tok.token_to_id(EOS),
        "im_start": tok.token_to_id(IM_START),
        "im_end": tok.token_to_id(IM_END),
        "pad": tok.token_to_id(PAD),
        "num_trained": num_trained_tokens(tok),
    }
