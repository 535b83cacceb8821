"""Compile isolation: grammar compiles run in worker processes that the wall-time and memory
budgets, cancellation and shutdown can stop; pathological ``$ref`` schemas fail fast in the front
end with a JSON pointer; the cache and error pointers still hold across the process hop."""

from __future__ import annotations

import os
import pickle
import resource
import signal
import sys
import time

import pytest
from polling import wait_for
from radixlm.constrained import ConstraintError, GrammarBackend, TokenizerVocab, schema_to_grammar
from radixlm.constrained.compile.pool import CompileJob, CompilePool, ThreadCompilePool
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.runtime.engine.grammar_compiler import GrammarCompiler
from radixlm.runtime.sampling_params import SamplingParams

# A compile that spins for a minute in its worker (the hook below); other constraints compile as usual.
SLOW = SamplingParams(regex="slow:60")
HOOKED = "radixlm.constrained.testing.compile_hooks:slow_marked"
CHAIN = {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(999)} | {"d999": {"type": "string"}},
         "$ref": "#/$defs/d0"}
CYCLE = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
SELF_REQUIRED = {"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]}


@pytest.fixture(scope="module")
def backend(vocab):
    """One warm worker, default budgets (10 s, 4 GiB)."""
    b = GrammarBackend(vocab, num_workers=1)
    wait_for(lambda: len(b.pool.worker_pids()) == 1)
    yield b
    b.shutdown()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def fresh_backend(vocab, **kwargs) -> tuple[GrammarBackend, int]:
    """A backend with one started worker, and that worker's pid."""
    b = GrammarBackend(vocab, num_workers=1, compile_fn=HOOKED, **kwargs)
    wait_for(lambda: len(b.pool.worker_pids()) == 1)
    return b, b.pool.worker_pids()[0]


# ---- pathological schemas: answered by the front end, fast ------------------------------------

@pytest.mark.parametrize("schema, location, message", [
    (CYCLE, "#/$defs/b/$ref", "cyclic \\$ref #/\\$defs/a -> #/\\$defs/b -> #/\\$defs/a"),
    (SELF_REQUIRED, "#/properties/child/$ref", "no finite instance"),
    ({"$ref": "#"}, "#/$ref", "cyclic"),
    ({"type": "array", "items": {"$ref": "#"}, "minItems": 1}, "#/items/$ref", "no finite instance"),
    ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}}, "$ref": "#/$defs/a"},
     "#/$defs/a/allOf/0/$ref", "cyclic"),
])
def test_unresolvable_recursion_is_a_fast_error_with_a_pointer(backend, schema, location, message):
    with pytest.raises(ConstraintError, match=message) as err:
        backend.submit(SamplingParams(json_schema=schema)).result(timeout=10)
    assert err.value.location == location


def test_long_ref_chains_compile_or_fail_fast(backend):
    grammar = backend.submit(SamplingParams(json_schema=CHAIN)).result(timeout=10)
    assert grammar.matches('"abc"') and not grammar.matches("1")
    ring = {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{(i + 1) % 1000}"} for i in range(1000)}, "$ref": "#/$defs/d0"}
    with pytest.raises(ConstraintError, match=r"cyclic .*\(997 more\)"):
        schema_to_grammar(ring)
    # Structure at every link: the chain needs more nested expansions than the front end makes.
    deep = {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}", "minLength": 1} for i in range(999)}
            | {"d999": {"type": "string"}}, "$ref": "#/$defs/d0"}
    with pytest.raises(ConstraintError, match="32 nested \\$ref"):
        schema_to_grammar(deep)


def test_finite_recursion_still_compiles():
    optional = schema_to_grammar({"type": "object", "properties": {"child": {"$ref": "#"}},
                                  "additionalProperties": False})
    assert optional.recursive and optional.lark.count("child") <= 2 and len(optional.lark) < 200  # rules, not unrolled
    either = schema_to_grammar({"anyOf": [{"$ref": "#"}, {"type": "integer"}]})
    assert "[0-9]" in either.lark
    with pytest.raises(ConstraintError, match="unsatisfiable") as err:  # not blamed on the recursion
        schema_to_grammar({"properties": {"c": {"$ref": "#"}, "n": {"type": "integer", "minimum": 5, "maximum": 1}},
                         "required": ["n"]})
    assert err.value.location == "#"


# ---- budgets, cancel, shutdown: the worker process goes ----------------------------------------

