"""The dashboard's routes on a live server: off by default, their shapes, the admin-key rules,
tenants kept apart, the shared prefix of a batch in the tree, the playground's token origins."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from polling import wait_for
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.dashboard import routes
from radixlm.runtime.server.dashboard.views import InspectedEngine
from radixlm.runtime.server.transport.state import ServerConfig

SHARED = "You are the dashboard test's assistant. Read the question and answer it briefly. "
SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lima", "Oslo"]},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["city", "age"], "additionalProperties": False}


def call(url: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def events(raw: bytes) -> list[dict[str, Any]]:
    frames = [f[len("data: "):] for f in raw.decode().split("\n\n") if f.startswith("data: ")]
    return [json.loads(f) for f in frames if f != "[DONE]"]


def generate(url: str, text: str | list[str], key: str | None = None, max_new_tokens: int = 4) -> Any:
    status, _, body = call(url, "/generate", {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens,
                                                                               "temperature": 0}}, key)
    assert status == 200, body
    return json.loads(body)


@pytest.fixture(scope="module")
def engine():
    # a fixed draft-row cost: the playground's forced drafts must not depend on the machine's load
    eng = Engine(max_total_tokens=16384, random_seed=0, enable_dashboard=True, speculative_row_cost=0.05)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def open_url(engine):
    with BackgroundServer(engine, ServerConfig(port=0)) as srv:
        yield srv.url


@pytest.fixture(scope="module")
def keyed_url(engine):
    with BackgroundServer(engine, ServerConfig(port=0, api_keys=("key-a", "key-b"), admin_api_key="admin-k")) as srv:
        yield srv.url


def test_engine_offers_the_inspection_the_dashboard_reads(engine):
    assert isinstance(engine, InspectedEngine)
    with pytest.raises(ValueError, match="max_nodes"):
        engine.inspect(max_nodes=0)


def test_off_by_default(server):
    for path in ("/dashboard", "/dashboard/dashboard.js", "/dashboard/api/info", "/dashboard/events"):
        status, _, body = call(server.url, path)
        assert status == 404, (path, body)
    assert call(server.url, "/dashboard/api/playground", {"prompt": "x"})[0] == 404


def test_page_and_assets_ship_without_a_cdn(open_url):
    status, headers, page = call(open_url, "/dashboard")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    html = page.decode()
    assert "http://" not in html and "https://" not in html  # every asset is served from here
    for name, kind in routes.ASSETS.items():
        status, headers, body = call(open_url, f"/dashboard/{name}")
        assert status == 200 and headers["Content-Type"].startswith(kind) and body, name
        assert f"/dashboard/{name}" in html
    static = Path(routes.__file__).parent / "static"
    for path in static.iterdir():  # data is written as text, never parsed as HTML
        text = path.read_text(encoding="utf-8")
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "document.write" not in text, path


def test_info_and_series_shapes(open_url):
    status, headers, body = call(open_url, "/dashboard/api/info")
    info = json.loads(body)
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert info["auth"] == "none" and info["host"] == "127.0.0.1" and info["loopback"] is True
    assert info["port"] == int(open_url.rsplit(":", 1)[1]) and info["inspect"] is True
    generate(open_url, "series warm-up")
    wait_for(lambda: len(json.loads(call(open_url, "/dashboard/api/series")[2])["samples"]) >= 2)
    sample = json.loads(call(open_url, "/dashboard/api/series")[2])["samples"][-1]
    for key in ("t", "prefill_tps", "decode_tps", "running", "queued", "kv_usage", "hit_rate",
                "ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99"):
        assert key in sample, key


def test_tree_shows_the_shared_prefix_of_a_batch(open_url):
    generate(open_url, [SHARED + q for q in ("What is red?", "Why is the sky blue?", "Name a fish.")])
    view = json.loads(call(open_url, "/dashboard/api/inspect?max_nodes=32")[2])
    nodes = [n for ns in view["tree"]["namespaces"] for n in ns["nodes"]]
    shared = [n for n in nodes if "dashboard test's assistant" in n["text"] and n["children"] >= 3]
    assert shared, [n["text"] for n in nodes]
    node = shared[0]
    assert node["subtree_tokens"] > node["tokens"] and node["hits"] >= 3 and node["locks"] == 0
    kids = [n for n in nodes if n["parent"] == node["id"]]
    assert len(kids) >= 3 and all(n["depth"] == node["depth"] + node["tokens"] for n in kids)
    recent = view["requests"][-3:]
    assert all(r["prompt_tokens"] > r["cached_tokens"] >= 0 and r["finish_reason"] == "length" for r in recent)
    assert sum(r["cached_tokens"] for r in recent) > 0  # the batch's later prompts hit the first's prefix
    later = json.loads(call(open_url, f"/dashboard/api/inspect?requests_since={view['request_seq']}")[2])
    assert later["requests"] == []


def test_prompt_text_comes_back_as_data_not_markup(open_url):
    hostile = "<img src=x onerror=alert(1)> & </script><script>alert(2)</script>"
    generate(open_url, hostile)
    status, headers, body = call(open_url, "/dashboard/api/inspect?max_nodes=64")
    assert headers["Content-Type"].startswith("application/json") and headers["X-Content-Type-Options"] == "nosniff"
    texts = [n["text"] for ns in json.loads(body)["tree"]["namespaces"] for n in ns["nodes"]]
    assert any("<img src=x onerror=alert(1)>" in t for t in texts)  # verbatim: the page writes textContent


@pytest.mark.parametrize("path", ["/dashboard/api/inspect?max_nodes=abc", "/dashboard/api/inspect?max_nodes=0",
                                  "/dashboard/api/inspect?events_since=-1"])
def test_bad_query_values_name_the_parameter(open_url, path):
    status, _, body = call(open_url, path)
    err = json.loads(body)["error"]
    assert status == 400 and err["param"] == path.split("?")[1].split("=")[0]


def test_keyed_server_needs_the_admin_key_for_data_but_not_for_the_page(keyed_url):
    assert call(keyed_url, "/dashboard")[0] == 200
    assert call(keyed_url, "/dashboard/charts.js")[0] == 200
    for path in ("/dashboard/api/info", "/dashboard/api/series", "/dashboard/api/inspect", "/dashboard/events"):
        assert call(keyed_url, path)[0] == 401, path
        status, _, body = call(keyed_url, path, key="key-a")
        err = json.loads(body)["error"]
        assert status == 403 and err["code"] == "admin_only" and "admin key" in err["message"], path
    status, _, body = call(keyed_url, "/dashboard/api/playground", {"prompt": "hi"}, key="key-b")
    assert status == 403
    status, _, body = call(keyed_url, "/dashboard/api/info", key="admin-k")
    info = json.loads(body)
    assert status == 200 and info["auth"] == "api-keys" and info["tenants"] is True


def test_tenants_are_labelled_and_never_mixed(keyed_url):
    prompt = "The same words from two tenants, cached twice and never shared."
    generate(keyed_url, prompt, key="key-a")
    generate(keyed_url, prompt, key="key-b")
    b = generate(keyed_url, prompt, key="key-b")
    assert b["meta_info"]["cached_tokens"] > 0
    view = json.loads(call(keyed_url, "/dashboard/api/inspect?max_nodes=64", key="admin-k")[2])
    holding = [ns for ns in view["tree"]["namespaces"]
               if any("cached twice" in n["text"] for n in ns["nodes"])]
    tenants = {ns["tenant"] for ns in holding}
    assert len(holding) == 2 and len(tenants) == 2 and None not in tenants
    labels = {ns["label"] for ns in holding}
    assert len(labels) == 2 and all(label.startswith("tenant ") for label in labels)
    assert "key-a" not in json.dumps(view) and "key-b" not in json.dumps(view)  # keys never shown
    assert {r["tenant"] for r in view["requests"][-3:]} == tenants


def test_playground_streams_origins_and_the_parsed_json(open_url):
    body = {"messages": [{"role": "user", "content": "A person as JSON."}], "json_schema": SCHEMA,
            "max_new_tokens": 48, "temperature": 0.7, "seed": 3}
    status, headers, raw = call(open_url, "/dashboard/api/playground", body)
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    evs = events(raw)
    assert evs[0]["type"] == "prompt" and evs[0]["tokens"] and evs[0]["cached"] >= 0
    answer: list[dict[str, str]] = []
    for ev in evs[1:-1]:
        assert ev["type"] == "tokens"
        answer = answer[: ev["offset"]] + ev["tokens"]
    done = evs[-1]
    assert done["type"] == "done" and "".join(t["text"] for t in answer) == done["text"]
    origins = {t["origin"] for t in answer}
    assert "forced" in origins and "masked" in origins and origins <= {"forced", "drafted", "masked", "closed"}
    assert done["forced_tokens"] == sum(t["origin"] == "forced" for t in answer) > 0
    assert done["json"] == json.loads(done["text"]) and done["json"]["city"] in ("Paris", "Lima", "Oslo")


def test_playground_regex_and_free_sampling(open_url):
    evs = events(call(open_url, "/dashboard/api/playground", {"prompt": "Say", "regex": "(yes|no)!",
                                                             "temperature": 0})[2])
    assert evs[-1]["type"] == "done" and evs[-1]["text"] in ("yes!", "no!") and evs[-1]["json"] is None
    evs = events(call(open_url, "/dashboard/api/playground", {"prompt": "Say", "max_new_tokens": 5})[2])
    assert {t["origin"] for ev in evs if ev["type"] == "tokens" for t in ev["tokens"]} == {"free"}


def test_the_request_log_counts_a_playground_run(open_url, caplog):
    caplog.set_level("INFO", logger="radixlm.server.requests")
    done = events(call(open_url, "/dashboard/api/playground", {"prompt": "Count", "max_new_tokens": 5})[2])[-1]
    assert done["type"] == "done" and done["completion_tokens"] > 0

    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("/dashboard/api/playground")]

    wait_for(lambda: logged())  # the line is written when the handler returns
    assert f"completion_tokens={done['completion_tokens']} " in logged()[-1], logged()
    assert "prompt_tokens=0 " not in logged()[-1]


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "prompt"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "max_new_tokens": 0}, "max_new_tokens"),
    ({"prompt": "x", "regex": "a", "json_schema": {}}, "regex"),
    ({"prompt": "x", "tools": [{"type": "function"}]}, "tools[0].function"),
    ({"prompt": "x", "unknown_field": 1}, "unknown_field"),
])
def test_playground_bad_input_is_a_400_naming_the_field(open_url, body, param):
    status, _, raw = call(open_url, "/dashboard/api/playground", body)
    err = json.loads(raw)["error"]
    assert status == 400 and err["param"] == param, err


def test_event_stream_sends_the_series_then_live_inspections(open_url):
    req = urllib.request.Request(open_url + "/dashboard/events?max_nodes=8")
    seen: list[str] = []
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        buffer = b""
        while "samples" not in seen or seen.count("inspect") < 2:
            buffer += resp.read1(65536)
            while b"\n\n" in buffer:
                frame, buffer = buffer.split(b"\n\n", 1)
                ev = json.loads(frame[len(b"data: "):])
                seen.append(ev["type"])
                if ev["type"] == "inspect":
                    assert {"tree", "evictions", "requests", "grammars", "eviction_seq"} <= set(ev)
    assert seen[:2] == ["series", "inspect"]  # the panels are filled at first paint, not a tick later


def test_first_events_fill_every_panel_at_once(open_url):
    """The stream opens with the history and a whole inspection (earlier requests included)."""
    generate(open_url, "first paint warm-up")
    wait_for(lambda: len(json.loads(call(open_url, "/dashboard/api/series")[2])["samples"]) >= 1)
    with urllib.request.urlopen(urllib.request.Request(open_url + "/dashboard/events"), timeout=60) as resp:
        buffer = b""
        while buffer.count(b"\n\n") < 2:
            buffer += resp.read1(65536)
    series, inspect = (json.loads(f[len(b"data: "):]) for f in buffer.split(b"\n\n")[:2])
    assert series["type"] == "series" and series["samples"]
    assert inspect["type"] == "inspect" and inspect["requests"] and inspect["tree"]["namespaces"]


class _Sessions:
    """Client sessions from several loopback addresses (127.0.0.2, ...), so that many streams stay
    under the server's per-client connection cap; ``get`` spreads requests over them."""

    def __init__(self, count: int) -> None:
        import aiohttp

        self.sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(
            limit=0, local_addr=(f"127.0.0.{2 + i}", 0))) for i in range(count)]
        self.n = 0

    def get(self, url: str):
        self.n += 1
        return self.sessions[self.n % len(self.sessions)].get(url)

    async def close(self) -> None:
        for session in self.sessions:
            await session.close()


