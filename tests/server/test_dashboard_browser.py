"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by selenium) against a live tiny server under a small load. The first paint fills the tree,
the recent requests and the grammar cache (a screenshot taken at once shows them). The charts receive data, the
tree shows the shared prefix of a batch, the playground streams a schema-constrained answer with
its origin colours and the parsed JSON, and the browser console logs no error.

Skips, naming what is missing, without ``/usr/bin/chromium``, ``chromedriver`` or selenium
(``.ci/run`` installs the browser with apt-get when it can).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import urllib.request
from pathlib import Path

import pytest
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

CHROMIUM = "/usr/bin/chromium"
SHARED = "Every request of this browser test shares this long system prompt about the radix tree. "
QUESTIONS = ("What is a prefix?", "Why cache it?", "Who evicts?", "When is it locked?")
HOSTILE = "<img src=/never-loaded onerror=window.__pwned=1> prompt text is data, not markup"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1500,2200")


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (apt-get install chromium chromium-driver)"
    if shutil.which("chromedriver") is None:
        return "chromedriver is missing (apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is missing (pip install selenium, in the test extra)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=f"the browser test needs Chromium: {_missing()}")


def _post(url: str, body: dict) -> None:
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()


def _load(url: str, stop: threading.Event) -> None:
    """A small steady load: batches sharing a prefix, and a schema-constrained request now and then."""
    round_ = 0
    _post(url, {"text": HOSTILE, "sampling_params": {"max_new_tokens": 2}})
    while not stop.is_set():
        _post(url, {"text": [SHARED + q for q in QUESTIONS], "sampling_params": {"max_new_tokens": 12, "temperature": 0}})
        if round_ % 3 == 0:
            _post(url, {"text": "A city as JSON:", "sampling_params": {
                "max_new_tokens": 24, "temperature": 0, "json_schema": json.dumps({"type": "object", "properties": {
                    "city": {"enum": ["Paris", "Lima"]}}, "required": ["city"]})}})
        round_ += 1


@pytest.fixture(scope="module")
def loaded_server():
    engine = Engine(max_total_tokens=16384, random_seed=0, enable_dashboard=True)
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    stop = threading.Event()
    worker = threading.Thread(target=_load, args=(srv.url, stop), daemon=True)
    worker.start()
    yield srv.url
    stop.set()
    worker.join(timeout=60)
    srv.stop()
    engine.shutdown()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="radixlm-chromium-")
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _wait(driver, what: str, script: str, timeout: float = 45.0):
    """Poll ``script`` (JavaScript returning a truthy value when ready) until it holds."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.25).until(
        lambda d: d.execute_script(script), message=f"the page never showed {what}")


def _served_enough(url: str) -> bool:
    with urllib.request.urlopen(url + "/dashboard/api/inspect", timeout=60) as resp:
        view = json.loads(resp.read())
    return len(view["requests"]) >= len(QUESTIONS) and bool(view["grammars"])


def test_first_paint_fills_every_panel(loaded_server, browser):
    """Opened after some traffic, the page's first events fill the tree, the requests and the
    grammar cache: the screenshot is taken as soon as the first inspection is drawn, and shows them."""
    _wait_until(lambda: _served_enough(loaded_server))
    browser.get(loaded_server + "/dashboard")
    _wait(browser, "the first inspection drawn", "return document.body.dataset.filled === 'yes'", timeout=20)
    png = browser.get_screenshot_as_png()  # at once: no waiting for a later tick
    filled = browser.execute_script("""return {
        nodes: document.querySelectorAll('rect.tree-node').length,
        requests: document.querySelectorAll('#requests-table tbody tr').length,
        grammars: document.querySelectorAll('#grammars-table tbody tr').length};""")
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert filled["nodes"] >= 1 and filled["requests"] >= len(QUESTIONS) and filled["grammars"] >= 1, filled


def _wait_until(ready, timeout: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "the load never produced requests and a grammar"
        time.sleep(0.5)


def test_dashboard_live_in_a_browser(loaded_server, browser):
    browser.get(loaded_server + "/dashboard")
    _wait(browser, "throughput points", """
        const p = document.querySelector('#chart-throughput path[data-key="decode_tps"]');
        return p && Number(p.dataset.points) >= 3;""")
    _wait(browser, "a decode rate above zero", """
        return [...document.querySelectorAll('#chart-throughput .legend span')]
            .some(s => /decode: [1-9]/.test(s.textContent));""")
    for chart in ("requests", "cache"):
        assert browser.execute_script(
            f"return Number(document.querySelector('#chart-{chart} path.series').dataset.points)") >= 3
    _wait(browser, "the shared prefix node", f"""
        return [...document.querySelectorAll('rect.tree-node')].some(r =>
            Number(r.dataset.children) >= {len(QUESTIONS)} &&
            r.querySelector('title').textContent.includes('shares this long system prompt'));""")
    _wait(browser, "recent requests", "return document.querySelectorAll('#requests-table tbody tr').length >= 4")
    _wait(browser, "a compiled grammar", "return document.querySelectorAll('#grammars-table tbody tr').length >= 1")
    assert "No API key is configured" in browser.find_element("id", "access-note").text
    _wait(browser, "the hostile prompt as text", """
        return [...document.querySelectorAll('rect.tree-node title')].some(t =>
            t.textContent.includes('<img src=/never-loaded'));""")
    assert browser.execute_script("return window.__pwned === undefined && !document.querySelector('img')")

    browser.find_element("id", "pg-run").click()
    _wait(browser, "the playground's end", "return document.getElementById('pg-status').textContent.startsWith('finished')")
    classes = browser.execute_script("return [...document.querySelectorAll('#pg-answer .tok')].map(s => s.className)")
    assert any("origin-forced" in c for c in classes), classes
    assert any("origin-masked" in c for c in classes), classes
    assert browser.find_elements("css selector", "#pg-prompt-tokens .tok")
    parsed = json.loads(browser.find_element("id", "pg-json").text)
    answer = "".join(browser.execute_script(
        "return [...document.querySelectorAll('#pg-answer .tok')].map(s => s.textContent)"))
    assert parsed == json.loads(answer) and set(parsed) <= {"name", "age", "city"}

    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
