"""What the fake API server's own tests share: the real kubernetes client over a module's ``server``."""

from __future__ import annotations

import pytest
from kubernetes import client

from nodeheal.sim.apiserver.server import FakeKubeApiServer


@pytest.fixture
def core(server: FakeKubeApiServer) -> client.CoreV1Api:
    """CoreV1Api of the kubernetes package, talking to the ``server`` fixture each module defines."""
    return client.CoreV1Api(server.api_client())
