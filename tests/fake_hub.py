"""A loopback stand-in for the Hugging Face hub's HTTP API, serving local folders as repositories.

It answers what ``huggingface_hub.snapshot_download`` asks for: the repository's revision info
(``/api/models/<repo>/revision/<rev>``), its file listing (``/api/models/<repo>/tree/<rev>``) and
each file's ``resolve`` URL (HEAD
for the metadata headers, GET for the bytes). Unknown repositories get the hub's 404 with
``X-Error-Code: RepoNotFound``; gated ones its 403 with ``GatedRepo``. Point a process at it with
``HF_ENDPOINT=fake.url``; ``requests`` records every path asked for.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


class FakeHub:
    """``repos`` maps ``org/name`` to a local folder; ``gated`` names repositories that need a token."""

    def __init__(self, repos: dict[str, Path], gated: tuple[str, ...] = ()) -> None:
        self.repos = {k: Path(v) for k, v in repos.items()}
        self.gated = set(gated)
        self.commit = hashlib.sha1(b"".join(k.encode() for k in sorted(repos))).hexdigest()
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep the test output quiet
                pass

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                hub.requests.append(f"HEAD {self.path}")
                hub._answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub.requests.append(f"GET {self.path}")
                hub._answer(self, body=True)

        return Handler

    def _repo_and_rest(self, parts: list[str]) -> tuple[str | None, list[str]]:
        for n in (2, 1):
            repo = "/".join(parts[:n])
            if repo in self.repos or repo in self.gated:
                return repo, parts[n:]
        return None, parts[2:]

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        parts = [unquote(p) for p in urlparse(h.path).path.strip("/").split("/")]
        if parts[:2] == ["api", "models"]:
            repo, rest = self._repo_and_rest(parts[2:])
            if repo is None or repo in self.gated:
                return self._error(h, repo, body)
            if len(rest) < 2 or rest[1] not in ("main", self.commit):
                return self._send(h, 404, b'{"error":"Revision not found"}',
                                  {"X-Error-Code": "RevisionNotFound"}, body)
            files = sorted(p.relative_to(self.repos[repo]).as_posix()
                           for p in self.repos[repo].rglob("*") if p.is_file())
            if rest[0] == "tree":  # the file listing
                info = [{"type": "file", "path": f, "size": (self.repos[repo] / f).stat().st_size,
                         "oid": hashlib.sha1((self.repos[repo] / f).read_bytes()).hexdigest()} for f in files]
            else:  # revision info
                info = {"id": repo, "modelId": repo, "sha": self.commit, "private": False,
                        "siblings": [{"rfilename": f} for f in files]}
            return self._send(h, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
        repo, rest = self._repo_and_rest(parts)
        if repo is None or repo in self.gated or len(rest) < 3 or rest[0] != "resolve":
            return self._error(h, repo, body)
        file = self.repos[repo] / "/".join(rest[2:])
        if not file.is_file():
            return self._send(h, 404, b"", {"X-Error-Code": "EntryNotFound"}, body)
        data = file.read_bytes()
        headers = {"X-Repo-Commit": self.commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                   "Content-Type": "application/octet-stream"}
        self._send(h, 200, data, headers, body)

    def _error(self, h: BaseHTTPRequestHandler, repo: str | None, body: bool) -> None:
        if repo in self.gated:
            return self._send(h, 403, b'{"error":"gated"}', {"X-Error-Code": "GatedRepo"}, body)
        self._send(h, 404, b'{"error":"Repository not found"}', {"X-Error-Code": "RepoNotFound"}, body)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)
