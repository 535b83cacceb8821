"""The constrained tests' shared fixtures: the tiny checkpoint's tokenizer and its vocabulary, built
once per module (a module that needs another vocabulary defines its own ``vocab``)."""

from __future__ import annotations

import pytest
from radixlm.constrained.vocab import TokenizerVocab
from radixlm.runtime.tokenizer.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_llama) -> Tokenizer:
    return Tokenizer(tiny_llama)


@pytest.fixture(scope="module")
def vocab(tokenizer) -> TokenizerVocab:
    return TokenizerVocab.from_tokenizer(tokenizer)