def test_slow_compile_is_killed_at_the_budget_and_its_worker_replaced(vocab):
    b, pid = fresh_backend(vocab, compile_timeout_s=0.5)
    try:
        with pytest.raises(ConstraintError, match="0.5 s budget"):
            b.submit(SLOW).result(timeout=10)
            wait_for(lambda: gone(pid), 5)  # SIGKILLed and reaped: its CPU is free
        wait_for(lambda: len(b.pool.worker_pids()) == 1)
        assert b.pool.worker_pids() != [pid]
        assert b.stats["timeouts"] == 1
        # Timeouts are not cached; the replacement worker serves the next request.
        assert b.submit(SamplingParams(regex="[0-9]+")).result(timeout=10).matches("42")
        with pytest.raises(ConstraintError, match="budget"):
            b.submit(SLOW).result(timeout=10)
        assert b.stats["misses"] == 3
    finally:
        b.shutdown()


def test_cancel_stops_an_unshared_compile_only(vocab):
    b, pid = fresh_backend(vocab)
    try:
        first, second = b.submit(SLOW), b.submit(SLOW)  # one compile, shared through the cache
        time.sleep(0.3)
        assert first.cancel()
        time.sleep(0.3)
        assert not gone(pid) and b.stats["cancelled"] == 0  # still wanted by `second`
        assert second.cancel()
        wait_for(lambda: gone(pid), 5)
        assert b.stats["cancelled"] == 1
        assert b.submit(SamplingParams(regex="x+")).result(timeout=10).matches("xx")
        assert b.stats["hits"] == 1 and b.stats["misses"] == 2
    finally:
        b.shutdown()


def test_shutdown_returns_at_once_while_a_compile_runs(vocab):
    b, pid = fresh_backend(vocab)
    fut = b.submit(SLOW)
    queued = b.submit(SamplingParams(regex="y+"))  # waits behind the slow compile
    time.sleep(0.3)
    b.shutdown()
    for f in (fut, queued):
        with pytest.raises(ConstraintError, match="shut down"):
            f.result(timeout=5)
    wait_for(lambda: gone(pid), 5)
    with pytest.raises(ConstraintError, match="shut down"):
        b.submit(SamplingParams(regex="z")).result(timeout=1)


def test_memory_hungry_compile_fails_in_its_worker_not_the_parent(vocab):
    b, pid = fresh_backend(vocab, max_memory_mb=64)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # 256 MB held by the compile in its worker: the allocation fails there; the error names
        # the budget and this process never grows.
        with pytest.raises(ConstraintError, match="64 MB memory budget"):
            b.submit(SamplingParams(regex="alloc:256")).result(timeout=20)
        assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) < 50 * 1024  # KiB
        wait_for(lambda: gone(pid), 5)
        assert b.submit(SamplingParams(regex="[a-z]{0,20}")).result(timeout=10).matches("abc")
    finally:
        b.shutdown()


def test_python_memory_error_in_the_worker_is_a_constraint_error(vocab):
    done = []
    pool = CompilePool(vocab, num_workers=1, max_memory_mb=64,
                       compile_fn="radixlm.constrained.testing.compile_hooks:allocate")
    try:
        pool.submit(CompileJob(CompileRequest("regex", 256), done.append))
        pool.submit(CompileJob(CompileRequest("regex", 8), done.append))  # fits: the replacement compiles it
        wait_for(lambda: len(done) == 2)
        assert done[0].outcome == "memory" and "64 MB memory budget" in str(done[0].error)
        assert done[1].outcome == "ok" and done[1].parts.lark == 'start: /a/\n'
        assert pool.stats["workers_replaced"] == 1
    finally:
        pool.shutdown()


def test_workers_run_the_compile_modules_warm_up_before_their_first_job(vocab):
    """A worker calls its compile function's module-level ``warm_up`` once, before any job (the
    default's builds the pattern classes' Unicode tables there, not in a schema's compile)."""
    done = []
    pool = CompilePool(vocab, num_workers=1, compile_fn="radixlm.constrained.testing.compile_hooks:report_warm")
    try:
        for _ in range(2):
            pool.submit(CompileJob(CompileRequest("regex", ""), done.append))
        wait_for(lambda: len(done) == 2)
        assert [d.parts.lark for d in done] == ['start: /warm/\n'] * 2
    finally:
        pool.shutdown()