async def _open_streams(url: str, n: int) -> tuple[list[int], list[Any], _Sessions]:
    session = _Sessions(max(1, n // 40))
    responses = await asyncio.gather(*(session.get(url + "/dashboard/events") for _ in range(n)))
    return [r.status for r in responses], responses, session


def test_event_streams_share_one_feed_and_are_capped(engine, open_url):
    """MAX_SUBSCRIBERS open streams and one more: the extra one gets 503, /health stays 200, and the
    engine is inspected per tick, not per stream (counted, not timed)."""
    from radixlm.runtime.server.dashboard.feed import INSPECT_EVERY, MAX_SUBSCRIBERS

    calls = []
    original = engine.inspect

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    async def scenario():
        engine.inspect = counted
        try:
            statuses, responses, session = await _open_streams(open_url, MAX_SUBSCRIBERS + 1)
            try:
                assert sorted(statuses) == [200] * MAX_SUBSCRIBERS + [503], statuses
                refused = next(r for r in responses if r.status == 503)
                assert (await refused.json())["error"]["code"] == "too_many_streams"
                assert refused.headers["Retry-After"]
                async with session.get(open_url + "/health") as health:
                    assert health.status == 200
                opened = [r for r in responses if r.status == 200]
                firsts = [await r.content.readuntil(b"\n\n") + await r.content.readuntil(b"\n\n")
                          for r in opened]
                assert all(b'"type": "series"' in f and b'"type": "inspect"' in f for f in firsts)
                before = len(calls)
                for r in opened:  # the streams' next inspection: one computation for all of them
                    while b'"type": "inspect"' not in await r.content.readuntil(b"\n\n"):
                        pass
                assert len(calls) - before <= 2, (len(calls), before)  # at most the tick's and the next's
                assert before <= 1 + MAX_SUBSCRIBERS // INSPECT_EVERY  # the first paints shared one too
            finally:
                for r in responses:
                    r.close()
                await session.close()
        finally:
            engine.inspect = original

    asyncio.run(scenario())


@pytest.mark.slow
def test_five_hundred_dashboard_streams_leave_health_fast(open_url):
    """500 clients open the stream at once (past the cap: most are refused): /health's median
    latency stays within 100 ms of its idle figure (timed: slow run only)."""
    import time

    from radixlm.runtime.server.dashboard.feed import MAX_SUBSCRIBERS

    def health_ms() -> float:
        start = time.perf_counter()
        assert call(open_url, "/health")[0] == 200
        return (time.perf_counter() - start) * 1000

    idle = sorted(health_ms() for _ in range(20))[10]

    async def scenario() -> float:
        opening = asyncio.ensure_future(_open_streams(open_url, 500))
        samples = []
        while not opening.done():
            samples.append(await asyncio.to_thread(health_ms))
        statuses, responses, session = await opening
        for _ in range(10):
            samples.append(await asyncio.to_thread(health_ms))
        for r in responses:
            r.close()
        await session.close()
        assert statuses.count(200) <= MAX_SUBSCRIBERS and set(statuses) <= {200, 503}
        return sorted(samples)[len(samples) // 2]

    busy = asyncio.run(scenario())
    print(f"/health median: idle {idle:.1f} ms, with 500 streams opening {busy:.1f} ms")
    assert busy - idle < 100, (idle, busy)


def test_generate_returns_token_origins_only_when_asked(open_url):
    params = {"max_new_tokens": 24, "json_schema": json.dumps(SCHEMA), "temperature": 0}
    plain = json.loads(call(open_url, "/generate", {"text": "City:", "sampling_params": params})[2])
    assert "token_origins" not in plain["meta_info"]
    status, _, raw = call(open_url, "/generate", {"text": "City:", "sampling_params": {
        **params, "return_token_origins": True}})
    meta = json.loads(raw)["meta_info"]
    marks = meta["token_origins"]
    assert status == 200 and marks["offset"] == 0 and len(marks["origins"]) == meta["completion_tokens"]
    assert marks["prompt"]["cache"] + marks["prompt"]["prefill"] == meta["prompt_tokens"]
    assert set(marks["origins"]) <= {"masked", "forced", "drafted", "closed"} and "forced" in marks["origins"]
    status, _, raw = call(open_url, "/generate", {"text": "x", "sampling_params": {"return_token_origins": "yes"}})
    assert status == 400 and json.loads(raw)["error"]["param"] == "sampling_params.return_token_origins"


def test_without_a_radix_cache_the_tree_says_so():
    with Engine(max_total_tokens=2048, random_seed=0, enable_dashboard=True, disable_radix_cache=True) as eng, \
            BackgroundServer(eng, ServerConfig(port=0)) as srv:
        generate(srv.url, "no cache here")
        view = json.loads(call(srv.url, "/dashboard/api/inspect")[2])
        assert view["radix_cache"] is False and view["tree"] is None and view["evictions"] == []
        assert view["requests"][-1]["cached_tokens"] == 0
        assert json.loads(call(srv.url, "/dashboard/api/info")[2])["radix_cache"] is False
