"""The interpreter: executes a program state's expressions, in order, on a worker thread.

The host thread running the user's Python only enqueues expressions, so ``s += gen(...)`` returns
at once and many states (forks, batch members) have requests in flight together, which the engine
batches. Reading ``s["x"]`` blocks on that variable's event. After an error the worker skips the
rest of the queue; the error is re-raised wherever a missing variable is read.

A running state's text (or one variable) is read as it grows with :class:`TextReader`: the
interpreter appends each streamed chunk's text and records its ``meta_info`` in the executor's
``stream_log`` under the same lock, so a reader sees text and meta info consistently. Logprob
lists in a chunk's meta info cover only that chunk's tokens; chunks whose meta info arrived
without new text are merged into the next piece a reader yields (as SGLang does), so no token's
logprob is lost.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any

from radixlm.lang import ir
from radixlm.lang.backends import ChatContext
from radixlm.lang.choices import run_select

# Meta-info lists that a stream delivers piecewise (SGLang's incremental streaming keys).
INCREMENTAL_KEYS = ("output_token_logprobs", "output_top_logprobs", "output_token_ids_logprobs")


@dataclass(eq=False)
class _Raise(ir.Expr):
    """Internal: fail the state with ``error`` when reached (a joined child failed)."""

    error: BaseException


_END = object()


class StreamExecutor:
    """Holds one state's text, messages and variables and runs its expression queue.

    ``defaults`` are the run's sampling params (SGLang names); ``logprob_defaults`` the run's
    ``return_logprob`` family. With ``stream=True`` gens stream their text into the state.
    """

    def __init__(self, backend: Any, defaults: dict[str, Any], logprob_defaults: dict[str, Any],
                 stream: bool = False, prefill: bool = True, blocking: bool = False):
        self.backend = backend
        self.blocking = blocking  # SGLang's use_thread=False: each append runs before returning
        self.defaults = defaults
        self.logprob_defaults = logprob_defaults
        self.stream = stream
        self.prefill = prefill
        self.text_ = ""
        self.messages_: list[dict[str, str]] = []
        self.cur_role: str | None = None
        self.role_start = 0
        self.variables: dict[str, Any] = {}
        self.partial: dict[str, str] = {}  # streaming values of gens still running
        self.stream_log: list[tuple[str | None, dict]] = []  # (gen name, meta info) per streamed chunk
        self.meta_info: dict[str, Any] = {}
        self.events: dict[str, threading.Event] = {}
        self.scopes: dict[str, int] = {}
        self.new_vars: list[str] = []  # names set since this state was created (for join)
        self.fork_start = 0
        self.error_: BaseException | None = None
        self.finished = False
        self.cond = threading.Condition()
        self._queue: queue.Queue = queue.Queue()
        self._worker_alive = False
        self._submit_lock = threading.Lock()

    # ---- host side -------------------------------------------------------------------------
    def submit(self, value: Any) -> None:
        """Enqueue a string or expression; names it will define become pending at once."""
        for expr in ir.to_exprs(value):
            for name in _defines(expr):
                with self.cond:
                    self.events[name] = threading.Event()
                    if self.error_ is not None:
                        self.events[name].set()
            with self._submit_lock:
                self.finished = False
                self._queue.put(expr)
                if not self._worker_alive:
                    self._worker_alive = True
                    threading.Thread(target=self._loop, daemon=True, name="radixlm-lang").start()
        if self.blocking:
            self.sync()

    def end(self) -> None:
        """Mark the end of the program (streams finish once everything before it ran)."""
        with self._submit_lock:
            self._queue.put(_END)
            if not self._worker_alive:
                self._worker_alive = True
                threading.Thread(target=self._loop, daemon=True, name="radixlm-lang").start()

    def sync(self) -> None:
        """Wait until every submitted expression has run."""
        self._queue.join()

    def get_var(self, name: str) -> Any:
        """The value of ``name``, waiting for the expression that sets it; re-raises its failure."""
        event = self.events.get(name)
        if event is None:
            if name in self.variables:
                return self.variables[name]
            known = sorted(set(self.variables) | set(self.events))
            raise KeyError(f"unknown variable {name!r}; defined variables: {known}")
        event.wait()
        if getattr(event, "ok", False):
            return self.variables[name]
        raise self.error_ if self.error_ is not None else KeyError(f"variable {name!r} was never set")

    def fork(self, n: int) -> list[StreamExecutor]:
        """``n`` children starting from this state's text; the shared prefix is pre-filled once."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"fork size must be a positive integer, got {n!r}")
        self.sync()
        if self.prefill and n > 1 and self.text_ and self.error_ is None:
            self.backend.generate(self.text_, {"max_new_tokens": 0})
        children = []
        for _ in range(n):
            child = StreamExecutor(self.backend, self.defaults, self.logprob_defaults, False, self.prefill)
            child.text_, child.fork_start = self.text_, len(self.text_)
            child.messages_ = [dict(m) for m in self.messages_]
            child.cur_role, child.role_start = self.cur_role, self.role_start
            child.variables, child.meta_info = dict(self.variables), dict(self.meta_info)
            child.scopes, child.error_ = dict(self.scopes), self.error_
            children.append(child)
        return children

    # ---- worker side -----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            expr = self._queue.get()
            try:
                if expr is _END:
                    with self.cond:
                        self.finished = True
                        self.cond.notify_all()
                elif self.error_ is None:
                    self._execute(expr)
            except Exception as e:  # surfaces from s[name] and s.error()
                self._fail(e)
            finally:
                self._queue.task_done()
            with self._submit_lock:
                if self._queue.empty():
                    self._worker_alive = False
                    return

    def _fail(self, error: BaseException) -> None:
        with self.cond:
            self.error_ = error
            for event in self.events.values():
                event.set()
            self.cond.notify_all()

    def _append(self, text: str) -> None:
        with self.cond:
            self.text_ += text
            self.cond.notify_all()

    def _set_var(self, name: str, value: Any, meta: Any = None) -> None:
        with self.cond:
            self.variables[name] = value
            if meta is not None:
                self.meta_info[name] = meta
            self.partial.pop(name, None)
            if name not in self.new_vars:
                self.new_vars.append(name)
            event = self.events.setdefault(name, threading.Event())
            event.ok = True  # set by a success, not by _fail
            event.set()
            self.cond.notify_all()

    def _execute(self, expr: ir.Expr) -> None:
        if isinstance(expr, ir.Text):
            self._append(expr.value)
        elif isinstance(expr, ir.Gen):
            self._gen(expr)
        elif isinstance(expr, ir.Select):
            decision = run_select(self.backend, self.text_, expr.choices, expr.method, expr.temperature)
            self._result(expr, decision.decision, decision.meta_info)
        elif isinstance(expr, ir.RoleBegin):
            self._role_begin(expr.role)
        elif isinstance(expr, ir.RoleEnd):
            self._role_end(expr.role)
        elif isinstance(expr, ir.VarScopeBegin):
            self.scopes[expr.name] = len(self.text_)
        elif isinstance(expr, ir.VarScopeEnd):
            if expr.name not in self.scopes:
                raise ValueError(f"var_scope_end({expr.name!r}) without a matching begin")
            self._set_var(expr.name, self.text_[self.scopes.pop(expr.name):])
        elif isinstance(expr, ir.SetVar):
            self._set_var(expr.name, expr.value, expr.meta)
        elif isinstance(expr, _Raise):
            raise expr.error
        else:
            raise TypeError(f"cannot execute {type(expr).__name__} in a running program")

    def _gen(self, expr: ir.Gen) -> None:
        params = {**self.defaults, **expr.params}
        options = {**self.logprob_defaults, **expr.logprob}  # the logprob family (+ chat for chat APIs)
        if self.backend_context_wanted():
            options["chat"] = self.chat_context()
        # n > 1 samples are not streamed: the variable is their list, complete at once; nor is a
        # separate_reasoning gen: its thinking must never reach the text (or a reader of it)
        if self.stream and params.get("n", 1) == 1 and expr.reasoning is None:
            self._gen_stream(expr, params, options)
            return
        out = self.backend.generate(self.text_, params, **options)
        if isinstance(out, list):  # n > 1: SGLang keeps every sample, the text takes the first
            self._result(expr, [o["text"] for o in out], [o["meta_info"] for o in out])
        else:
            self._result(expr, out["text"], out["meta_info"])

    def _gen_stream(self, expr: ir.Gen, params: dict[str, Any], options: dict[str, Any]) -> None:
        name, value, merged = expr.name, "", None
        for delta, chunk_meta in self.backend.generate_stream(self.text_, params, **options):
            merged = merge_stream_meta(merged, chunk_meta)
            with self.cond:  # text and meta info together, so readers see them consistently
                self.text_ += delta
                value += delta
                if name:
                    self.partial[name] = value
                self.stream_log.append((name, chunk_meta))
                self.cond.notify_all()
        self._result(expr, value, merged if merged is not None else {}, streamed=True)

    def _result(self, expr: ir.Gen | ir.Select, value: Any, meta: Any, streamed: bool = False) -> None:
        """Append ``value`` (unless ``streamed``: the text already holds it) and store it as the
        expression's variable; with ``separate_reasoning``, only its answer, the thinking apart."""
        thought = None
        if expr.reasoning is not None:
            value, thought = self._split(expr.reasoning, value)
        if not streamed:
            self._append(value[0] if isinstance(value, list) else value)
        if expr.name:
            self._set_var(expr.name, value, meta)
            if thought is not None:
                self._set_var(ir.reasoning_var(expr.name), thought)

    def _split(self, model_type: str, value: Any) -> tuple[Any, Any]:
        """(answer, thinking) of ``value`` (lists of them for n > 1), which continues the text."""
        from radixlm.runtime.chat_formats.reasoning.registry import get_format  # lazily: the parsers

        fmt = get_format(model_type)
        state = fmt.prompt_state(self.text_)
        splits = [fmt.parse(v, state) for v in (value if isinstance(value, list) else [value])]
        answers, thoughts = [x.content for x in splits], [x.reasoning for x in splits]
        return (answers, thoughts) if isinstance(value, list) else (answers[0], thoughts[0])

    def backend_context_wanted(self) -> bool:
        """Whether the backend needs the conversation (a chat API) besides the text."""
        return bool(getattr(self.backend, "needs_chat_context", False))

    def chat_context(self) -> ChatContext:
        """The finished turns, and whether the current position opens an assistant turn."""
        at_start = self.cur_role == "assistant" and len(self.text_) == self.role_start
        return ChatContext([dict(m) for m in self.messages_], at_start)

    def _role_begin(self, role: str) -> None:
        if self.cur_role is not None:
            raise ValueError(f"cannot begin role {role!r} inside role {self.cur_role!r}; end it first")
        first = not self.messages_ and not self.text_
        self._append(self.backend.role_template.prefix(role, first=first))
        self.cur_role, self.role_start = role, len(self.text_)

    def _role_end(self, role: str) -> None:
        if self.cur_role != role:
            raise ValueError(f"role_end({role!r}) does not match the open role {self.cur_role!r}")
        self.messages_.append({"role": role, "content": self.text_[self.role_start:]})
        self._append(self.backend.role_template.suffix(role))
        self.cur_role = None


