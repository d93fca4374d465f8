"""What the adapters' tests share: a fake Kubernetes API server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodeheal.sim.apiserver.server import FakeKubeApiServer


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    """A fresh fake API server (an empty cluster) for one test, stopped after it."""
    server = FakeKubeApiServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
