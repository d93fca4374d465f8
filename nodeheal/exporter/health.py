"""``/metrics``, ``/healthz`` and ``/readyz`` on one small stdlib HTTP server (``--http-port``).

``/metrics`` is :class:`~nodeheal.exporter.metrics.Metrics`' registry in the format the scraper's
``Accept`` header asks for; the probes and the scrape share the port the Service exposes.

Liveness and readiness mean different things, as the kubelet uses them differently:

* ``/readyz``: the first list is done, so this replica knows the cluster's state. Until then a
  rollout must not count it as available.
* ``/healthz``: the watcher thread is alive and the API server answered recently. A watcher stuck
  on a dead connection (or a wedged process) fails it and the kubelet restarts the pod.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from nodeheal.exporter.metrics import Metrics


class HealthState:
    """What the probes read; the watcher writes it."""

    def __init__(self, max_api_silence_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_silence = max_api_silence_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._last_contact = clock()
        self._ready = False
        self._watchers: list[Callable[[], bool]] = []

    def api_contact(self) -> None:
        with self._lock:
            self._last_contact = self._clock()

    def mark_ready(self) -> None:
        with self._lock:
            self._ready = True

    def add_liveness_check(self, alive: Callable[[], bool]) -> None:
        self._watchers.append(alive)

    @property
    def ready(self) -> bool:
        with self._lock:
            return self._ready

    def seconds_since_api_contact(self) -> float:
        with self._lock:
            return self._clock() - self._last_contact

    def live(self) -> tuple[bool, str]:
        silence = self.seconds_since_api_contact()
        if silence > self._max_silence:
            return False, f"no answer from the API server for {silence:.0f}s"
        if not all(alive() for alive in self._watchers):
            return False, "a watcher thread is not running"
        return True, "ok"


class HealthServer:
    def __init__(self, host: str, port: int, state: HealthState, metrics: Metrics) -> None:
        handler = _handler_class(state, metrics)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_class(state: HealthState, metrics: Metrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                scrape, content_type = metrics.exposition(self.headers.get("Accept", ""))
                self._send(200, scrape, content_type)
            elif path == "/healthz":
                ok, detail = state.live()
                self._send(200 if ok else 503, json.dumps({"ok": ok, "detail": detail}), "application/json")
            elif path == "/readyz":
                ready = state.ready
                body = json.dumps({"ok": ready, "detail": "first list done" if ready else "listing"})
                self._send(200 if ready else 503, body, "application/json")
            else:
                self._send(404, json.dumps({"ok": False, "detail": "not found"}), "application/json")

        def _send(self, code: int, body: str | bytes, content_type: str) -> None:
            data = body if isinstance(body, bytes) else body.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return  # probes every few seconds would drown the JSON log

    return Handler
