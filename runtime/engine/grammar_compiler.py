"""Constrained decoding inside the engine loop: compile, accept, jump forward, validate.

- ``start``: a constrained request's grammar compiles in the backend's worker thread; the request
  waits outside the scheduler (others keep running) until ``poll`` sees the future resolve.
  A compile error or timeout fails just that request with the ``ConstraintError`` message.
- ``on_token``: after each sampled token the matcher accepts it; a terminated matcher finishes the
  request (``stop``; ``matched`` is the EOS id when EOS ended it, else None).
- ``jump_forward``: when the grammar forces a continuation, drop ``num_drop`` output tokens and
  append the re-tokenised forced text; the request is re-queued (its KV goes into the radix
  cache first) so one extend step computes all forced tokens instead of one decode per token.
- ``finish``: with ``strict=False`` the final text is validated and any violations reported in
  ``meta_info["constraint_violations"]``.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.scheduler import Scheduler


class GrammarHooks:
    """Owns the ``GrammarBackend`` (created on the first constrained request)."""

    def __init__(self, tokenizer: Any, vocab_size: int, compile_timeout_s: float,
                 enable_jump_forward: bool, make_detokenizer: Any, max_regex_chars: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.compile_timeout_s = compile_timeout_s
        self.max_regex_chars = max_regex_chars
        self.enable_jump_forward = enable_jump_forward
        self.make_detokenizer = make_detokenizer
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids)
        self._backend = None

    def backend(self) -> Any:
        if self._backend is None:
            from radixlm.constrained import GrammarBackend, TokenizerVocab

            vocab = TokenizerVocab.from_tokenizer(self.tokenizer, vocab_size=self.vocab_size)
            self._backend = GrammarBackend(vocab, compile_timeout_s=self.compile_timeout_s,
                                           max_regex_chars=self.max_regex_chars)
        return self._backend

    def close(self) -> None:
        if self._backend is not None and hasattr(self._backend, "shutdown"):
            self._backend.shutdown()

    # ------------------------------------------------------------------ compile

    def start(self, req: Req) -> None:
        try:
            req.grammar_future = self.backend().submit(req.params)
        except Exception as e:  # noqa: BLE001 - the request fails, the engine goes on
            req.error = e if isinstance(e, ValueError) else ValueError(f"constraint: {e}")

    def poll(self, req: Req, admit: Any, fail: Any) -> bool:
        """True once the request left the pending list (admitted, or failed via ``fail``)."""
        if req.error is None:
            future = req.grammar_future
            if not future.done():
                return False
            try:
                req.grammar = future.result().matcher()
            except Exception as e:  # noqa: BLE001 - ConstraintError, timeout: this request only
                req.error = e if isinstance(e, ValueError) else ValueError(f"constraint: {e}")
        if req.error is not None:
            req.finish("abort", message=str(req.error))
            fail(req)
        else:
            admit(req)
        return True

    def cancel(self, req: Req) -> None:
        if req.grammar_future is not None:
            req.grammar_future.cancel()

    # ------------------------------------------------------------------ decoding

    def on_token(self, req: Req, token: int) -> None:
        matcher = req.grammar
        if matcher is None:
            return
        if not matcher.accept_token(token):
            if token in self.eos_token_ids:
                req.finish("stop", token)
            else:
                req.finish("abort", message=f"constraint rejected sampled token {token}")
        elif matcher.is_terminated():
            req.finish("stop", token if token in self.eos_token_ids else None)

    def jump_forward(self, req: Req, scheduler: Scheduler) -> bool:
        """Splice forced tokens into ``req``; True if that finished it (caller emits it)."""
        if not self.enable_jump_forward or req.params.disable_jump_forward:
            return False
        from radixlm.constrained import jump_forward

        jf = jump_forward(req.grammar, self.tokenizer, req.output_ids)
        if jf is None or (not jf.new_ids and not jf.num_drop):
            return False
        room = req.params.max_new_tokens - (req.output_len - jf.num_drop)
        new_ids = list(jf.new_ids)[:max(room, 0)]
        scheduler.requeue(req)  # releases the KV under the old ids before they change
        req.grammar.rollback(jf.num_drop)
        for token in new_ids:
            req.grammar.accept_token(token)
        req.replace_tail(jf.num_drop, new_ids, self.make_detokenizer(req))
        if req.grammar.is_terminated():
            req.finish("stop")
        else:
            scheduler.stop_checker.check(req, num_new=max(len(new_ids), 1))
        if req.finished:
            scheduler.waiting.remove(req)
            return True
        return False

    # ------------------------------------------------------------------ finish

    def finish(self, req: Req) -> None:
        if req.grammar is None or req.params.strict or req.error is not None:
            return
        from radixlm.runtime.scheduler.stop_checker import StopChecker

        req.constraint_violations = req.grammar.grammar.validate_output(StopChecker.final_text(req))