def test_the_backend_builds_the_member_checks_vocabulary_files_up_front(tokenizer):
    """The member check's per-vocabulary files (sorted tokens included: ~0.5 s at 152k) are
    built with the backend, not in the first checked mask's engine step."""
    from radixlm.constrained.masks import duplicate_items as unique_tables
    from radixlm.constrained.masks.refusable_tokens import member_tokens_for

    fresh = TokenizerVocab.from_tokenizer(tokenizer)  # a vocabulary no earlier test has touched
    b = GrammarBackend(fresh, num_workers=1)
    try:
        assert "_sorted" in member_tokens_for(fresh).__dict__  # the cached property is filled
        # and the unique arrays' tables of every start mode a unique array meets (not a
        # first request's mask: 55 ms at 152k for the first)
        assert set(unique_tables.WARM_STARTS) <= set(unique_tables._vocabs[fresh].tables)
    finally:
        b.shutdown()


def test_the_default_warm_up_builds_the_unicode_class_tables():
    from radixlm.constrained.compile import job as compile_job
    from radixlm.constrained.pattern import ecma as chars

    chars._python_class.cache_clear()
    compile_job.warm_up()
    assert chars._python_class.cache_info().currsize == 3
    assert (0x660, 0x669) in chars._python_class("\\d")  # Arabic-Indic digits: Python's \d is Unicode-wide


def test_python_cpu_loop_is_killed_too(vocab):
    done = []
    pool = CompilePool(vocab, num_workers=1, timeout_s=0.3, compile_fn="radixlm.constrained.testing.compile_hooks:spin")
    try:
        wait_for(lambda: len(pool.worker_pids()) == 1)
        pid = pool.worker_pids()[0]
        pool.submit(CompileJob(CompileRequest("regex", 60), done.append))
        wait_for(lambda: done, 5)
        assert done[0].outcome == "timeout"
        wait_for(lambda: gone(pid), 5)
    finally:
        pool.shutdown()


def test_a_worker_that_died_idle_costs_no_request(vocab):
    b, pid = fresh_backend(vocab)
    try:
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)  # dead (a zombie until its slot reaps it): the next job finds it gone
        assert b.submit(SamplingParams(regex="[ab]+")).result(timeout=20).matches("abba")
        assert b.pool.stats["workers_replaced"] == 1 and b.stats["errors"] == 0
    finally:
        b.shutdown()


# ---- what must not change ----------------------------------------------------------------------

def test_cache_hits_and_error_pointers_cross_the_process(backend):
    g = backend.submit(SamplingParams(json_schema={"type": "boolean"})).result(timeout=10)
    hits = backend.stats["hits"]
    assert backend.submit(SamplingParams(json_schema='{"type": "boolean"}')).result(timeout=10) is g
    bad = SamplingParams(json_schema={"type": "array", "uniqueItems": True, "minItems": 2,
                                       "items": {"type": "object"}})
    for _ in range(2):  # the second one is a cached error
        with pytest.raises(ConstraintError, match="#/uniqueItems") as err:
            backend.submit(bad).result(timeout=10)
        assert err.value.location == "#/uniqueItems" and err.value.keyword == "uniqueItems"
    assert backend.stats["hits"] == hits + 2
    assert g.compile_s > 0 and g.matcher().accept_token(g.vocab.byte_tokens[ord("t")])


def test_errors_pickle_with_their_pointer():
    err = pickle.loads(pickle.dumps(ConstraintError("too big", "#/properties/a", "items")))
    assert type(err) is ConstraintError and err.location == "#/properties/a/items"
    assert str(err) == "too big (at #/properties/a/items)"


def test_threads_are_the_fallback_without_an_executable(vocab, monkeypatch):
    monkeypatch.setattr(sys, "executable", "")
    b = GrammarBackend(vocab, compile_timeout_s=0.2, compile_fn=HOOKED)
    try:
        assert isinstance(b.pool, ThreadCompilePool)
        assert b.submit(SamplingParams(regex="[0-9]+")).result(timeout=10).matches("7")
        with pytest.raises(ConstraintError, match="budget"):
            b.submit(SamplingParams(regex="slow:2")).result(timeout=10)
    finally:
        b.shutdown()


def test_engine_glue_passes_the_memory_budget(tokenizer):
    compiler = GrammarCompiler(tokenizer, tokenizer.vocab_size, 10.0, max_memory_mb=128)
    try:
        assert compiler.backend().max_memory_mb == 128 and compiler.backend().pool.max_memory_mb == 128
    finally:
        compiler.close()
