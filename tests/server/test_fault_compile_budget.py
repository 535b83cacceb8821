"""Over HTTP (a live ``radixlm serve`` on loopback): a constraint whose matcher automaton is over
``--grammar-matcher-max-mb`` is a 400 naming the bound, measured in the compile worker, and the
server goes on answering; ``/flush_cache`` still succeeds with grammars cached."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_process import serve  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def post(base: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_matcher_over_the_bound_is_a_400_and_the_server_goes_on(tiny_llama, tmp_path):
    with serve(tiny_llama, tmp_path, "--grammar-matcher-max-mb", "32") as client:
        base = str(client.base_url).removesuffix("/v1/")
        status, body = post(base, "/generate", {"text": "Code:", "sampling_params": {
            "max_new_tokens": 8, "regex": "x{400000}"}})
        assert status == 400, body
        assert "over the 32 MB bound (--grammar-matcher-max-mb)" in body["error"]["message"], body
        status, body = post(base, "/v1/completions", {"model": "default", "prompt": "Code:", "max_tokens": 8,
                                                      "regex": "x{400000}"})
        assert status == 400 and "--grammar-matcher-max-mb" in body["error"]["message"], body
        status, body = post(base, "/generate", {"text": "Code:", "sampling_params": {
            "max_new_tokens": 4, "regex": "[a-z]{4}"}})
        assert status == 200 and len(body["text"]) == 4, body
        with urllib.request.urlopen(urllib.request.Request(base + "/flush_cache", b"{}", {"Content-Type": "application/json"}), timeout=60) as r:
            assert r.status == 200
        with urllib.request.urlopen(base + "/health", timeout=60) as r:
            assert r.status == 200