def _defines(expr: ir.Expr) -> list[str]:
    """The variable names an expression will set."""
    if isinstance(expr, (ir.Gen, ir.Select)) and expr.name and expr.reasoning:
        return [expr.name, ir.reasoning_var(expr.name)]
    if isinstance(expr, (ir.Gen, ir.Select, ir.VarScopeBegin, ir.SetVar)):
        return [expr.name] if expr.name else []
    return []


# ---- reading the text as it grows ------------------------------------------------------------


def merge_stream_meta(pending: dict | None, meta: dict | None) -> dict | None:
    """``meta`` on top of ``pending``: the newest value of each field, incremental lists joined."""
    if pending is None:
        return dict(meta) if meta is not None else None
    if meta is None:
        return pending
    merged = {**pending, **meta}
    for key in INCREMENTAL_KEYS:
        if key in pending or key in meta:
            merged[key] = list(pending.get(key) or []) + list(meta.get(key) or [])
    return merged


class TextReader:
    """Successive pieces of the state's text (``var=None``) or of variable ``var``."""

    def __init__(self, executor: Any, var: str | None):
        self.ex = executor
        self.var = var
        self.pos = 0  # characters already returned
        self.log_pos = 0  # stream_log entries already merged into a returned piece
        self.saw_chunks = False

    def next_piece(self) -> tuple[str, dict | None, bool]:
        """Wait for new text; return (text, meta info of the chunks in it, whether the source is done).

        At the end the text may be empty while meta info (e.g. the finish reason) is still pending.
        """
        ex = self.ex
        with ex.cond:
            while True:
                state = self._current()
                if state is not None:
                    current, done = state
                    if len(current) > self.pos or done:
                        piece, self.pos = current[self.pos:], len(current)
                        return piece, self._take_meta(done), done
                ex.cond.wait()

    def _current(self) -> tuple[str, bool] | None:
        """(text so far, done), or None while ``var`` is not known yet; KeyError once it never will be."""
        ex = self.ex
        if self.var is None:
            return ex.text_, ex.finished or ex.error_ is not None
        event = ex.events.get(self.var)
        if event is None and self.var not in ex.variables:
            if ex.finished or ex.error_ is not None:
                raise KeyError(f"unknown variable {self.var!r}")
            return None
        done = event is None or event.is_set()
        current = ex.variables.get(self.var, "") if done else ex.partial.get(self.var, "")
        if isinstance(current, list):  # gen(n>1): the text continues with the first sample
            current = current[0] if current else ""
        return (current if isinstance(current, str) else str(current)), done

    def _take_meta(self, done: bool) -> dict | None:
        merged = None
        log = self.ex.stream_log
        for name, meta in log[self.log_pos:]:
            if self.var is None or name == self.var:
                merged = merge_stream_meta(merged, meta)
                self.saw_chunks = True
        self.log_pos = len(log)
        if merged is None and done and not self.saw_chunks and self.var is not None:
            # The gen ran without streaming: its whole meta info comes with its whole value.
            merged = self.ex.meta_info.get(self.var)
        return merged
