"""A loopback HTTP server that answers from a script and records what it was asked.

The fake API server is the faithful stand-in for behaviour; this one is for the failures that
are awkward to provoke there (non-JSON proxy errors, hung responses, exact request bytes).
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Reply:
    status: int
    body: Any = None
    content_type: str = "application/json"
    delay: float = 0.0

    def encoded(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    #: The request line's target as sent: a path, or an absolute URI when sent through a proxy.
    target: str = ""


@dataclass
class Script:
    replies: deque[Reply] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *replies: Reply) -> None:
        self.replies.extend(replies)


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _handler(script: Script) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            with script.lock:
                script.requests.append(
                    Recorded(
                        method=self.command,
                        path=parts.path,
                        query=dict(parse_qsl(parts.query)),
                        headers={k.lower(): v for k, v in self.headers.items()},
                        body=json.loads(raw) if raw else None,
                        target=self.path,
                    )
                )
                unscripted = Reply(500, status(500, "", "unscripted"))
                reply = script.replies.popleft() if script.replies else unscripted
            if reply.delay:
                time.sleep(reply.delay)
            payload = reply.encoded()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_PATCH(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def scripted_server(tls: ssl.SSLContext | None = None) -> Iterator[tuple[str, Script]]:
    """Serve on a loopback port; with ``tls``, HTTPS with that server context."""
    script = Script()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        scheme = "https" if tls is not None else "http"
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}", script
    finally:
        server.shutdown()
        server.server_close()
