"""``TokenizerVocab``: the byte string of every token and the matcher core's tokenizer over them,
built once per tokenizer and shared by every grammar compiled for it; and ``LazyTables``, the
tables an owner (a vocabulary, a compiled grammar, a runtime tracker) holds, each built on first
use by the module that reads it, so the owner needs no import of its builders.

``LazyTables`` is thread-safe: a table is built once (builders run under the owner's lock, which is
reentrant, so a builder may read another table of the same owner); reads of a built table take no
lock.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

MAX_TOKEN_BYTES = 64  # longest token the greedy fallback encoder looks for
# The llguidance token slice the engine's tokenizer keeps: the tokens that fit inside a JSON
# string, whose masks it then fills without walking them. Each slice costs ~9 MB at 152k tokens;
# llguidance's default set adds whitespace runs and 1-10 / 1-30 character strings, which the
# front end's grammars rarely reach (JSON whitespace is fixed, counted strings are counted by the
# matcher); the masks' cost either way is in benchmarks/RESULTS.md ("Resident memory").
STRING_SLICE = r'[^"\\\x00-\x1F\x7F]+'
ENGINE_SLICES = (STRING_SLICE,)


@dataclass(frozen=True, eq=False)
class TokenizerVocab:
    """Token bytes (None for special tokens) and, built on first use, llguidance's tokenizer.

    ``vocab_size`` is the model's logit width: ids at or past ``len(token_bytes)`` exist only in
    the logits and are never allowed. ``eos_token_ids`` are allowed exactly in accepting states.
    ``byte_tokens[b]`` is the id of the single-byte token ``bytes([b])`` (or -1). ``encode`` is the
    tokenizer's own encoding (``str -> ids``), used where the core re-tokenises forced text; a
    table without one gets a greedy longest-match encoder. Pickles without the native tokenizer
    (compile workers need only the table). ``tables`` holds the per-vocabulary tables of the mask
    filters and adapters (``LazyTables``), each built on first use by its own module.
    """

    token_bytes: tuple[bytes | None, ...]
    eos_token_ids: tuple[int, ...]
    vocab_size: int
    byte_tokens: tuple[int, ...] = field(repr=False)
    special_names: tuple[tuple[int, bytes], ...] = field(default=(), repr=False)
    encode: Callable[[str], list[int]] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", LazyTables())  # per-vocabulary tables, built on first use

    @property
    def mask_words(self) -> int:
        """int32 words per bitmask row: ceil(vocab_size / 32)."""
        return (self.vocab_size + 31) // 32

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("llg", None)  # native, rebuilt on demand
        state.pop("tables", None)  # built again where they are read
        state["encode"] = None  # tokenizers may not pickle; workers never tokenise
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__["tables"] = LazyTables()

    @functools.cached_property
    def llg(self) -> Any:
        """The ``llguidance.LLTokenizer`` over this table (built once, a second or so at 152k), with
        ``ENGINE_SLICES`` unless ``prepare_llg`` chose others first."""
        return self.build_llg(list(ENGINE_SLICES))

    def prepare_llg(self, slices: list[str] | None, *, byte_encoder: bool = False) -> None:
        """Build ``llg`` now with ``slices`` and ``byte_encoder`` (no-op if it is built already): a
        process that only compiles and probes grammars (a compile worker) passes ``[]`` and True."""
        if "llg" not in self.__dict__:
            self.__dict__["llg"] = self.build_llg(slices, byte_encoder=byte_encoder)

    def build_llg(self, slices: list[str] | None = None, *, byte_encoder: bool = False) -> Any:
        """A new ``llguidance.LLTokenizer`` over this table. ``slices``: llguidance's token slices
        (None: its four defaults, ~35 MB at 152k tokens; ``ENGINE_SLICES``: the one that makes
        masks inside JSON strings fast; ``[]``: none, for a process that computes a few masks per
        grammar).
        ``byte_encoder``: where the table has no ``encode``, text is spelled one single-byte token
        at a time rather than by the greedy encoder, whose index costs ~10 MB at 152k tokens (for
        a process whose matchers never re-tokenise forced text)."""
        import llguidance

        tokens = _LlgTokens(self, byte_encoder)
        wrapper = llguidance.TokenizerWrapper(tokens)
        llg = llguidance.LLTokenizer(wrapper, n_vocab=self.vocab_size, eos_token=list(self.eos_token_ids),
                                     slices=slices)
        # The native tokenizer copied the table; the wrapper stays only as its encoder (``__call__``).
        tokens.tokens = tokens.special_token_ids = wrapper.tokens = wrapper.special_token_ids = ()
        return llg

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, vocab_size: int | None = None) -> TokenizerVocab:
        """Build from a ``radixlm.runtime.engine.tokenizer.Tokenizer`` (``id_to_bytes``, ``vocab_size``,
        ``eos_token_ids``, ``special_token_ids``, ``encode``)."""
        special = set(getattr(tokenizer, "special_token_ids", ()) or ())
        eos = [int(i) for i in tokenizer.eos_token_ids]
        special |= set(eos)
        if hasattr(tokenizer, "all_token_bytes"):
            raw = tokenizer.all_token_bytes()
        else:
            raw = [tokenizer.id_to_bytes(i) for i in range(tokenizer.vocab_size)]
        table = [None if i in special else b for i, b in enumerate(raw)]
        names = tuple((i, raw[i] or f"<special {i}>".encode()) for i in sorted(special) if i < len(raw))
        encode = getattr(tokenizer, "encode", None)
        plain = (lambda text: encode(text, add_special_tokens=False)) if encode is not None else None
        return cls.from_token_bytes(table, eos, vocab_size, special_names=names, encode=plain)

    @classmethod
    def from_token_bytes(
        cls, token_bytes: Sequence[bytes | None], eos_token_ids: Sequence[int], vocab_size: int | None = None,
        special_names: tuple[tuple[int, bytes], ...] = (), encode: Callable[[str], list[int]] | None = None,
    ) -> TokenizerVocab:
        """Build from an explicit table (index = token id; None = never generated inside a grammar)."""
        if not eos_token_ids:
            raise ValueError("eos_token_ids must name at least one token")
        n = len(token_bytes)
        vocab_size = n if vocab_size is None else int(vocab_size)
        if vocab_size < n:
            raise ValueError(f"vocab_size ({vocab_size}) is smaller than the tokenizer ({n} tokens)")
        bad = [e for e in eos_token_ids if not 0 <= e < n]
        if bad:
            raise ValueError(f"eos_token_ids {bad} are outside the tokenizer's {n} ids")
        eos_set = set(eos_token_ids)
        table = tuple(None if i in eos_set or not b else bytes(b) for i, b in enumerate(token_bytes))
        byte_tokens = [-1] * 256
        for i, b in enumerate(table):
            if b is not None and len(b) == 1 and byte_tokens[b[0]] < 0:
                byte_tokens[b[0]] = i
        return cls(table, tuple(int(e) for e in eos_token_ids), vocab_size, tuple(byte_tokens),
                   tuple(special_names), encode)

    def greedy_encode(self, data: bytes) -> list[int]:
        """Longest-match tokenisation of ``data`` over the table (no merges: a fallback)."""
        index = self._index
        out, i = [], 0
        while i < len(data):
            for j in range(min(len(data), i + MAX_TOKEN_BYTES), i, -1):
                tid = index.get(data[i:j])
                if tid is not None:
                    out.append(tid)
                    i = j
                    break
            else:
                raise ValueError(f"byte {data[i]:#x} has no token in this vocabulary")
        return out

    @functools.cached_property
    def _index(self) -> dict[bytes, int]:
        index: dict[bytes, int] = {}
        for i, b in enumerate(self.token_bytes):
            if b is not None:
                index.setdefault(b, i)
        return index


class _LlgTokens:
    """What ``llguidance.TokenizerWrapper`` reads: every id's bytes, EOS, the special ids and an
    encoder. Special tokens (None in the table) are listed as such, so grammars never emit them."""

    def __init__(self, vocab: TokenizerVocab, byte_encoder: bool = False) -> None:
        names = dict(vocab.special_names)
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        # Ids past the table exist only in the logits (padding): special, so never allowed.
        table = list(vocab.token_bytes) + [None] * (vocab.vocab_size - len(vocab.token_bytes))
        self.tokens = [b if b is not None else names.get(i, f"<special {i}>".encode()) for i, b in enumerate(table)]
        self.special_token_ids = [i for i, b in enumerate(table) if b is None]
        # Only what encoding needs is kept (the native tokenizer holds this encoder): with the byte
        # encoder and a token for every byte, not the table, so a worker can drop it.
        self._encode = vocab.encode
        self._byte_tokens = vocab.byte_tokens if byte_encoder else None
        complete = byte_encoder and min(vocab.byte_tokens) >= 0
        self._greedy = None if complete or vocab.encode is not None else vocab.greedy_encode

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if self._encode is not None:
            return list(self._encode(text))
        data = text.encode("utf-8")
        if self._byte_tokens is not None:
            ids = [self._byte_tokens[b] for b in data]
            if all(i >= 0 for i in ids):
                return ids
        return self._greedy(data)


T = TypeVar("T")


class LazyTables:
    """Named tables of one owner, built on first use (see the module docstring)."""

    __slots__ = ("_built", "_lock", "builds")

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}
        self._lock = threading.RLock()
        self.builds = 0  # tables built by ``get`` (each name once, unless dropped): a test's counter

    def get(self, name: str, build: Callable[[], T]) -> T:
        """The table ``name``, built by ``build()`` the first time it is asked for."""
        try:
            return self._built[name]
        except KeyError:
            pass
        with self._lock:
            if name not in self._built:
                self._built[name] = build()
                self.builds += 1
            return self._built[name]

    def peek(self, name: str) -> Any | None:
        """The table ``name`` if it is built, else None (builds nothing)."""
        return self._built.get(name)

    def drop(self, name: str) -> None:
        """Forget the table ``name`` (the next ``get`` builds it again)."""
        with self._lock:
            self._built.pop(name, None)

    def put(self, name: str, table: Any) -> None:
        """File ``table`` as ``name`` (replacing a built one)."""
        with self._lock:
            self._built[name] = table


class TableSlot:
    """One kind of table, seen from the module that builds it: ``of(owner, build)`` reads the
    owner's table (building it on first use); the owner holds it, in its ``tables``. Reads like a
    mapping keyed on the owner (``get``, ``[owner]``, ``pop``); ``clear()`` makes every owner build
    its table afresh on next use (the old ones are left to their owners)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._key = f"{name}#0"
        self._epoch = 0

    def of(self, owner: Any, build: Callable[[], T]) -> T:
        """``owner``'s table, built by ``build()`` the first time."""
        return owner.tables.get(self._key, build)

    def get(self, owner: Any, default: Any = None) -> Any:
        found = owner.tables.peek(self._key)
        return default if found is None else found

    def __getitem__(self, owner: Any) -> Any:
        found = owner.tables.peek(self._key)
        if found is None:
            raise KeyError(owner)
        return found

    def __setitem__(self, owner: Any, table: Any) -> None:
        owner.tables.put(self._key, table)

    def pop(self, owner: Any, default: Any = None) -> Any:
        found = self.get(owner, default)
        owner.tables.drop(self._key)
        return found

    def clear(self) -> None:
        self._epoch += 1
        self._key = f"{self.name}#{self._epoch}"
