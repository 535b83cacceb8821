"""Regenerate ``docs/dashboard.png``: the dashboard of a tiny server under a small load, in headless Chromium.

Starts the embedded tiny model with ``--enable-dashboard`` in this process, runs a load (agents
sharing system prompts, a salted namespace, schema-constrained requests; a small KV pool, so the
radix cache evicts), opens ``/dashboard``, runs the playground's JSON-schema example, and saves a
full-page screenshot once every panel has data.

    python benchmarks/dashboard_screenshot.py                       # -> docs/dashboard.png
    python benchmarks/dashboard_screenshot.py --out /tmp/d.png --warmup-s 30
    python benchmarks/dashboard_screenshot.py --url http://127.0.0.1:30000 --load-only 300

``--url`` uses a running server instead (``radixlm serve --enable-dashboard``, no API key);
``--load-only S`` only runs the load for S seconds, for watching the dashboard in a browser.

Needs Debian's ``chromium`` and ``chromium-driver`` and ``pip install selenium``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")
AGENTS = {
    "You are a travel agent. Plan trips, quote prices in euros and keep answers short. ": (
        "A weekend in Lisbon?", "Cheapest way to Oslo?", "Rome in July?", "Hotels near Lima?"),
    "You are a code reviewer. Point at bugs first, style second, and suggest one fix each. ": (
        "Review: for i in range(len(xs)): print(xs[i])", "Is eval(input()) safe?", "Why use a set here?"),
}
SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lima", "Oslo"]},
                                           "nights": {"type": "integer", "minimum": 1, "maximum": 14}},
          "required": ["city", "nights"], "additionalProperties": False}


def post(url: str, body: dict) -> None:
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        resp.read()


def load(url: str, stop: threading.Event) -> None:
    """Agents' batches, a salted namespace, constrained requests and one-off prompts (evictions)."""
    n = 0
    while not stop.is_set():
        for system, questions in AGENTS.items():
            post(url, {"text": [system + q for q in questions], "sampling_params": {"max_new_tokens": 24}})
        post(url, {"text": "Private notes of team B: the launch moves to May.", "cache_salt": "team-b",
                   "sampling_params": {"max_new_tokens": 8}})
        post(url, {"text": f"Trip request {n}: as JSON.", "sampling_params": {
            "max_new_tokens": 32, "json_schema": json.dumps(SCHEMA)}})
        post(url, {"text": f"One-off prompt number {n} " * 20, "sampling_params": {"max_new_tokens": 4}})
        n += 1


def shoot(url: str, out: Path, warmup_s: float) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="radixlm-chromium-")
    for flag in (*FLAGS, f"--user-data-dir={profile}", "--window-size=1500,1900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(url + "/dashboard")
        time.sleep(warmup_s)
        driver.find_element("id", "pg-run").click()
        WebDriverWait(driver, 120).until(lambda d: d.find_element("id", "pg-status").text.startswith("finished"))
        time.sleep(2.5)  # one more tree snapshot
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1500, "height": height, "deviceScaleFactor": 1, "mobile": False})
        time.sleep(1.5)
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "dashboard.png")
    parser.add_argument("--warmup-s", type=float, default=25.0, help="seconds of load before the screenshot")
    parser.add_argument("--url", default=None, help="a running server (default: a tiny one in this process)")
    parser.add_argument("--load-only", type=float, default=None, metavar="S",
                        help="only run the load for S seconds (no browser, no screenshot)")
    args = parser.parse_args()
    engine = srv = None
    if args.url is None:
        engine = Engine(max_total_tokens=3072, random_seed=0, enable_dashboard=True)
        srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    url = args.url.rstrip("/") if args.url else srv.url
    stop = threading.Event()
    worker = threading.Thread(target=load, args=(url, stop), daemon=True)
    worker.start()
    try:
        if args.load_only is not None:
            stop.wait(args.load_only)
        else:
            shoot(url, args.out, args.warmup_s)
            print(f"saved {args.out}")
    finally:
        stop.set()
        worker.join(timeout=120)
        if srv is not None:
            srv.stop()
            engine.shutdown()


if __name__ == "__main__":
    main()
