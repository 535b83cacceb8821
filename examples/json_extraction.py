"""Structured extraction: a pydantic model -> a JSON-schema-constrained reply through the ``openai`` client.

Starts ``radixlm serve`` on a free port (the embedded tiny model unless ``--model-path``) and stops
it at the end, or talks to a running server with ``--base-url http://host:port``. The reply is
constrained by the model's JSON schema, so ``model_validate_json`` always succeeds, even with
random weights.

    python3 examples/json_extraction.py
    radixlm serve --port 30000 & python3 examples/json_extraction.py --base-url http://127.0.0.1:30000
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Literal

from openai import OpenAI
from pydantic import BaseModel, ConfigDict, Field


class Invoice(BaseModel):
    # additionalProperties: false in the schema, as OpenAI's strict structured outputs want: without
    # it, JSON Schema allows (and the grammar generates) extra members.
    model_config = ConfigDict(extra="forbid")

    vendor: Literal["Acme", "Globex", "Initech"]
    total_cents: int = Field(ge=0, le=10_000_000)
    currency: Literal["EUR", "USD", "GBP"]
    paid: bool


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_server(model_path: str | None, timeout_s: float = 60.0) -> Iterator[str]:
    """Run ``radixlm serve`` as a subprocess until the block exits; yields its base URL."""
    port = _free_port()
    cmd = [sys.executable, "-m", "radixlm", "serve", "--port", str(port), "--max-total-tokens", "8192",
           "--no-log-requests"]
    if model_path:
        cmd += ["--model-path", model_path]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"radixlm serve exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"radixlm serve did not answer /health within {timeout_s} s") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def extract(client: OpenAI, text: str) -> Invoice:
    """Ask for the invoice fields of ``text``, constrained to ``Invoice``'s JSON schema."""
    reply = client.chat.completions.create(
        model=client.models.list().data[0].id,
        messages=[{"role": "system", "content": "Extract the invoice fields as JSON."},
                  {"role": "user", "content": text}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "invoice", "schema": Invoice.model_json_schema()}},
        temperature=0, max_tokens=128)  # the longest Invoice document, one token per character, fits
    return Invoice.model_validate_json(reply.choices[0].message.content)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default=None, help="a running radixlm server (default: start one)")
    ap.add_argument("--model-path", default=None, help="checkpoint for the server this script starts")
    args = ap.parse_args()
    texts = ["Globex billed us 1,250.00 EUR for March; paid on the 3rd.",
             "Initech invoice: USD 89.99, still open."]
    server = contextlib.nullcontext(args.base_url) if args.base_url else local_server(args.model_path)
    with server as url:
        client = OpenAI(base_url=url + "/v1", api_key="none")
        for text in texts:
            print(f"{text!r}\n  -> {extract(client, text)!r}")


if __name__ == "__main__":
    main()
