"""The fake's connections answer as promptly as the real server's.

kube-apiserver is a Go net/http server, and Go turns Nagle's algorithm off on every TCP connection
(``net.TCPConn.SetNoDelay``: "The default is true (no delay)"). Python's ``http.server`` leaves it on
and writes an answer as headers, then body: on a keep-alive connection the body then waits for the
client's delayed ACK of the headers, at least 40 ms on Linux. Every request of every test would pay
it, and the local pipeline's timings (``make bench``) with it.
"""

from __future__ import annotations

import time

from nodeheal.kube.client import StaticClientProvider
from nodeheal.kube.nodes import NodeOperations
from nodeheal.sim.apiserver import FakeKubeApiServer, make_node

REQUESTS = 50
#: With the delayed ACK, 50 answers take at least 50 x 40 ms = 2 s; without it, milliseconds each.
WITHIN_SECONDS = 1.0


def test_answers_on_a_kept_alive_connection_do_not_wait_for_a_delayed_ack() -> None:
    with FakeKubeApiServer() as server:
        server.store.add(make_node("gpu-a", instance_id="i-0a"))
        nodes = NodeOperations(StaticClientProvider(server.url).transport("sim"))
        assert nodes.get("gpu-a") is not None  # the connection is open and kept
        started = time.monotonic()
        for _ in range(REQUESTS):
            assert nodes.get("gpu-a") is not None
        took = time.monotonic() - started
    assert took < WITHIN_SECONDS, f"{REQUESTS} requests took {took:.2f}s"
